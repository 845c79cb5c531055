"""Time of the two-chiplet tensor-parallel run as a ratio of the single-device reference (goal <= 1.3x).

    .venv/bin/python bench/sim_tensor_parallel.py [--steps 256] [--repeats 5]

Both models run the same prefill and the same greedy decode steps on the tiny preset (max_seq_len
raised to fit the steps); each run is repeated and the fastest of each is compared.
"""

import argparse
import dataclasses
import time

import numpy as np

from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights
from npu_sim.model.tensor_parallel import TensorParallelModel


def run(model: ReferenceModel, prompt: np.ndarray, tokens: list[int]) -> float:
    kv = KvCache(model.config, 1)
    started = time.perf_counter()
    model.prefill(kv, 0, prompt, 0)
    for step, token in enumerate(tokens):
        model.decode(kv, np.array([0]), np.array([token]), np.array([len(prompt) + step]))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = dataclasses.replace(PRESETS["tiny"], max_seq_len=16 + args.steps)
    weights = init_weights(config, 0)
    prompt = np.random.default_rng(0).integers(0, config.vocab, 16)
    tokens = np.random.default_rng(1).integers(0, config.vocab, args.steps).tolist()
    reference, parallel = ReferenceModel(config, weights), TensorParallelModel(config, weights)
    ref_s = min(run(reference, prompt, tokens) for _ in range(args.repeats))
    tp_s = min(run(parallel, prompt, tokens) for _ in range(args.repeats))
    print(f"reference:       {ref_s * 1e3:8.1f} ms for prefill + {args.steps} decode steps")
    print(f"tensor parallel: {tp_s * 1e3:8.1f} ms, {parallel.d2d_bytes // args.repeats} D2D bytes per run")
    print(f"ratio: {tp_s / ref_s:.2f}x (goal <= 1.3x)")


if __name__ == "__main__":
    main()
