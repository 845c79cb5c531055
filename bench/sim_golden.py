"""Golden comparison of a 151,936-wide BF16 logits vector against a plain numpy pass over the same bytes.

    .venv/bin/python bench/sim_golden.py [--repeats 300] [--block 8192]

Baseline: both vectors' bytes read as BF16, widened to float32 and summed (the least any comparison
must do). Comparison: npu_sim.golden.compare with the default tolerance (max abs/rel error, float64
cosine, top-1/top-5 agreement per k, error histogram). Blocked: the same metrics computed in one pass
over the vectors in cache-sized blocks (an experiment kept here, not the library's code: see
docs/performance.md). Two pairs: "typical", where 1% of the logits differ by one BF16 step (what a
faithful device gives), and "dense", where every logit differs. Prints median times and the ratios
baseline / comparison and baseline / blocked (goal >= 0.5x). The three take turns at each repeat.
"""

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from npu_sim.dtypes import bf16_to_bits, bits_to_bf16, to_bf16
from npu_sim.golden import HISTOGRAM_EDGES, compare, top_k

VOCAB = 151_936


def medians_s(actions: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median time of each action; the actions take turns, so a busy moment of the machine falls on all alike."""
    times: list[list[float]] = [[] for _ in actions]
    for _ in range(repeats):
        for action, taken in zip(actions, times, strict=True):
            started = time.perf_counter()
            action()
            taken.append(time.perf_counter() - started)
    return [statistics.median(taken) for taken in times]


def blocked(expected_bits: np.ndarray, actual_bits: np.ndarray, block: int) -> dict[str, Any]:
    """One pass in blocks: widen both blocks to float32 (in place, kept for top-k), the absolute error and its
    maximum, the scale, the three cosine sums (products of BF16 values are exact in float32, summed in
    float64) and the histogram of the differing elements; then top-5 of each vector."""
    n = len(expected_bits)
    e, a = np.empty(n, np.float32), np.empty(n, np.float32)
    error, product = np.empty(block, np.float32), np.empty(block, np.float32)
    edges = np.array(HISTOGRAM_EDGES[1:], np.float32)
    max_abs = scale = ee = aa = ea = 0.0
    at_least = np.zeros(len(HISTOGRAM_EDGES), np.int64)
    for start in range(0, n, block):
        stop = min(n, start + block)
        eb, ab = e[start:stop], a[start:stop]
        np.left_shift(expected_bits[start:stop], 16, out=eb.view(np.uint32), dtype=np.uint32)
        np.left_shift(actual_bits[start:stop], 16, out=ab.view(np.uint32), dtype=np.uint32)
        d, p = error[: stop - start], product[: stop - start]
        np.subtract(ab, eb, out=d)
        np.abs(d, out=d)
        max_abs = max(max_abs, float(d.max()))
        scale = max(scale, float(np.abs(eb).max()))
        for target, x, y in ((0, eb, eb), (1, ab, ab), (2, eb, ab)):
            np.multiply(x, y, out=p)
            total = float(np.add.reduce(p, dtype=np.float64))
            if target == 0:
                ee += total
            elif target == 1:
                aa += total
            else:
                ea += total
        differing = d[d > 0]
        at_least[0] += len(differing)
        at_least[1:] += [np.count_nonzero(differing >= edge) for edge in edges]
    top = top_k(e[None, :], 5), top_k(a[None, :], 5)
    return {
        "max_abs": max_abs,
        "max_rel": max_abs / scale,
        "cosine": ea / np.sqrt(ee * aa),
        "at_least": at_least,
        "top": top,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--block", type=int, default=8192, help="elements per block of the blocked pass")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    expected = to_bf16(rng.standard_normal(VOCAB) * 3)
    one_step_off = bf16_to_bits(expected).copy()
    one_step_off[rng.choice(VOCAB, VOCAB // 100, replace=False)] += 1
    pairs = {
        "typical": bits_to_bf16(one_step_off),
        "dense": to_bf16(expected.astype(np.float32) + rng.standard_normal(VOCAB).astype(np.float32) * 0.05),
    }
    expected_bytes = expected.tobytes()
    for name, actual in pairs.items():
        actual_bytes = actual.tobytes()

        def baseline(actual_bytes: bytes = actual_bytes) -> float:
            e = np.frombuffer(expected_bytes, ml_dtypes.bfloat16).astype(np.float32).sum()
            a = np.frombuffer(actual_bytes, ml_dtypes.bfloat16).astype(np.float32).sum()
            return float(e + a)

        def comparison(actual_bytes: bytes = actual_bytes) -> dict[str, object]:
            e = np.frombuffer(expected_bytes, ml_dtypes.bfloat16)
            return compare(e, np.frombuffer(actual_bytes, ml_dtypes.bfloat16))

        def one_pass(actual_bytes: bytes = actual_bytes) -> dict[str, Any]:
            return blocked(np.frombuffer(expected_bytes, np.uint16), np.frombuffer(actual_bytes, np.uint16), args.block)

        reference, fast = comparison(), one_pass()
        assert abs(reference["cosine"] - fast["cosine"]) < 1e-12 and reference["max_abs"] == fast["max_abs"]
        base_s, compare_s, blocked_s = medians_s([baseline, comparison, one_pass], args.repeats)
        print(
            f"{name:8s} plain pass {base_s * 1e6:7.0f} us  comparison {compare_s * 1e6:7.0f} us "
            f"({base_s / compare_s:.2f}x)  blocked {blocked_s * 1e6:7.0f} us ({base_s / blocked_s:.2f}x; goal >= 0.5x)"
        )


if __name__ == "__main__":
    main()
