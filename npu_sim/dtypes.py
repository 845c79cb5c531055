"""Element types a calbin may name, and the BF16 conversions the simulator uses."""

import functools

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


@functools.cache
def bfloat16() -> np.dtype:
    """numpy's BF16 type, from ml_dtypes, imported on first use: the import costs about a second of CPU (numpy
    registers each of its many ufunc loops by comparing it with the ones it has), which a process that never
    rounds to BF16 (a web worker, a command) need not pay."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to BF16 (round to nearest even)."""
    return np.asarray(values, dtype=np.float32).astype(bfloat16())


def bf16_to_bits(values: np.ndarray) -> np.ndarray:
    """BF16 values as their uint16 bit patterns, the form stored in a calbin's .npy files."""
    return np.ascontiguousarray(values, dtype=bfloat16()).view(np.uint16)


def bits_to_bf16(bits: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(bits, dtype=np.uint16).view(bfloat16())


def bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen BF16 bit patterns to float32 exactly: a BF16 value is the top half of a float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
