"""A timing model of Qwen3-30B-A3B on the Calculet device, calibrated to the seed's decode trend.

One infer call costs H2D + infer + D2H (+ sampling on the device, + ops that fall back to the host).
Infer is a fixed per-call overhead, plus streaming the weights the call touches from DRAM (or the
matrix compute, whichever is longer), plus reading the KV cache for attention, plus the links. How those
split over chiplets follows the package's layout (see `TimingModel`), and the package sets the rest:
weight and KV dtypes, decode batch, device sampling. `package_timing` builds the model for a package.

Two parameters are fitted (`fit_calibration`) to two of the seed's figures, P04 (58-64 token/s at short
context) and P05 (about 12 token/s near 33K): the DRAM bandwidth per chiplet and the fraction of it
attention reaches. The third figure, P05 near 40K (10-16 token/s), is held out: the fit never sees it,
and `calibration_rows` reports how far the prediction lands from it. Everything else (compute, links,
PCIe, overhead, sampling, host fallback) is an assumption; the seed measures none of it (V28, V38).
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from npu_sim.chips import CALCULET_2C
from npu_sim.kv import kv_cache_bytes
from npu_sim.model import PRESETS, ModelConfig

if TYPE_CHECKING:
    from npu_sim.loaded_calbin import Calbin

# Parameter files of the current calbin (A02 chip 0, A03 chip 1) and chip 0's DRAM reservation (A05).
PARAM_BYTES_CHIP0 = 9_404_557_312
PARAM_BYTES_CHIP1 = 8_782_227_456
RESERVATION_PER_CHIPLET = 15_113_064_448
# The current calbin's parameter files over the full model's parameter count: about 0.6 B per parameter
# for its W8A8/W4AF16 mix. The simulator's float32 weights stand in for that mix when timed.
CURRENT_BYTES_PER_PARAM = (PARAM_BYTES_CHIP0 + PARAM_BYTES_CHIP1) / PRESETS["full"].parameter_count()
WEIGHT_BYTES_PER_PARAM = {"f32": CURRENT_BYTES_PER_PARAM, "s8": 1.0}
KV_BYTES = {"bf16": 2, "s8": 1}

ACTIVATION_BYTES = 2  # BF16 activations on the links
TOKEN_BYTES = 4  # INT32 token ids (A09/A10)
LOGIT_BYTES = 2  # BF16 logits (A11)
SAMPLING_PARAM_BYTES = 16  # temperature, top_k, top_p, seed per lane


@dataclass(frozen=True)
class CallTime:
    h2d_ms: float
    infer_ms: float
    d2h_ms: float
    sampling_ms: float = 0.0  # device sampling (V17)
    fallback_ms: float = 0.0  # ops run on the host, with their transfers (V11)
    # Where infer_ms goes, by op: (op, ms). For the trace.
    parts: tuple[tuple[str, float], ...] = ()

    @property
    def total_ms(self) -> float:
        return self.h2d_ms + self.infer_ms + self.d2h_ms + self.sampling_ms + self.fallback_ms

    def scaled(self, factor: float) -> "CallTime":
        return CallTime(
            self.h2d_ms * factor,
            self.infer_ms * factor,
            self.d2h_ms * factor,
            self.sampling_ms * factor,
            self.fallback_ms * factor,
            tuple((op, ms * factor) for op, ms in self.parts),
        )


@dataclass(frozen=True)
class Anchor:
    point: str
    context: int
    low: float
    high: float
    nominal: float
    fitted: bool  # False: held out, the fit does not use it


# The seed's figures: P04 short context 58-64 token/s; P05 about 12 near 33K and 10-16 near 40K.
ANCHORS = (
    Anchor("P04 short context", 512, 58.0, 64.0, 61.0, fitted=True),
    Anchor("P05 ~33K", 33_000, 12.0, 12.0, 12.0, fitted=True),
    Anchor("P05 ~40K", 40_960, 10.0, 16.0, 13.0, fitted=False),
)


@dataclass(frozen=True)
class Calibration:
    dram_gb_s_per_chiplet: float
    attention_efficiency: float
    residuals_tokens_per_s: dict[str, float]  # prediction - anchor at each fitted point


@dataclass(frozen=True)
class TimingModel:
    """Device time of one call. By layout:

    - tp: each chiplet streams half the weights and reads half the KV (its KV heads); two all-reduces
      per layer, the embedding and half the logits cross the chiplet link.
    - single_chiplet: one chiplet streams and reads everything; no link.
    - pp: the two stages run one after the other, so the weights and KV stream as on one chiplet; the
      activations cross the link once.
    - ep: each chiplet streams the dense weights for its own tokens and half the experts, reads the KV
      of its own lanes; dispatch and combine cross the link twice per layer (all-to-all).
    - multi_board: tp on each board, the boards one after the other (so the weights stream as tp),
      plus the activations crossing the board link once.
    """

    config: ModelConfig = field(default_factory=lambda: PRESETS["full"])
    layout: str = "tp"
    weight_bytes_per_param: float = CURRENT_BYTES_PER_PARAM
    k_bytes: int = 2
    v_bytes: int = 2
    # Fitted to P04/P05 (`fit_calibration`); the defaults are the fit's result, checked by a test.
    dram_gb_s_per_chiplet: float = 65.72
    attention_efficiency: float = 0.3630
    # Assumptions.
    compute_tflops_per_chiplet: float = 20.0
    link_gb_s: float = 32.0
    link_latency_us: float = 5.0
    pcie_gb_s: float = 12.0
    pcie_latency_us: float = 10.0
    call_overhead_ms: float = 1.0
    board_link_gb_s: float = 25.0
    board_link_latency_us: float = 10.0
    sampling_overhead_us: float = 20.0
    host_op_ms: float = 0.2

    @property
    def chiplets(self) -> int:
        """Chiplets that work on one call at the same time."""
        return 1 if self.layout in ("single_chiplet", "pp") else 2

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per layer for `tokens` tokens, if routing were uniform."""
        c = self.config
        return c.experts * (1.0 - (1.0 - c.experts_per_token / c.experts) ** tokens)

    def kv_bytes_per_position(self) -> int:
        c = self.config
        return c.layers * c.kv_heads * c.head_dim * (self.k_bytes + self.v_bytes)

    def _dense_parameters(self) -> int:
        c = self.config
        return c.layers * c.attention_parameters_per_layer() + c.vocab * c.hidden + c.hidden

    def _weights_ms(self, tokens: int) -> float:
        c = self.config
        dense = self._dense_parameters() * self.weight_bytes_per_param
        experts = c.layers * self.experts_touched(tokens) * c.expert_parameters() * self.weight_bytes_per_param
        per_chiplet = dense + experts / 2 if self.layout == "ep" else (dense + experts) / self.chiplets
        return per_chiplet / (self.dram_gb_s_per_chiplet * 1e6)

    def _compute_ms(self, flops: float) -> float:
        return flops / self.chiplets / (self.compute_tflops_per_chiplet * 1e9)

    def _transfer_ms(self, size: float, gb_s: float, latency_us: float) -> float:
        return latency_us / 1e3 + size / (gb_s * 1e6)

    def _link_ms(self, rows: int, logit_rows: int) -> float:
        c = self.config
        hidden = rows * c.hidden * ACTIVATION_BYTES
        link = self.link_gb_s, self.link_latency_us
        if self.layout in ("tp", "multi_board"):
            # Two all-reduces per layer and the embedding sent to chiplet 1, then half the logits sent back.
            ms = (2 * c.layers + 1) * self._transfer_ms(hidden, *link)
            ms += self._transfer_ms(logit_rows * c.vocab // 2 * LOGIT_BYTES, *link)
            if self.layout == "multi_board":
                ms += self._transfer_ms(hidden, self.board_link_gb_s, self.board_link_latency_us)
            return ms
        if self.layout == "ep":
            remote = 1.0 - 0.5**c.experts_per_token  # a token with an expert on the other chiplet
            return 2 * c.layers * self._transfer_ms(hidden * remote, *link)
        if self.layout == "pp":
            return self._transfer_ms(hidden, *link)
        return 0.0

    def _pcie_ms(self, size: int) -> float:
        return self._transfer_ms(size, self.pcie_gb_s, self.pcie_latency_us)

    def _sampling_ms(self, lanes: int) -> float:
        per_lane = self.sampling_overhead_us / 1e3 + self.config.vocab * LOGIT_BYTES / (
            self.dram_gb_s_per_chiplet * 1e6
        )
        return lanes * per_lane

    def _fallback_ms(self, rows: int, host_ops: int) -> float:
        """Each host op: its activations to the host and back over PCIe, and the host's own time."""
        there_and_back = 2 * self._pcie_ms(rows * self.config.hidden * 4)
        return host_ops * (there_and_back + self.host_op_ms)

    def _call(
        self, rows: int, logit_rows: int, weights_ms: float, attention_ms: float, sampling: bool, host_ops: int
    ) -> CallTime:
        c = self.config
        link_ms = self._link_ms(rows, logit_rows)
        infer_ms = self.call_overhead_ms + weights_ms + attention_ms + link_ms
        parts: tuple[tuple[str, float], ...] = (
            ("overhead", self.call_overhead_ms),
            ("matmul", weights_ms),
            ("attention", attention_ms),
            ("link", link_ms),
        )
        h2d = rows * TOKEN_BYTES + (logit_rows * SAMPLING_PARAM_BYTES if sampling else 0)
        d2h = logit_rows * TOKEN_BYTES if sampling else logit_rows * c.vocab * LOGIT_BYTES
        return CallTime(
            self._pcie_ms(h2d),
            infer_ms,
            self._pcie_ms(d2h),
            self._sampling_ms(logit_rows) if sampling else 0.0,
            self._fallback_ms(rows, host_ops),
            parts,
        )

    def decode_call(self, contexts: list[int], sampling: bool = False, host_ops: int = 0) -> CallTime:
        """One decode step for lanes at these context lengths (each lane reads its own KV)."""
        c, lanes = self.config, len(contexts)
        matmul_ms = max(self._weights_ms(lanes), self._compute_ms(2.0 * c.active_parameter_count() * lanes))
        kv_bytes = sum(contexts) * self.kv_bytes_per_position() / self.chiplets
        attention_ms = kv_bytes / (self.dram_gb_s_per_chiplet * self.attention_efficiency * 1e6)
        return self._call(lanes, lanes, matmul_ms, attention_ms, sampling, host_ops)

    def prefill_call(
        self, tokens: int, start: int = 0, sampling: bool = False, host_ops: int = 0, sequences: int = 1
    ) -> CallTime:
        """A prefill of `tokens` tokens in all after `start` cached ones; the last token of each sequence
        returns its logits."""
        c = self.config
        matmul_ms = max(self._weights_ms(tokens), self._compute_ms(2.0 * c.active_parameter_count() * tokens))
        # Causal attention: token i attends to start + i + 1 positions, 4 flops per position per head dim.
        positions = tokens * start + tokens * (tokens + 1) / 2
        attention_ms = self._compute_ms(4.0 * c.layers * c.q_heads * c.head_dim * positions)
        return self._call(tokens, sequences, matmul_ms, attention_ms, sampling, host_ops)

    def decode_ms_per_token(self, context: int, batch: int = 1) -> float:
        """Time of one decode step with `batch` lanes at `context`: each lane gets one token."""
        return self.decode_call([context] * batch).total_ms

    def decode_tokens_per_s(self, context: int, batch: int = 1) -> float:
        """Tokens per second over all lanes."""
        return batch * 1000.0 / self.decode_ms_per_token(context, batch)

    def prefill_ms(self, tokens: int) -> float:
        return self.prefill_call(tokens).total_ms

    def parameters_per_chiplet(self) -> float:
        """Parameter bytes the busiest chiplet holds."""
        c = self.config
        total = c.parameter_count() * self.weight_bytes_per_param
        if self.layout == "single_chiplet":
            return total
        if self.layout == "ep":
            experts = c.layers * c.experts * c.expert_parameters() * self.weight_bytes_per_param
            return total - experts / 2
        return total / (4 if self.layout == "multi_board" else 2)


def fit_calibration(anchors: tuple[Anchor, ...] = ANCHORS) -> Calibration:
    """Least squares over the fitted anchors for the two inverse bandwidths, in which a decode step's
    time is linear: t(c) = fixed(c) + weight_bytes / B + kv_bytes(c) / (B * efficiency)."""
    unit = TimingModel(dram_gb_s_per_chiplet=1.0, attention_efficiency=1.0)
    rows, targets = [], []
    for anchor in anchors:
        if not anchor.fitted:
            continue
        weights_ms = unit._weights_ms(1)  # ms at 1 GB/s
        kv_ms = anchor.context * unit.kv_bytes_per_position() / unit.chiplets / 1e6
        call = unit.decode_call([anchor.context])
        fixed = call.total_ms - weights_ms - kv_ms
        rows.append([weights_ms, kv_ms])
        targets.append(1000.0 / anchor.nominal - fixed)
    (u, w), *_ = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)
    dram, efficiency = 1.0 / u, u / w
    fitted = TimingModel(dram_gb_s_per_chiplet=dram, attention_efficiency=efficiency)
    residuals = {a.point: fitted.decode_tokens_per_s(a.context) - a.nominal for a in anchors if a.fitted}
    return Calibration(float(dram), float(efficiency), residuals)


@dataclass(frozen=True)
class PackageTiming:
    """The timing model for a package, and whether it predicts at the scale the package stands for."""

    model: TimingModel  # what the device's clock runs on
    predicted: bool  # False: the package cannot run at its timing scale; the clock runs at its own size
    scale: str  # the preset whose dimensions `model` uses, or "package"
    note: str


def package_timing(calbin: "Calbin") -> PackageTiming:
    """From the package: the scale it stands for (timing_preset), layout, weight and KV dtypes, and a
    check that its parameters and KV cache fit a chiplet at that scale."""
    inputs: dict[str, Any] = {
        "layout": calbin.layout,
        "weight_bytes_per_param": WEIGHT_BYTES_PER_PARAM[calbin.weight_dtype],
        "k_bytes": KV_BYTES[calbin.k_dtype],
        "v_bytes": KV_BYTES[calbin.v_dtype],
    }
    own = TimingModel(config=calbin.config, **inputs)
    preset = calbin.timing_preset
    if preset is None:
        return PackageTiming(own, True, "package", "timed at the package's own dimensions")
    scaled = TimingModel(config=PRESETS[preset], **inputs)
    per_chiplet = 1 if calbin.layout == "single_chiplet" else 4 if calbin.layout == "multi_board" else 2
    kv = kv_cache_bytes(PRESETS[preset], calbin.max_seq_len, calbin.decode_lanes, calbin.k_dtype, calbin.v_dtype)
    needed = scaled.parameters_per_chiplet() + kv / per_chiplet
    if needed > CALCULET_2C.dram_bytes_per_chiplet:
        note = (
            f"no prediction at {preset} scale: a chiplet would hold {needed / 2**30:.1f} GiB of parameters and KV, "
            f"more than its {CALCULET_2C.dram_bytes_per_chiplet / 2**30:.0f} GiB; the device clock runs at the "
            "package's own size"
        )
        return PackageTiming(own, False, "package", note)
    return PackageTiming(scaled, True, preset, f"timed at {preset} scale")


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
                "kv_cache_bytes": context * batch * model.kv_bytes_per_position(),
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
                "use": "fit" if anchor.fitted else "held out",
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
