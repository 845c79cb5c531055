"""S8 packages: W8A8 integer matmuls with per-channel weight scales (V06, V25).

Every projection and expert weight is int8 with a float32 scale per output channel; the router, the
embedding and the norms stay float32 (V16 asks whether the router may stay high precision; here it
does). Before each matmul a row of activations is quantised to int8 with its own scale; the products
are accumulated in int32 and dequantised once per output. The error against the float reference is
real: activation and weight rounding, and the S8 KV cache when the package has one.

Two chiplets split the integer matmuls as tensor parallelism does (columns, or rows with int32 partial
sums). Integer partial sums add exactly, so the split gives the same bits as one device: the numerics
are computed once and the link bytes the split moves are counted (int32 partials, per chosen expert for
the MoE since the gates are applied after dequantisation; each row's activation scale when a matmul's
input is split by rows).
"""

import numpy as np

from npu_sim.model.config import ModelConfig
from npu_sim.model.kv_cache import quantize_rows
from npu_sim.model.ops import rms_norm, silu
from npu_sim.model.reference import ReferenceModel

QUANTIZED_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "experts.gate", "experts.up", "experts.down")
SCALE_SUFFIX = ".scale"
INT32_BYTES = 4


def is_quantized(name: str) -> bool:
    return name == "lm_head" or name.endswith(QUANTIZED_SUFFIXES)


def quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 weight and float32 scale per output channel: w[..., in, out] ~= q * scale[..., None, out]."""
    q, scale = quantize_rows(np.swapaxes(w, -1, -2))
    return np.ascontiguousarray(np.swapaxes(q, -1, -2)), scale


def quantize_weights(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A float weight dict as an S8 package stores it: int8 tensors plus `<name>.scale` for each."""
    stored = {}
    for name, w in weights.items():
        if is_quantized(name):
            stored[name], stored[name + SCALE_SUFFIX] = quantize_weight(w)
        else:
            stored[name] = w
    return stored


def dequantize_weights(stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float32 weights an S8 package's integers and scales stand for."""
    weights = {}
    for name, w in stored.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        if is_quantized(name):
            scale = stored[name + SCALE_SUFFIX]
            weights[name] = w.astype(np.float32) * scale[..., None, :]
        else:
            weights[name] = w
    return weights


def int8_matmul(x: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x [rows, in] float32 times an int8 weight [in, out]: int8 x int8 products accumulated in int32."""
    xq, x_scale = quantize_rows(x)
    accumulated = xq.astype(np.int32) @ q
    return accumulated.astype(np.float32) * x_scale[:, None] * scale[None, :]


class S8Model(ReferenceModel):
    def __init__(self, config: ModelConfig, stored: dict[str, np.ndarray], chiplets: int) -> None:
        super().__init__(config, {k: v for k, v in stored.items() if not is_quantized(k) and not k.endswith(".scale")})
        # int32 copies, so each matmul does not widen the weights again.
        self.q = {name: w.astype(np.int32) for name, w in stored.items() if is_quantized(name)}
        self.scale = {name: stored[name + SCALE_SUFFIX] for name in self.q}
        self.chiplets = chiplets
        self.d2d_bytes = 0

    def _send(self, elements: int, size: int = INT32_BYTES) -> None:
        if self.chiplets == 2:
            self.d2d_bytes += elements * size

    def _project(self, x: np.ndarray, name: str) -> np.ndarray:
        return int8_matmul(x, self.q[name], self.scale[name])

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        x = self.w["embed_tokens"][tokens]
        self._send(x.size)
        return x

    def _qkv(self, h: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c, p, rows = self.config, f"layers.{layer}.", len(h)
        q = self._project(h, p + "q_proj").reshape(rows, c.q_heads, c.head_dim)
        k = self._project(h, p + "k_proj").reshape(rows, c.kv_heads, c.head_dim)
        v = self._project(h, p + "v_proj").reshape(rows, c.kv_heads, c.head_dim)
        return q, k, v

    def _out_proj(self, attn: np.ndarray, layer: int) -> np.ndarray:
        # Rows split across chiplets: each sends its row scales' share and its int32 partial sums.
        self._send(2 * len(attn))
        self._send(2 * len(attn) * self.config.hidden)
        return self._project(attn, f"layers.{layer}.o_proj")

    def _moe(self, h: np.ndarray, layer: int) -> np.ndarray:
        p = f"layers.{layer}."
        chosen, gates = self._route(h, layer)
        out = np.zeros_like(h)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)
            x = h[rows]
            gate = int8_matmul(x, self.q[p + "experts.gate"][expert], self.scale[p + "experts.gate"][expert])
            up = int8_matmul(x, self.q[p + "experts.up"][expert], self.scale[p + "experts.up"][expert])
            act = silu(gate) * up
            down = int8_matmul(act, self.q[p + "experts.down"][expert], self.scale[p + "experts.down"][expert])
            out[rows] += down * gates[rows, slot][:, None]
            self._send(2 * len(rows))
            self._send(2 * len(rows) * self.config.hidden)
        return out

    def _logits(self, x: np.ndarray) -> np.ndarray:
        logits = self._project(rms_norm(x, self.w["final_norm"], self.config.rms_eps), "lm_head")
        self._send(len(x) * self.config.vocab // 2)  # chiplet 1's half of the vocabulary goes to chiplet 0
        return logits
