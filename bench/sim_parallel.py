"""Time of tensor-parallel, expert-parallel, pipeline-parallel and two-board runs as a ratio of the
single-device reference (goal <= 1.3x each).

    .venv/bin/python bench/sim_parallel.py [--steps 256] [--repeats 15]

Every model runs the same prefill and the same decode steps on the tiny preset (max_seq_len raised to fit
the steps); each run is repeated, the fastest of each kept, and the runs are interleaved so that a busy
moment of the machine falls on all of them alike. The reference runs twice, as two models, to show the
noise floor. Time is this process's CPU time (all its threads), which
other work on a shared machine disturbs less than wall time.
"""

# ruff: noqa: E402 (the imports must follow the environment set just below)
import os

# As `python -m npu_sim` does (npu_sim/__main__.py): one BLAS thread, set before numpy is imported.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")


import argparse
import dataclasses
import time

import numpy as np

from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights
from npu_sim.model.expert_parallel import ExpertParallelModel
from npu_sim.model.pipeline_parallel import MultiBoardModel, PipelineParallelModel
from npu_sim.model.tensor_parallel import TensorParallelModel


def run(model: ReferenceModel, prompt: np.ndarray, tokens: list[int]) -> float:
    kv = KvCache(model.config, 1)
    started = time.process_time()
    model.prefill(kv, 0, prompt, 0)
    for step, token in enumerate(tokens):
        model.decode(kv, np.array([0]), np.array([token]), np.array([len(prompt) + step]))
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    config = dataclasses.replace(PRESETS["tiny"], max_seq_len=16 + args.steps)
    weights = init_weights(config, 0)
    prompt = np.random.default_rng(0).integers(0, config.vocab, 16)
    tokens = np.random.default_rng(1).integers(0, config.vocab, args.steps).tolist()
    models = {
        "reference": ReferenceModel(config, weights),
        # The reference once more: how far apart two runs of the same thing land on this machine.
        "reference again": ReferenceModel(config, weights),
        "tensor parallel": TensorParallelModel(config, weights),
        "expert parallel": ExpertParallelModel(config, weights),
        "pipeline parallel": PipelineParallelModel(config, weights),
        "two boards": MultiBoardModel(config, weights),
    }
    best = dict.fromkeys(models, float("inf"))
    for _ in range(args.repeats):
        for name, model in models.items():
            best[name] = min(best[name], run(model, prompt, tokens))
    reference = best["reference"]
    for name, model in models.items():
        moved = getattr(model, "d2d_bytes", 0) // args.repeats
        board = getattr(model, "board_link_bytes", 0) // args.repeats
        print(
            f"{name:18s} {best[name] * 1e3:8.1f} ms  {best[name] / reference:.2f}x  "
            f"chiplet link {moved} B, board link {board} B per run (goal <= 1.3x)"
        )


if __name__ == "__main__":
    main()
