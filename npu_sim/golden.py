"""Comparing output tensors with goldens: error, cosine, top-k agreement, an error histogram.

Tensors are [rows, width] (one row of logits per prefill or decode step). Sums behind the cosine are
accumulated in float64; everything elementwise runs in float32, which holds BF16 values exactly.

A faithful device's logits mostly equal the golden's bit for bit, so the comparison first finds the
elements that differ and computes errors, histogram and the cosine's correction terms over those alone;
only the expected vector's norm and the top-k need the whole tensor.
"""

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from npu_sim.dtypes import bits_to_float32


@dataclass(frozen=True)
class Tolerance:
    max_abs: float | None = None  # not checked unless given: logit scales differ between models
    max_rel: float | None = 0.01  # max |actual - expected| / max |expected|
    cosine_min: float = 0.9999
    top1_min: float = 0.99
    topk_min: float = 0.99
    k: int = 5

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Tolerance":
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown tolerance fields: {', '.join(sorted(unknown))}")
        for key, value in values.items():
            kind = int if key == "k" else (int, float)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise ValueError(f"tolerance {key} must be a number")
        tolerance = cls(**values)
        if tolerance.k < 1:
            raise ValueError("tolerance k must be at least 1")
        return tolerance


# Absolute-error bins; "exact", "above" (>= the last edge or infinite) and "nan" are counted apart.
HISTOGRAM_EDGES = (0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
_TOPK_GROUP_SIZE = 128


def as_float32(values: np.ndarray) -> np.ndarray:
    """Logits as float32 [rows, width]: from BF16 bit patterns (uint16), BF16 or float arrays."""
    array = np.asarray(values)
    # BF16 widens to float32 exactly, as a float array does.
    array = bits_to_float32(array) if array.dtype == np.uint16 else array.astype(np.float32, copy=False)
    return array.reshape(-1, array.shape[-1]) if array.ndim != 2 else array


def top_k(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values of each row, largest first, lower index first on ties.

    Each row is cut into groups (every `groups`-th element); only a group whose maximum reaches the
    k-th largest group maximum can hold a top-k value, so only those groups are sorted. Strided
    groups keep the maxima a fast reduction over axis 0. NaN must have been replaced before.
    """
    rows, width = x.shape
    k = min(k, width)
    depth = _TOPK_GROUP_SIZE if width % _TOPK_GROUP_SIZE == 0 else 1
    groups = width // depth
    kth = min(k, groups)
    offsets = groups * np.arange(depth)[:, None]
    result = np.empty((rows, k), dtype=np.intp)
    for row in range(rows):
        group_max = x[row].reshape(depth, groups).max(axis=0)
        threshold = -np.partition(-group_max, kth - 1)[kth - 1]
        index = np.sort((np.flatnonzero(group_max >= threshold)[None, :] + offsets).ravel())
        result[row] = index[np.argsort(-x[row, index], kind="stable")[:k]]
    return result


def _histogram(abs_error: np.ndarray, nan_count: int, equal_elsewhere: int) -> dict[str, Any]:
    """Bins of the errors given, plus `equal_elsewhere` elements known to be exact."""
    at_least = [int(np.count_nonzero(abs_error >= edge)) for edge in HISTOGRAM_EDGES]
    exact = abs_error.size - nan_count - int(np.count_nonzero(abs_error))
    return {
        "edges": list(HISTOGRAM_EDGES),
        "counts": [at_least[0] - exact - at_least[1]]
        + [at_least[i] - at_least[i + 1] for i in range(1, len(at_least) - 1)],
        "exact": exact + equal_elsewhere,
        "above": at_least[-1],
        "nan": nan_count,
    }


def _finite(value: float) -> float | None:
    """JSON has no NaN or infinity; a non-finite metric is written as null."""
    return value if math.isfinite(value) else None


def compare(expected: np.ndarray, actual: np.ndarray, tolerance: Tolerance | None = None) -> dict[str, Any]:
    """Metrics of `actual` against `expected` and whether they meet the tolerance."""
    tolerance = tolerance or Tolerance()
    e, a = as_float32(expected), as_float32(actual)
    if e.shape != a.shape:
        raise ValueError(f"shape {list(a.shape)} differs from the expected {list(e.shape)}")
    e1, a1 = e.ravel(), a.ravel()
    differs = e1.view(np.uint32) != a1.view(np.uint32)
    # Where most elements differ, gathering them would cost more than working on everything.
    if np.count_nonzero(differs) > e1.size // 4:
        e_diff, a_diff = e1, a1
    else:
        where = np.flatnonzero(differs)
        e_diff, a_diff = e1[where], a1[where]
    # Non-finite logits are an outcome to report (corrupted output), not a numpy warning.
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.subtract(a_diff, e_diff)
        # With a = e + delta: a.e = e.e + e.delta and a.a = e.e + 2 e.delta + delta.delta, the last two
        # over the differing elements only. einsum casts to float64 in small buffers; a BLAS float64 dot
        # would need float64 copies and OpenBLAS runs it on threads whose wake-up can cost milliseconds on
        # a busy machine.
        ee = float(np.einsum("i,i->", e1, e1, dtype=np.float64))
        e_delta = float(np.einsum("i,i->", e_diff, delta, dtype=np.float64))
        delta_delta = float(np.einsum("i,i->", delta, delta, dtype=np.float64))
        error = np.abs(delta, out=delta)
        max_abs = float(error.max()) if error.size else 0.0
        nan_count = int(np.count_nonzero(np.isnan(error))) if math.isnan(max_abs) else 0
        scale = max(float(e.max()), -float(e.min()))
        finite = math.isfinite(max_abs) and math.isfinite(scale)
        non_finite = 0 if finite else int(a.size - np.count_nonzero(np.isfinite(a)))
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
        norms = math.sqrt(ee * (ee + 2 * e_delta + delta_delta))
        cosine = (ee + e_delta) / norms if norms != 0 else (1.0 if max_abs == 0 else 0.0)

    k = min(tolerance.k, e.shape[1])
    top_e = top_k(e, k)
    top_a = top_k(np.where(np.isnan(a), -np.inf, a) if nan_count else a, k)
    # An index appears once per list, so the overlap of the first j of each list is the count of
    # matches in the leading j x j corner of the match matrix.
    matches = (top_e[:, :, None] == top_a[:, None, :]).cumsum(axis=1).cumsum(axis=2)
    overlap = matches[:, np.arange(k), np.arange(k)].mean(axis=0)
    by_k = [{"k": j + 1, "agreement": float(overlap[j] / (j + 1))} for j in range(k)]
    top1, topk = by_k[0]["agreement"], by_k[-1]["agreement"]

    failures = []
    if non_finite:
        failures.append(f"{non_finite} non-finite values")
    if tolerance.max_abs is not None and not max_abs <= tolerance.max_abs:
        failures.append(f"max_abs {max_abs:.6g} > {tolerance.max_abs}")
    if tolerance.max_rel is not None and not max_rel <= tolerance.max_rel:
        failures.append(f"max_rel {max_rel:.6g} > {tolerance.max_rel}")
    if not cosine >= tolerance.cosine_min:
        failures.append(f"cosine {cosine:.8f} < {tolerance.cosine_min}")
    if not top1 >= tolerance.top1_min:
        failures.append(f"top1 {top1:.4f} < {tolerance.top1_min}")
    if not topk >= tolerance.topk_min:
        failures.append(f"top{k} {topk:.4f} < {tolerance.topk_min}")
    return {
        "shape": list(e.shape),
        "max_abs": _finite(max_abs),
        "max_rel": _finite(max_rel),
        "cosine": _finite(cosine),
        "top1": top1,
        "topk": topk,
        "k": k,
        "topk_by_k": by_k,
        "non_finite": non_finite,
        "histogram": _histogram(error, nan_count, e.size - error.size),
        "tolerance": asdict(tolerance),
        "passed": not failures,
        "failures": failures,
    }


def row_figures(expected: np.ndarray, actual: np.ndarray, k: int) -> list[dict[str, float | None]]:
    """Each row's cosine, top-1 and top-k agreement of `actual` against `expected` (one row per prefill or decode
    step): a few numbers per step, small enough to keep with a run and draw."""
    e, a = as_float32(expected), as_float32(actual)
    if e.shape != a.shape:
        raise ValueError(f"shape {list(a.shape)} differs from the expected {list(e.shape)}")
    k = min(k, e.shape[1])
    with np.errstate(invalid="ignore", over="ignore"):
        dots = np.einsum("ij,ij->i", e, a, dtype=np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", e, e, dtype=np.float64) * np.einsum("ij,ij->i", a, a, dtype=np.float64))
    nan = np.isnan(a)
    top_e, top_a = top_k(e, k), top_k(np.where(nan, -np.inf, a) if nan.any() else a, k)
    rows = []
    for index in range(e.shape[0]):
        same = bool(np.array_equal(e[index].view(np.uint32), a[index].view(np.uint32)))
        cosine = 1.0 if same else (float(dots[index] / norms[index]) if norms[index] else 0.0)
        rows.append(
            {
                "cosine": _finite(cosine),
                "top1": float(top_e[index, 0] == top_a[index, 0]),
                "topk": len(set(top_e[index].tolist()) & set(top_a[index].tolist())) / k,
            }
        )
    return rows
