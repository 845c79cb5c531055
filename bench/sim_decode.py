"""Decode steps per second of the simulator on the tiny preset, at decode batch 1 and 8.

    .venv/bin/python bench/sim_decode.py [--steps 200]

Builds a tiny calbin per batch in a temporary directory, loads it on a virtual device (two chiplets,
so the tensor-parallel executor) and times full device calls: allocate, infer, wait, apply. Wall
time of this machine, not the modelled device time.
"""

# ruff: noqa: E402 (the imports must follow the environment set just below)
import os

# As `python -m npu_sim` does (npu_sim/__main__.py): one BLAS thread, set before numpy is imported.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")


import argparse
import tempfile
import time
from pathlib import Path

from npu_sim.calbin import build_calbin
from npu_sim.client import run_call
from npu_sim.device import VirtualDevice


def decode_steps_per_s(batch: int, steps: int, workdir: Path) -> float:
    device = VirtualDevice()
    calbin = device.create_calbin(build_calbin(workdir / f"tiny-b{batch}", decode_batch=batch, decode_steps=1))
    device.configure(calbin)
    kv = device.create_kv_manager(calbin)
    prefill, decode = calbin.get_model_by_name("prefill"), calbin.get_model_by_name("decode")
    prompt = calbin.goldens.prompt_ids.tolist()
    tokens = {}
    for lane in range(batch):
        kv.allocate(lane, len(prompt))
        tokens[lane] = [int(run_call(device, kv, prefill, {lane: prompt}, 1e9).logits[lane].argmax())]
    started = time.perf_counter()
    for _ in range(steps):
        for lane in tokens:
            kv.allocate(lane, 1)
        logits = run_call(device, kv, decode, tokens, 1e9).logits
        tokens = {lane: [int(row.argmax())] for lane, row in logits.items()}
    return steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="decode steps per batch size (at most 230)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        for batch in (1, 8):
            rate = decode_steps_per_s(batch, args.steps, Path(workdir))
            print(f"tiny decode batch {batch}: {rate:8.1f} steps/s  {rate * batch:8.1f} tokens/s  ({args.steps} steps)")


if __name__ == "__main__":
    main()
