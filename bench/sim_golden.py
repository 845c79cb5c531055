"""Golden comparison of a 151,936-wide BF16 logits vector against a plain numpy pass over the same bytes.

    .venv/bin/python bench/sim_golden.py [--repeats 300]

Baseline: both vectors' bytes read as BF16, widened to float32 and summed (the least any comparison
must do). Comparison: npu_sim.golden.compare with the default tolerance (max abs/rel error, float64
cosine, top-1/top-5 agreement per k, error histogram). Two pairs: "typical", where 1% of the logits
differ by one BF16 step (what a faithful device gives), and "dense", where every logit differs.
Prints median times and baseline/comparison (goal >= 0.5x).
"""

import argparse
import statistics
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np

from npu_sim.dtypes import bf16_to_bits, bits_to_bf16, to_bf16
from npu_sim.golden import compare

VOCAB = 151_936


def median_s(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=300)
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

        base_s, compare_s = median_s(baseline, args.repeats), median_s(comparison, args.repeats)
        print(
            f"{name:8s} plain pass {base_s * 1e6:7.0f} us  comparison {compare_s * 1e6:7.0f} us  "
            f"ratio {base_s / compare_s:.2f}x (goal >= 0.5x)"
        )


if __name__ == "__main__":
    main()
