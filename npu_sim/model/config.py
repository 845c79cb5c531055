"""Model dimensions, the presets, and deterministic weights."""

from dataclasses import dataclass

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
