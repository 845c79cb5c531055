"""The elementwise pieces of the decoder: norms, softmax, SiLU, RoPE."""

import numpy as np

from npu_sim.model.config import ModelConfig


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


def rope_rotate(config: ModelConfig, k: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Re-rotate cached keys [tokens, ..., head_dim] by deltas[tokens] positions (a KV edit moves them)."""
    cos, sin = rope_angles(config, np.asarray(deltas))
    extra = (1,) * (k.ndim - 2)
    cos, sin = cos.reshape(len(cos), *extra, -1), sin.reshape(len(sin), *extra, -1)
    half = config.head_dim // 2
    k1, k2 = k[..., :half], k[..., half:]
    return np.concatenate([k1 * cos - k2 * sin, k2 * cos + k1 * sin], axis=-1)
