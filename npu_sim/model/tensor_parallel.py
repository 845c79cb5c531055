"""Two-chiplet tensor parallelism, laid out as the seed's profiles show it (M11/M12).

- The embedding lives on chiplet 0 only; its output is sent to chiplet 1.
- Attention: each chiplet holds half of the KV heads and the Q heads that read them, so q/k/v
  projections are split by columns and the output projection by rows; the two partial outputs
  are summed across the link.
- MoE: every expert's FFN is split in half (gate/up by columns, down by rows) on both chiplets;
  the router is replicated, and the partial expert outputs are summed across the link.
- The LM head is split by vocabulary; chiplet 1 sends its half of the logits to chiplet 0.

Each chiplet only ever multiplies its own slice of a weight. Where both chiplets multiply the same input
(column splits), one matrix product computes both chiplets' columns side by side, a dot product per column
as each chiplet would; where their inputs differ (row splits), a stacked product keeps a partial per
chiplet. The sum over the chiplet axis is the reduction, and every transfer is counted as D2D bytes.
"""

import numpy as np

from npu_sim.dtypes import bfloat16
from npu_sim.model import ModelConfig, ReferenceModel, rms_norm, silu

CHIPLETS = 2

# Element size on the chiplet link per transfer dtype.
LINK_DTYPES = {"float32": 4, "bfloat16": 2}


def _column_halves(w: np.ndarray) -> list[np.ndarray]:
    """[..., rows, cols] -> chiplet c's half of the columns, for c in 0, 1."""
    return np.split(w, CHIPLETS, axis=-1)


def _by_chiplet(*weights: np.ndarray) -> np.ndarray:
    """The columns each chiplet computes from one input, chiplet by chiplet: [..., rows, c0's | c1's].

    Chiplet c's part holds its half of each weight's columns, in the order given.
    """
    halves = [_column_halves(w) for w in weights]
    return np.ascontiguousarray(np.concatenate([h[chiplet] for chiplet in range(CHIPLETS) for h in halves], axis=-1))


def _split_rows(w: np.ndarray) -> np.ndarray:
    """[..., rows, cols] -> [..., 2, rows/2, cols]."""
    *lead, rows, cols = w.shape
    return np.ascontiguousarray(w.reshape(*lead, CHIPLETS, rows // CHIPLETS, cols))


class TensorParallelModel(ReferenceModel):
    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray], link_dtype: str = "float32") -> None:
        if config.kv_heads % CHIPLETS or config.expert_ffn % CHIPLETS or config.vocab % CHIPLETS:
            raise ValueError("kv_heads, expert_ffn and vocab must split evenly over two chiplets")
        if link_dtype not in LINK_DTYPES:
            raise ValueError(f"link_dtype must be one of {sorted(LINK_DTYPES)}")
        super().__init__(config, weights)
        self.link_dtype = link_dtype
        self.d2d_bytes = 0
        self.qkv: list[np.ndarray] = []  # per layer: [hidden, c0's q|k|v | c1's q|k|v]
        self.o_proj: list[np.ndarray] = []  # per layer: [2, rows/2, hidden]
        self.gate_up: list[np.ndarray] = []  # per layer: [experts, hidden, c0's gate|up | c1's gate|up]
        self.down: list[np.ndarray] = []  # per layer: [experts, 2, ffn/2, hidden]
        for i in range(config.layers):
            p = f"layers.{i}."
            # Q heads of a KV head are contiguous, so half the columns is half the KV heads plus their Q heads.
            self.qkv.append(_by_chiplet(weights[p + "q_proj"], weights[p + "k_proj"], weights[p + "v_proj"]))
            self.o_proj.append(_split_rows(weights[p + "o_proj"]))
            self.gate_up.append(_by_chiplet(weights[p + "experts.gate"], weights[p + "experts.up"]))
            self.down.append(_split_rows(weights[p + "experts.down"]))

    def _send(self, values: np.ndarray) -> None:
        self.d2d_bytes += values.size * LINK_DTYPES[self.link_dtype]

    def _all_reduce(self, partial: np.ndarray) -> np.ndarray:
        """Sum [2, rows, hidden] partials; each chiplet sends its partial to the other."""
        if self.link_dtype == "bfloat16":
            partial = partial.astype(bfloat16()).astype(np.float32)
        self._send(partial)
        return partial[0] + partial[1]

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        x = self.w["embed_tokens"][tokens]
        self._send(x)
        return x

    def _qkv(self, h: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c, rows = self.config, len(h)
        q_heads, kv_heads = c.q_heads // CHIPLETS, c.kv_heads // CHIPLETS
        # [rows, chiplet, its heads: q then k then v, head_dim]
        out = (h @ self.qkv[layer]).reshape(rows, CHIPLETS, q_heads + 2 * kv_heads, c.head_dim)
        q = out[:, :, :q_heads].reshape(rows, c.q_heads, c.head_dim)
        k = out[:, :, q_heads : q_heads + kv_heads].reshape(rows, c.kv_heads, c.head_dim)
        v = out[:, :, q_heads + kv_heads :].reshape(rows, c.kv_heads, c.head_dim)
        return q, k, v

    def _out_proj(self, attn: np.ndarray, layer: int) -> np.ndarray:
        # Chiplet c holds the attention output of its heads: the c-th half of attn's columns.
        per_chiplet = attn.reshape(len(attn), CHIPLETS, -1).transpose(1, 0, 2)
        return self._all_reduce(per_chiplet @ self.o_proj[layer])

    def _moe(self, h: np.ndarray, layer: int) -> np.ndarray:
        chosen, gates = self._route(h, layer)
        half = self.config.expert_ffn // CHIPLETS
        partial = np.zeros((CHIPLETS, *h.shape), dtype=np.float32)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)
            gate_up = (h[rows] @ self.gate_up[layer][expert]).reshape(len(rows), CHIPLETS, 2, half)
            act = silu(gate_up[:, :, 0]) * gate_up[:, :, 1]  # [rows, chiplet, ffn/2]
            partial[:, rows] += (act.transpose(1, 0, 2) @ self.down[layer][expert]) * gates[rows, slot][:, None]
        return self._all_reduce(partial)

    def _logits(self, x: np.ndarray) -> np.ndarray:
        # The LM head is split by vocabulary: chiplet 0 computes the first half, chiplet 1 the second.
        logits = rms_norm(x, self.w["final_norm"], self.config.rms_eps) @ self.w["lm_head"]
        self._send(logits[..., self.config.vocab // CHIPLETS :])
        return logits
