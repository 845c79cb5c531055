"""Element types a calbin may name, and the BF16 conversions the simulator uses."""

import ml_dtypes
import numpy as np

# Manifest dtype name -> bytes per element.
DTYPE_BYTES: dict[str, int] = {
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "s8": 1,
    "u8": 1,
    "u16": 2,
}

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to BF16 (round to nearest even)."""
    return np.asarray(values, dtype=np.float32).astype(BFLOAT16)


def bf16_to_bits(values: np.ndarray) -> np.ndarray:
    """BF16 values as their uint16 bit patterns, the form stored in a calbin's .npy files."""
    return np.ascontiguousarray(values, dtype=BFLOAT16).view(np.uint16)


def bits_to_bf16(bits: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(bits, dtype=np.uint16).view(BFLOAT16)


def bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen BF16 bit patterns to float32 exactly: a BF16 value is the top half of a float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
