"""The single-device reference decoder."""

from collections.abc import Sequence

import numpy as np

from npu_sim.model.config import ModelConfig
from npu_sim.model.kv_cache import KvCache
from npu_sim.model.ops import apply_rope, rms_norm, rope_angles, silu, softmax


class ReferenceModel:
    """The single-device reference. Rows are tokens; each row belongs to a KV lane and is written to a cell.

    A row's position (for RoPE and the causal mask) is its cell's position in the cache; a row sees the
    cells of its lane up to its own cell whose positions are not after its own.
    """

    d2d_bytes = 0  # one device: nothing crosses a chiplet link

    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray]) -> None:
        self.config = config
        self.w = weights
        self._cos, self._sin = rope_angles(config, np.arange(config.max_seq_len))
        self._scale = np.float32(1.0 / np.sqrt(config.head_dim))
        # Full debug (I14): when a list, the hidden state after every layer of every call is appended.
        self.dump: list[np.ndarray] | None = None

    def prefill(self, kv: KvCache, lane: int, tokens: np.ndarray, start: int) -> np.ndarray:
        """Run len(tokens) tokens of one sequence into cells start.. of `lane`; return the last token's logits."""
        cells = np.arange(start, start + len(tokens))
        lanes = np.full(len(tokens), lane)
        x = self._forward(kv, lanes, np.asarray(tokens), cells, one_lane=True)
        return self._logits(x[-1:])[0]

    def decode(self, kv: KvCache, lanes: np.ndarray, tokens: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """One token for each listed lane, written to its cell; lanes not listed are untouched.

        Returns logits [len(lanes), vocab].
        """
        x = self._forward(kv, np.asarray(lanes), np.asarray(tokens), np.asarray(cells), one_lane=False)
        return self._logits(x)

    def _forward(
        self, kv: KvCache, lanes: np.ndarray, tokens: np.ndarray, cells: np.ndarray, one_lane: bool
    ) -> np.ndarray:
        c = self.config
        positions = kv.pos[lanes, cells]
        cos, sin = self._cos[positions], self._sin[positions]
        x = self._embed(tokens)
        for i in range(c.layers):
            x = self._enter_layer(i, x)
            p = f"layers.{i}."
            h = rms_norm(x, self.w[p + "input_norm"], c.rms_eps)
            q, k, v = self._qkv(h, i)
            q = apply_rope(rms_norm(q, self.w[p + "q_norm"], c.rms_eps), cos, sin)
            k = apply_rope(rms_norm(k, self.w[p + "k_norm"], c.rms_eps), cos, sin)
            kv.k.write(i, lanes, cells, k)
            kv.v.write(i, lanes, cells, v)
            if one_lane:
                attn = self._attend_one_lane(q, kv, i, int(lanes[0]), cells, positions)
            else:
                attn = self._attend_lanes(q, kv, i, lanes, cells, positions)
            x = x + self._out_proj(attn, i)
            h = rms_norm(x, self.w[p + "post_attention_norm"], c.rms_eps)
            x = x + self._moe(h, i)
            if self.dump is not None:
                self.dump.append(x.copy())
        return x

    def _enter_layer(self, layer: int, x: np.ndarray) -> np.ndarray:
        """Where a pipeline moves the activations to the next stage; one device does nothing."""
        return x

    def _attend_one_lane(
        self, q: np.ndarray, kv: KvCache, layer: int, lane: int, cells: np.ndarray, positions: np.ndarray
    ) -> np.ndarray:
        """Causal attention of rows [T, q_heads, d] over one lane's cells."""
        c = self.config
        rows, length = len(q), int(cells[-1]) + 1
        qg = q.reshape(rows, c.kv_heads, c.group_size, c.head_dim).transpose(1, 2, 0, 3)
        k = kv.k.lane(layer, lane, length)[:, None]
        v = kv.v.lane(layer, lane, length)[:, None]
        scores = (qg @ k.transpose(0, 1, 3, 2)) * self._scale
        future = (np.arange(length)[None, :] > cells[:, None]) | (kv.pos[lane, None, :length] > positions[:, None])
        probs = softmax(np.where(future, -np.inf, scores))
        return (probs @ v).transpose(2, 0, 1, 3).reshape(rows, c.q_heads * c.head_dim)

    def _attend_lanes(
        self, q: np.ndarray, kv: KvCache, layer: int, lanes: np.ndarray, cells: np.ndarray, positions: np.ndarray
    ) -> np.ndarray:
        """One query row per lane, each over its own lane's cells up to its own."""
        c = self.config
        rows, length = len(q), int(cells.max()) + 1
        qg = q.reshape(rows, c.kv_heads, c.group_size, c.head_dim)
        k = kv.k.lanes(layer, lanes, length)
        v = kv.v.lanes(layer, lanes, length)
        scores = (qg @ k.transpose(0, 1, 3, 2)) * self._scale
        future = (np.arange(length)[None, :] > cells[:, None]) | (kv.pos[lanes, :length] > positions[:, None])
        probs = softmax(np.where(future[:, None, None, :], -np.inf, scores))
        return (probs @ v).reshape(rows, c.q_heads * c.head_dim)

    # The parts below are where tensor parallelism splits the work; the subclass overrides them.

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        return self.w["embed_tokens"][tokens]

    def _qkv(self, h: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c, p, rows = self.config, f"layers.{layer}.", len(h)
        q = (h @ self.w[p + "q_proj"]).reshape(rows, c.q_heads, c.head_dim)
        k = (h @ self.w[p + "k_proj"]).reshape(rows, c.kv_heads, c.head_dim)
        v = (h @ self.w[p + "v_proj"]).reshape(rows, c.kv_heads, c.head_dim)
        return q, k, v

    def _out_proj(self, attn: np.ndarray, layer: int) -> np.ndarray:
        return attn @ self.w[f"layers.{layer}.o_proj"]

    def _moe(self, h: np.ndarray, layer: int) -> np.ndarray:
        p = f"layers.{layer}."
        chosen, gates = self._route(h, layer)
        gate_w, up_w, down_w = self.w[p + "experts.gate"], self.w[p + "experts.up"], self.w[p + "experts.down"]
        out = np.zeros_like(h)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)
            x = h[rows]
            act = silu(x @ gate_w[expert]) * (x @ up_w[expert])
            out[rows] += (act @ down_w[expert]) * gates[rows, slot][:, None]
        return out

    def _route(self, h: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k experts per row and their softmax weights renormalised over the chosen k."""
        k = self.config.experts_per_token
        probs = softmax(h @ self.w[f"layers.{layer}.router"])
        chosen = np.argpartition(-probs, k - 1, axis=-1)[:, :k]
        gates = np.take_along_axis(probs, chosen, axis=-1)
        return chosen, gates / gates.sum(axis=-1, keepdims=True)

    def _logits(self, x: np.ndarray) -> np.ndarray:
        return rms_norm(x, self.w["final_norm"], self.config.rms_eps) @ self.w["lm_head"]


def teacher_forced_rows(model: ReferenceModel, prompt: Sequence[int], forced: Sequence[int]) -> np.ndarray:
    """float32 logits [1 + len(forced), vocab] of one sequence with a BF16 cache: after the prompt, then after
    each of `forced` fed in turn (teacher forcing, as a golden's decode steps are)."""
    kv = KvCache(model.config, 1)
    rows = [model.prefill(kv, 0, np.array(prompt), 0)]
    for step, token in enumerate(forced):
        rows.append(model.decode(kv, np.array([0]), np.array([token]), np.array([len(prompt) + step]))[0])
    return np.stack(rows)
