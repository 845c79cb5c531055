"""A timing model of Qwen3-30B-A3B on the two-chiplet device, calibrated to the seed's decode trend.

One infer call costs H2D + infer + D2H. Infer is a fixed per-call overhead, plus streaming the weights
the call touches from DRAM (or the matrix compute, whichever is longer), plus reading the KV cache
for attention, plus the reductions on the chiplet link. Each chiplet streams its half.

Two parameters are fitted to the seed (P04: 58-64 token/s at short context; P05: about 12 token/s
near 33K): the DRAM bandwidth per chiplet and the fraction of it attention reaches. Both equations are
linear in the inverse bandwidths, so the fit is solved by hand:
    the 33K and 512 points differ only in KV bytes -> attention bandwidth = 32488 * 49152 B / 66.94 ms;
    the 512 point then leaves the weight time -> DRAM bandwidth.
Everything else (compute, link, PCIe, overhead) is an assumption; the seed measures none of it (V28,
V38). With a cost linear in context, 12 token/s at 33K implies about 10 token/s at 40960, the low
end of the 10-16 the seed reports there.
"""

from dataclasses import dataclass, field
from typing import Any

from npu_sim.chips import CALCULET_2C
from npu_sim.kv import kv_cache_bytes
from npu_sim.model import PRESETS, ModelConfig

# Parameter files of the current calbin (A02 chip 0, A03 chip 1) and chip 0's DRAM reservation (A05).
PARAM_BYTES_CHIP0 = 9_404_557_312
PARAM_BYTES_CHIP1 = 8_782_227_456
RESERVATION_PER_CHIPLET = 15_113_064_448

ACTIVATION_BYTES = 2  # BF16 activations on the link
TOKEN_BYTES = 4  # INT32 token ids (A09/A10)
LOGIT_BYTES = 2  # BF16 logits (A11)


@dataclass(frozen=True)
class CallTime:
    h2d_ms: float
    infer_ms: float
    d2h_ms: float

    @property
    def total_ms(self) -> float:
        return self.h2d_ms + self.infer_ms + self.d2h_ms

    def scaled(self, factor: float) -> "CallTime":
        return CallTime(self.h2d_ms * factor, self.infer_ms * factor, self.d2h_ms * factor)


@dataclass(frozen=True)
class Anchor:
    point: str
    context: int
    low: float
    high: float
    nominal: float


# The seed's figures: P04 short context 58-64 token/s; P05 about 12 near 33K and 10-16 near 40K.
ANCHORS = (
    Anchor("P04 short context", 512, 58.0, 64.0, 61.0),
    Anchor("P05 ~33K", 33_000, 12.0, 12.0, 12.0),
    Anchor("P05 ~40K", 40_960, 10.0, 16.0, 13.0),
)


@dataclass(frozen=True)
class TimingModel:
    config: ModelConfig = field(default_factory=lambda: PRESETS["full"])
    chiplets: int = 2
    # Fitted to P04/P05 (see the module docstring).
    dram_gb_s_per_chiplet: float = 66.45
    attention_efficiency: float = 0.359
    # Assumptions.
    compute_tflops_per_chiplet: float = 20.0
    link_gb_s: float = 32.0
    link_latency_us: float = 5.0
    pcie_gb_s: float = 12.0
    pcie_latency_us: float = 10.0
    call_overhead_ms: float = 1.0
    # The current calbin's parameter files over the full model's parameter count: about 0.6 B per
    # parameter for the W8A8/W4AF16 mix.
    weight_bytes_per_param: float = (PARAM_BYTES_CHIP0 + PARAM_BYTES_CHIP1) / PRESETS["full"].parameter_count()

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per layer for `tokens` tokens, if routing were uniform."""
        c = self.config
        return c.experts * (1.0 - (1.0 - c.experts_per_token / c.experts) ** tokens)

    def kv_bytes_per_position(self) -> int:
        return kv_cache_bytes(self.config, 1, 1)

    def _weights_ms(self, tokens: int) -> float:
        c = self.config
        dense = c.layers * c.attention_parameters_per_layer() + c.vocab * c.hidden + c.hidden
        experts = c.layers * self.experts_touched(tokens) * c.expert_parameters()
        per_chiplet = (dense + experts) * self.weight_bytes_per_param / self.chiplets
        return per_chiplet / (self.dram_gb_s_per_chiplet * 1e6)

    def _compute_ms(self, flops: float) -> float:
        return flops / self.chiplets / (self.compute_tflops_per_chiplet * 1e9)

    def _link_ms(self, rows: int, logit_rows: int) -> float:
        """Two all-reduces per layer, the embedding sent to chiplet 1, half the logits sent back."""
        c = self.config
        transfers = [rows * c.hidden * ACTIVATION_BYTES] * (2 * c.layers + 1)
        transfers.append(logit_rows * c.vocab // 2 * LOGIT_BYTES)
        return sum(self.link_latency_us / 1e3 + size / (self.link_gb_s * 1e6) for size in transfers)

    def _pcie_ms(self, size: int) -> float:
        return self.pcie_latency_us / 1e3 + size / (self.pcie_gb_s * 1e6)

    def decode_call(self, contexts: list[int]) -> CallTime:
        """One decode step for lanes at these context lengths (each lane reads its own KV)."""
        c, lanes = self.config, len(contexts)
        matmul_ms = max(self._weights_ms(lanes), self._compute_ms(2.0 * c.active_parameter_count() * lanes))
        kv_bytes = sum(contexts) * self.kv_bytes_per_position() / self.chiplets
        attention_ms = kv_bytes / (self.dram_gb_s_per_chiplet * self.attention_efficiency * 1e6)
        infer_ms = self.call_overhead_ms + matmul_ms + attention_ms + self._link_ms(lanes, lanes)
        return CallTime(self._pcie_ms(lanes * TOKEN_BYTES), infer_ms, self._pcie_ms(lanes * c.vocab * LOGIT_BYTES))

    def prefill_call(self, tokens: int, start: int = 0) -> CallTime:
        """A prefill of `tokens` tokens after `start` cached ones; only the last token's logits return."""
        c = self.config
        matmul_ms = max(self._weights_ms(tokens), self._compute_ms(2.0 * c.active_parameter_count() * tokens))
        # Causal attention: token i attends to start + i + 1 positions, 4 flops per position per head dim.
        positions = tokens * start + tokens * (tokens + 1) / 2
        attention_ms = self._compute_ms(4.0 * c.layers * c.q_heads * c.head_dim * positions)
        infer_ms = self.call_overhead_ms + matmul_ms + attention_ms + self._link_ms(tokens, 1)
        return CallTime(self._pcie_ms(tokens * TOKEN_BYTES), infer_ms, self._pcie_ms(c.vocab * LOGIT_BYTES))

    def decode_ms_per_token(self, context: int, batch: int = 1) -> float:
        """Time of one decode step with `batch` lanes at `context`: each lane gets one token."""
        return self.decode_call([context] * batch).total_ms

    def decode_tokens_per_s(self, context: int, batch: int = 1) -> float:
        """Tokens per second over all lanes."""
        return batch * 1000.0 / self.decode_ms_per_token(context, batch)

    def prefill_ms(self, tokens: int) -> float:
        return self.prefill_call(tokens).total_ms


def context_rows(model: TimingModel, contexts: list[int], batch: int = 1) -> list[dict[str, Any]]:
    """One row per context length: what `timing --contexts` prints."""
    rows = []
    for context in contexts:
        ms = model.decode_ms_per_token(context, batch)
        rows.append(
            {
                "context": context,
                "batch": batch,
                "decode_ms_per_token": round(ms, 3),
                "decode_tokens_per_s": round(batch * 1000.0 / ms, 3),
                "per_sequence_tokens_per_s": round(1000.0 / ms, 3),
                "prefill_ms": round(model.prefill_ms(context), 3),
                "kv_cache_bytes": kv_cache_bytes(model.config, context, batch),
            }
        )
    return rows


def calibration_rows(model: TimingModel | None = None) -> list[dict[str, Any]]:
    """Predicted decode token/s at the seed's anchor points, with the error against each."""
    model = model or TimingModel()
    rows = []
    for anchor in ANCHORS:
        predicted = model.decode_tokens_per_s(anchor.context)
        seed_range = f"{anchor.low:g}-{anchor.high:g}" if anchor.low != anchor.high else f"about {anchor.nominal:g}"
        rows.append(
            {
                "point": anchor.point,
                "context": anchor.context,
                "seed_tokens_per_s": seed_range,
                "anchor_tokens_per_s": anchor.nominal,
                "predicted_tokens_per_s": round(predicted, 2),
                "error_pct": round((predicted - anchor.nominal) / anchor.nominal * 100, 1),
                "within_seed_range": anchor.low * 0.9 <= predicted <= anchor.high * 1.1,
            }
        )
    return rows


def capacity_rows(
    model: TimingModel | None = None, batches: tuple[int, ...] = (1, 4, 8, 16), speed_context: int = 4096
) -> list[dict[str, Any]]:
    """KV capacity and decode speed per decode batch (V18), on the current calbin's memory layout.

    Chip 0 holds the larger parameter file (A02). Its reservation (A05) minus those parameters and
    one lane of KV at 40960 is taken as workspace that does not grow with the batch. DRAM per
    chiplet is the simulator's assumption (chips.py).
    """
    model = model or TimingModel()
    c = model.config
    kv_per_chiplet_one_lane = kv_cache_bytes(c, c.max_seq_len, 1) // model.chiplets
    workspace = RESERVATION_PER_CHIPLET - PARAM_BYTES_CHIP0 - kv_per_chiplet_one_lane
    free_for_kv = CALCULET_2C.dram_bytes_per_chiplet - PARAM_BYTES_CHIP0 - workspace
    per_position_per_chiplet = model.kv_bytes_per_position() // model.chiplets
    rows = []
    for batch in batches:
        kv_at_max = kv_cache_bytes(c, c.max_seq_len, batch)
        max_context = min(c.max_seq_len, free_for_kv // (batch * per_position_per_chiplet))
        context = min(speed_context, max_context)
        rows.append(
            {
                "batch": batch,
                "kv_bytes_at_max_seq": kv_at_max,
                "kv_gib_per_chiplet_at_max_seq": round(kv_at_max / model.chiplets / 2**30, 3),
                "fits_at_max_seq": max_context == c.max_seq_len,
                "max_context_per_lane": max_context,
                "speed_context": context,
                "decode_tokens_per_s": round(model.decode_tokens_per_s(context, batch), 1),
                "per_sequence_tokens_per_s": round(model.decode_tokens_per_s(context, batch) / batch, 1),
                "decode_tokens_per_s_at_max_context": round(model.decode_tokens_per_s(max_context, batch), 1),
            }
        )
    return rows
