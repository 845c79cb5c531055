"""Sampling on the device (V17) and the host reference that defines what it must produce.

The chain is llama.cpp's default order: keep the top_k logits, divide by the temperature, softmax, keep
the smallest prefix whose probability reaches top_p, renormalise, then draw once by inverse CDF.
Temperature 0 is greedy (argmax, lower index on ties). The draw's uniform number comes from a
counter-based generator: splitmix64 of (seed, position of the token being produced), so any draw can
be recomputed alone, whatever batch it ran in.

`device_sample` is the device kernel: float32, top-k by partial selection. `reference_probabilities` is
the host reference: float64 over a full stable sort. They are written apart on purpose, so a mistake in
either shows up in the goodness-of-fit test (`chi_square_test`), whose p-value uses `chi2_sf` below
(the regularised upper incomplete gamma function; no scipy).
"""

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# A token whose cumulative probability before it is this close to top_p may fall either side of the cut
# in float32 versus float64; the goodness-of-fit test does not count it as outside the support.
TOP_P_BOUNDARY = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0: greedy
    top_k: int = 40  # 0: the whole vocabulary
    top_p: float = 1.0  # 1: no nucleus cut
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError("temperature must be a finite number >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.seed < 2**63:
            raise ValueError("seed must be in 0..2**63-1")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def counter_uniforms(seed: int, counters: np.ndarray) -> np.ndarray:
    """Uniform numbers in [0, 1) for (seed, counter): the same pair always gives the same number."""
    counters = np.asarray(counters, dtype=np.uint64)
    key = _splitmix(np.array([seed], dtype=np.uint64) * _GOLDEN + _GOLDEN)
    bits = _splitmix(key + counters * _GOLDEN)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def device_sample(logits: np.ndarray, params: SamplingParams, uniforms: np.ndarray) -> np.ndarray:
    """The device kernel: one token id (int32) per uniform number, from one row of logits."""
    x = np.asarray(logits).astype(np.float32)
    draws = len(uniforms)
    if params.temperature == 0:
        return np.full(draws, int(np.argmax(x)), dtype=np.int32)
    k = min(params.top_k or len(x), len(x))
    top = np.argpartition(-x, k - 1)[:k]
    order = top[np.lexsort((top, -x[top]))]  # largest first, lower index first on ties
    z = x[order] / np.float32(params.temperature)
    p = np.exp(z - z[0])
    p /= p.sum()
    cumulative = np.cumsum(p)
    kept = int(np.count_nonzero(cumulative - p < params.top_p)) if params.top_p < 1 else k
    cumulative = cumulative[:kept]
    chosen = np.searchsorted(cumulative, np.asarray(uniforms) * cumulative[-1], side="right")
    return order[np.minimum(chosen, kept - 1)].astype(np.int32)


def reference_probabilities(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The host reference: the probability of every token (float64), and which tokens sit on the top_p boundary."""
    x = np.asarray(logits).astype(np.float64)
    probabilities = np.zeros(len(x))
    boundary = np.zeros(len(x), dtype=bool)
    if params.temperature == 0:
        probabilities[int(np.argmax(x))] = 1.0
        return probabilities, boundary
    order = np.lexsort((np.arange(len(x)), -x))
    top = order[: min(params.top_k or len(x), len(x))]
    z = x[top] / params.temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    before = np.cumsum(p) - p
    keep = before < params.top_p if params.top_p < 1 else np.ones(len(top), dtype=bool)
    boundary[top[np.abs(before - params.top_p) < TOP_P_BOUNDARY]] = True
    probabilities[top[keep]] = p[keep] / p[keep].sum()
    return probabilities, boundary


def reference_draw(logits: np.ndarray, params: SamplingParams, uniform: float) -> int:
    """The token the host reference draws for this uniform number: inverse CDF over its probabilities,
    largest logit first (the device kernel's order)."""
    probabilities, _ = reference_probabilities(logits, params)
    x = np.asarray(logits).astype(np.float64)
    order = np.lexsort((np.arange(len(x)), -x))
    cumulative = np.cumsum(probabilities[order])
    chosen = int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"))
    return int(order[min(chosen, int(np.count_nonzero(probabilities[order])) - 1)])


@dataclass(frozen=True)
class GoodnessOfFit:
    draws: int
    statistic: float
    dof: int
    p_value: float
    outside_support: int  # draws of tokens the reference gives probability 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chi_square_test(
    drawn: np.ndarray, probabilities: np.ndarray, boundary: np.ndarray, min_expected: float = 5.0
) -> GoodnessOfFit:
    """Pearson's chi-square of the drawn token ids against the reference probabilities.

    Tokens expected at least `min_expected` times are bins of their own; the other tokens of the support
    are pooled into one bin (added to the smallest bin when the pool is expected fewer times than that).
    """
    counts = np.bincount(np.asarray(drawn), minlength=len(probabilities))
    draws = int(counts.sum())
    support = probabilities > 0
    outside = int(counts[~support & ~boundary].sum())
    expected = probabilities * draws
    own = support & (expected >= min_expected)
    observed_bins = list(counts[own].astype(np.float64))
    expected_bins = list(expected[own])
    pooled = support & ~own
    pool_observed, pool_expected = float(counts[pooled].sum()), float(expected[pooled].sum())
    if pool_expected >= min_expected or not expected_bins:
        observed_bins.append(pool_observed)
        expected_bins.append(pool_expected)
    elif pool_expected > 0:
        smallest = int(np.argmin(expected_bins))
        observed_bins[smallest] += pool_observed
        expected_bins[smallest] += pool_expected
    o, e = np.array(observed_bins), np.array(expected_bins)
    statistic = float(np.sum((o - e) ** 2 / e)) if len(e) > 1 else 0.0
    dof = len(e) - 1
    return GoodnessOfFit(draws, statistic, dof, chi2_sf(statistic, dof) if dof > 0 else 1.0, outside)


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for a chi-square variable with `dof` degrees of freedom: Q(dof/2, x/2)."""
    if dof < 1:
        raise ValueError("dof must be at least 1")
    if x <= 0:
        return 1.0
    a, y = dof / 2.0, x / 2.0
    if y < a + 1.0:
        return max(0.0, 1.0 - _lower_gamma_series(a, y))
    return _upper_gamma_fraction(a, y)


def _prefactor(a: float, x: float) -> float:
    return math.exp(-x + a * math.log(x) - math.lgamma(a))


def _lower_gamma_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    denominator = a
    for _ in range(10_000):
        denominator += 1.0
        term *= x / denominator
        total += term
        if abs(term) < abs(total) * 1e-16:
            break
    return total * _prefactor(a, x)


def _upper_gamma_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, evaluated with the modified Lentz method (x >= a + 1)."""
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return _prefactor(a, x) * h
