"""The reference model: a Qwen3-MoE-shaped decoder in float32 numpy, and its executors.

Per layer: RMSNorm, attention with grouped-query heads, per-head RMSNorm of q and k, RoPE; then
RMSNorm and a mixture of SwiGLU experts chosen by a softmax router (top-k, weights renormalised).
Logits leave the model as float32; the runtime rounds them to BF16.
"""

from npu_sim.model.config import PRESETS, ModelConfig, init_weights, weight_shapes
from npu_sim.model.kv_cache import KvCache, KvStore, quantize_rows
from npu_sim.model.ops import apply_rope, rms_norm, rope_angles, rope_rotate, silu, softmax
from npu_sim.model.reference import ReferenceModel

__all__ = [
    "PRESETS",
    "KvCache",
    "KvStore",
    "ModelConfig",
    "ReferenceModel",
    "apply_rope",
    "init_weights",
    "quantize_rows",
    "rms_norm",
    "rope_angles",
    "rope_rotate",
    "silu",
    "softmax",
    "weight_shapes",
]
