"""The reference model: a Qwen3-MoE-shaped decoder in float32 numpy.

Per layer: RMSNorm, attention with grouped-query heads, per-head RMSNorm of q and k, RoPE; then
RMSNorm and a mixture of SwiGLU experts chosen by a softmax router (top-k, weights renormalised).
Logits leave the model as float32; the runtime rounds them to BF16.
"""

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ModelConfig:
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    experts: int
    experts_per_token: int
    expert_ffn: int
    vocab: int
    max_seq_len: int
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.q_heads % self.kv_heads:
            raise ValueError("q_heads must be a multiple of kv_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for RoPE")
        if not 0 < self.experts_per_token <= self.experts:
            raise ValueError("experts_per_token must be in 1..experts")

    @property
    def group_size(self) -> int:
        return self.q_heads // self.kv_heads

    def as_manifest(self) -> dict[str, int | float]:
        """The model section of a calbin manifest (max_seq_len lives at the top level)."""
        fields = asdict(self)
        del fields["max_seq_len"]
        return fields

    def attention_parameters_per_layer(self) -> int:
        q_width = self.q_heads * self.head_dim
        kv_width = self.kv_heads * self.head_dim
        projections = self.hidden * q_width * 2 + self.hidden * kv_width * 2
        norms = 2 * self.hidden + 2 * self.head_dim
        return projections + norms + self.hidden * self.experts

    def expert_parameters(self) -> int:
        return 3 * self.hidden * self.expert_ffn

    def parameter_count(self) -> int:
        per_layer = self.attention_parameters_per_layer() + self.experts * self.expert_parameters()
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden

    def active_parameter_count(self) -> int:
        """Parameters one decoded token touches: attention, its top-k experts, the LM head."""
        per_layer = self.attention_parameters_per_layer() + self.experts_per_token * self.expert_parameters()
        return self.layers * per_layer + self.vocab * self.hidden + self.hidden


PRESETS: dict[str, ModelConfig] = {
    # Small enough to run hundreds of decode steps in a test; keeps the seed's 2:1 Q:KV head ratio
    # per chiplet (4 Q heads over 2 KV heads on each).
    "tiny": ModelConfig(
        layers=2,
        hidden=64,
        q_heads=8,
        kv_heads=4,
        head_dim=16,
        experts=8,
        experts_per_token=2,
        expert_ffn=32,
        vocab=512,
        max_seq_len=256,
    ),
    # Qwen3-30B-A3B as the seed records it (M01-M05). Used by the timing model only.
    "full": ModelConfig(
        layers=48,
        hidden=2048,
        q_heads=32,
        kv_heads=4,
        head_dim=128,
        experts=128,
        experts_per_token=8,
        expert_ffn=768,
        vocab=151936,
        max_seq_len=40960,
    ),
}


def weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    h, d = config.hidden, config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens": (config.vocab, h)}
    for i in range(config.layers):
        p = f"layers.{i}."
        shapes[p + "input_norm"] = (h,)
        shapes[p + "q_proj"] = (h, config.q_heads * d)
        shapes[p + "k_proj"] = (h, config.kv_heads * d)
        shapes[p + "v_proj"] = (h, config.kv_heads * d)
        shapes[p + "o_proj"] = (config.q_heads * d, h)
        shapes[p + "q_norm"] = (d,)
        shapes[p + "k_norm"] = (d,)
        shapes[p + "post_attention_norm"] = (h,)
        shapes[p + "router"] = (h, config.experts)
        shapes[p + "experts.gate"] = (config.experts, h, config.expert_ffn)
        shapes[p + "experts.up"] = (config.experts, h, config.expert_ffn)
        shapes[p + "experts.down"] = (config.experts, config.expert_ffn, h)
    shapes["final_norm"] = (h,)
    shapes["lm_head"] = (h, config.vocab)
    return shapes


def init_weights(config: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """Deterministic float32 weights: the same config and seed always give the same bytes."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_shapes(config).items():
        if name.endswith("norm"):
            # Not all ones, so that a norm applied in the wrong place changes the result.
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "embed_tokens":
            values = rng.standard_normal(shape)
        else:
            fan_in = shape[-2]
            values = rng.standard_normal(shape) / np.sqrt(fan_in)
        weights[name] = values.astype(np.float32)
    return weights


class KvCache:
    """K and V storage: per layer an array [lanes, kv_heads, max_seq_len, head_dim].

    K is stored after RoPE. Which positions are valid is the KV manager's business, not this class's.
    """

    def __init__(self, config: ModelConfig, lanes: int) -> None:
        shape = (lanes, config.kv_heads, config.max_seq_len, config.head_dim)
        self.lanes = lanes
        self.k = [np.zeros(shape, dtype=np.float32) for _ in range(config.layers)]
        self.v = [np.zeros(shape, dtype=np.float32) for _ in range(config.layers)]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(variance + eps) * weight


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x) written with tanh so that large negative inputs do not overflow exp.
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))


def rope_angles(config: ModelConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin, [len(positions), head_dim // 2], computed in float64 then rounded to float32."""
    half = config.head_dim // 2
    inv_freq = config.rope_theta ** (-np.arange(half, dtype=np.float64) * 2.0 / config.head_dim)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate x [rows, heads, head_dim] by per-row angles (the rotate-half layout Qwen3 uses)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


class ReferenceModel:
    """The single-device reference. Rows are tokens; each row belongs to a KV lane at a position."""

    d2d_bytes = 0  # one device: nothing crosses a chiplet link

    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray]) -> None:
        self.config = config
        self.w = weights
        self._cos, self._sin = rope_angles(config, np.arange(config.max_seq_len))
        self._scale = np.float32(1.0 / np.sqrt(config.head_dim))

    def prefill(self, kv: KvCache, lane: int, tokens: np.ndarray, start: int) -> np.ndarray:
        """Run len(tokens) tokens of one sequence from position `start`; return the last token's logits."""
        positions = np.arange(start, start + len(tokens))
        lanes = np.full(len(tokens), lane)
        x = self._forward(kv, lanes, np.asarray(tokens), positions, one_lane=True)
        return self._logits(x[-1:])[0]

    def decode(self, kv: KvCache, lanes: np.ndarray, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """One token for each listed lane; lanes not listed are untouched. Returns logits [len(lanes), vocab]."""
        x = self._forward(kv, np.asarray(lanes), np.asarray(tokens), np.asarray(positions), one_lane=False)
        return self._logits(x)

    def _forward(
        self, kv: KvCache, lanes: np.ndarray, tokens: np.ndarray, positions: np.ndarray, one_lane: bool
    ) -> np.ndarray:
        c = self.config
        cos, sin = self._cos[positions], self._sin[positions]
        x = self._embed(tokens)
        for i in range(c.layers):
            p = f"layers.{i}."
            h = rms_norm(x, self.w[p + "input_norm"], c.rms_eps)
            q, k, v = self._qkv(h, i)
            q = apply_rope(rms_norm(q, self.w[p + "q_norm"], c.rms_eps), cos, sin)
            k = apply_rope(rms_norm(k, self.w[p + "k_norm"], c.rms_eps), cos, sin)
            kv.k[i][lanes, :, positions] = k
            kv.v[i][lanes, :, positions] = v
            if one_lane:
                attn = self._attend_one_lane(q, kv.k[i][lanes[0]], kv.v[i][lanes[0]], positions)
            else:
                attn = self._attend_lanes(q, kv.k[i], kv.v[i], lanes, positions)
            x = x + self._out_proj(attn, i)
            h = rms_norm(x, self.w[p + "post_attention_norm"], c.rms_eps)
            x = x + self._moe(h, i)
        return x

    def _attend_one_lane(
        self, q: np.ndarray, k_lane: np.ndarray, v_lane: np.ndarray, positions: np.ndarray
    ) -> np.ndarray:
        """Causal attention of rows [T, q_heads, d] over one lane's cache [kv_heads, S, d]."""
        c = self.config
        rows, length = len(q), int(positions[-1]) + 1
        qg = q.reshape(rows, c.kv_heads, c.group_size, c.head_dim).transpose(1, 2, 0, 3)
        k = k_lane[:, None, :length]
        v = v_lane[:, None, :length]
        scores = (qg @ k.transpose(0, 1, 3, 2)) * self._scale
        future = np.arange(length)[None, :] > positions[:, None]
        probs = softmax(np.where(future, -np.inf, scores))
        return (probs @ v).transpose(2, 0, 1, 3).reshape(rows, c.q_heads * c.head_dim)

    def _attend_lanes(
        self, q: np.ndarray, k_all: np.ndarray, v_all: np.ndarray, lanes: np.ndarray, positions: np.ndarray
    ) -> np.ndarray:
        """One query row per lane, each over its own lane's cache up to its own position."""
        c = self.config
        rows, length = len(q), int(positions.max()) + 1
        qg = q.reshape(rows, c.kv_heads, c.group_size, c.head_dim)
        k = k_all[lanes, :, :length]
        v = v_all[lanes, :, :length]
        scores = (qg @ k.transpose(0, 1, 3, 2)) * self._scale
        future = (np.arange(length)[None, :] > positions[:, None])[:, None, None, :]
        probs = softmax(np.where(future, -np.inf, scores))
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


def rope_shift(config: ModelConfig, k: np.ndarray, delta: int) -> np.ndarray:
    """Re-rotate cached keys [..., tokens, head_dim] by `delta` positions (a KV shift moves them)."""
    cos, sin = rope_angles(config, np.array([delta]))
    half = config.head_dim // 2
    k1, k2 = k[..., :half], k[..., half:]
    return np.concatenate([k1 * cos[0] - k2 * sin[0], k2 * cos[0] + k1 * sin[0]], axis=-1)
