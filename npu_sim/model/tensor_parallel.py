"""Two-chiplet tensor parallelism, laid out as the seed's profiles show it (M11/M12).

- The embedding lives on chiplet 0 only; its output is sent to chiplet 1.
- Attention: each chiplet holds half of the KV heads and the Q heads that read them, so q/k/v
  projections are split by columns and the output projection by rows; the two partial outputs
  are summed across the link.
- MoE: every expert's FFN is split in half (gate/up by columns, down by rows) on both chiplets;
  the router is replicated, and the partial expert outputs are summed across the link.
- The LM head is split by vocabulary; chiplet 1 sends its half of the logits to chiplet 0.

Weights carry a chiplet axis of size 2, so each chiplet only ever multiplies its own slice (one
matrix product per chiplet); the sum over that axis is the reduction, and every transfer is counted
as D2D bytes.
"""

import numpy as np

from npu_sim.dtypes import BFLOAT16
from npu_sim.model import ModelConfig, ReferenceModel, rms_norm, silu

CHIPLETS = 2

# Element size on the chiplet link per transfer dtype.
LINK_DTYPES = {"float32": 4, "bfloat16": 2}


def _split_columns(w: np.ndarray) -> np.ndarray:
    """[..., rows, cols] -> [..., 2, rows, cols/2]: chiplet c gets the c-th half of the columns."""
    *lead, rows, cols = w.shape
    halves = w.reshape(*lead, rows, CHIPLETS, cols // CHIPLETS)
    return np.ascontiguousarray(np.moveaxis(halves, -2, -3))


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
        self.split: dict[str, np.ndarray] = {}
        for i in range(config.layers):
            p = f"layers.{i}."
            # Q heads of a KV head are contiguous, so half the columns is half the KV heads plus their Q heads.
            for name in ("q_proj", "k_proj", "v_proj", "experts.gate", "experts.up"):
                self.split[p + name] = _split_columns(weights[p + name])
            for name in ("o_proj", "experts.down"):
                self.split[p + name] = _split_rows(weights[p + name])
        self.split["lm_head"] = _split_columns(weights["lm_head"])

    def _send(self, values: np.ndarray) -> None:
        self.d2d_bytes += values.size * LINK_DTYPES[self.link_dtype]

    def _all_reduce(self, partial: np.ndarray) -> np.ndarray:
        """Sum [2, rows, hidden] partials; each chiplet sends its partial to the other."""
        if self.link_dtype == "bfloat16":
            partial = partial.astype(BFLOAT16).astype(np.float32)
        self._send(partial)
        return partial[0] + partial[1]

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        x = self.w["embed_tokens"][tokens]
        self._send(x)
        return x

    def _qkv(self, h: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c, p, rows = self.config, f"layers.{layer}.", len(h)

        def heads(w: np.ndarray, count: int) -> np.ndarray:
            # Each chiplet's columns, side by side: [rows, count, d], chiplet 0's heads first.
            return np.concatenate([h @ w[chiplet] for chiplet in range(CHIPLETS)], axis=1).reshape(
                rows, count, c.head_dim
            )

        return (
            heads(self.split[p + "q_proj"], c.q_heads),
            heads(self.split[p + "k_proj"], c.kv_heads),
            heads(self.split[p + "v_proj"], c.kv_heads),
        )

    def _out_proj(self, attn: np.ndarray, layer: int) -> np.ndarray:
        width = attn.shape[1] // CHIPLETS
        o_proj = self.split[f"layers.{layer}.o_proj"]
        partial = [attn[:, c * width : (c + 1) * width] @ o_proj[c] for c in range(CHIPLETS)]
        return self._all_reduce(np.stack(partial))

    def _moe(self, h: np.ndarray, layer: int) -> np.ndarray:
        p = f"layers.{layer}."
        chosen, gates = self._route(h, layer)
        gate_w, up_w = self.split[p + "experts.gate"], self.split[p + "experts.up"]
        down_w = self.split[p + "experts.down"]
        partial = np.zeros((CHIPLETS, *h.shape), dtype=np.float32)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)
            x, gate = h[rows], gates[rows, slot][:, None]
            for chiplet in range(CHIPLETS):
                act = silu(x @ gate_w[expert, chiplet]) * (x @ up_w[expert, chiplet])
                partial[chiplet, rows] += (act @ down_w[expert, chiplet]) * gate
        return self._all_reduce(partial)

    def _logits(self, x: np.ndarray) -> np.ndarray:
        normed = rms_norm(x, self.w["final_norm"], self.config.rms_eps)
        halves = [normed @ self.split["lm_head"][chiplet] for chiplet in range(CHIPLETS)]
        self._send(halves[1])
        return np.concatenate(halves, axis=-1)
