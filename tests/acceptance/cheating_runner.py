"""A runner that wants to pass, for the tests: it speaks the runner protocol and lies.

`echo` (issue 20's runner): never opens the package, reports the job's target versions as a hardware device
and marks the stage and every requested probe passed. `<stage>-<how>`: runs the simulator, then, at that
stage only, changes the measurements it left while keeping its passing verdict and metrics — `tamper`
(corrupted logits), `prompt` (integration: a prompt of its own), `kv-shift` (runner: kv_shift's observed
positions after seq_rm are not the edit's), `no-files`, `wrong-code` / `recovery` /
`unrecovered` (failure: no error, a recovery other than the documented one, no request after it), `slow` /
`short` / `few` / `errors` (soak: timings ten times slower or faster, half the requests, two requests failed).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

# The simulator of the source tree this file belongs to, behind the sandbox's own path.
SIMULATOR_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(Path(__file__).resolve().parents[2])]),
}
mode, args = sys.argv[1], sys.argv[2:]
job_path, result_path = args[args.index("--job") + 1], args[args.index("--result") + 1]
with open(job_path, encoding="utf-8") as handle:
    job = json.load(handle)

if mode == "echo":
    target = job["target"]
    passed = [{"name": "golden:decode_logits", "passed": True, "detail": "within tolerance"}]
    result = {
        "schema_version": job["schema_version"],
        "stage": job["stage"],
        "verdict": "pass",
        "checks": passed,
        "metrics": {},
        "probes": [
            {"name": probe["name"], "verdict": "pass", "checks": passed, "findings": []} for probe in job["probes"]
        ],
        "device": {"kind": "hardware", **{key: target[key] for key in ("calrt", "driver", "firmware", "chip")}},
    }
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    sys.exit(0)

status = subprocess.run([sys.executable, "-m", "npu_sim", "run", *args], check=False, env=SIMULATOR_ENV).returncode
stage, _, how = mode.partition("-")
workdir = Path(result_path).parent
if status != 0 or job["stage"] != stage:
    sys.exit(status)


def records(name: str) -> list[dict]:
    return [json.loads(line) for line in (workdir / name).read_text().splitlines()]


def write_records(name: str, rows: list[dict]) -> None:
    (workdir / name).write_text("".join(json.dumps(row) + "\n" for row in rows))


def reversed_rows(name: str, keys: list[str] | None = None) -> None:
    """Reversing each row keeps the values and their histogram but moves every logit to another token."""
    with np.load(workdir / name) as npz:
        arrays = {key: npz[key] for key in npz.files}
    for key in keys or ["decode_logits"]:
        arrays[key] = arrays[key][..., ::-1].copy()
    np.savez(workdir / name, **arrays)


if how == "tamper" and stage == "golden":
    reversed_rows("golden-actual.npz")
elif how == "tamper" and stage == "soak":
    reversed_rows("soak-golden-actual.npz")
elif how == "tamper" and stage == "runner":
    reversed_rows("runner-actual.npz", ["logits"])
elif how == "tamper" and stage == "integration":
    # Halving a sequence's logits keeps every token the argmax of its row, and its cosine, but not its values.
    with np.load(workdir / "integration-actual.npz") as npz:
        arrays = {key: npz[key] for key in npz.files}
    values = (arrays["sequence_2"].astype(np.uint32) << 16).view(np.float32) / 2
    arrays["sequence_2"] = (values.view(np.uint32) >> 16).astype(np.uint16)
    np.savez(workdir / "integration-actual.npz", **arrays)
elif how == "prompt" and stage == "integration":  # a prompt of the runner's own choosing
    rows = records("integration-sequences.jsonl")
    rows[0]["prompt"] = [1]
    write_records("integration-sequences.jsonl", rows)
elif how == "kv-shift" and stage == "runner":  # seq_rm "removed" nothing but the last cells
    with np.load(workdir / "kv_shift-runner-observed.npz") as npz:
        arrays = {key: npz[key] for key in npz.files}
    arrays["remove.positions"] = np.arange(7)
    np.savez(workdir / "kv_shift-runner-observed.npz", **arrays)
elif how == "no-files":  # the verdict stands, the measurements are gone
    for name in {
        "runner": ["runner-actual.npz"],
        "golden": ["golden-actual.npz"],
        "failure": ["failure-scenarios.jsonl", "failure-actual.npz"],
        "integration": ["integration-sequences.jsonl", "integration-actual.npz"],
        "soak": ["soak-requests.jsonl"],
    }[stage]:
        (workdir / name).unlink()
elif how == "wrong-code":  # the first fault produced no error at all
    rows = records("failure-scenarios.jsonl")
    rows[0]["produced_code"] = 0
    write_records("failure-scenarios.jsonl", rows)
elif how == "recovery":  # the first fault "recovered" by resetting the whole device, not by its code's recovery
    rows = records("failure-scenarios.jsonl")
    rows[0]["recovery"] = ["reset device", "configure calbin"]
    write_records("failure-scenarios.jsonl", rows)
elif how == "unrecovered":  # the request after the first recovery was never measured
    with np.load(workdir / "failure-actual.npz") as npz:
        arrays = {key: npz[key] for key in npz.files if key != "scenario_0_after"}
    np.savez(workdir / "failure-actual.npz", **arrays)
elif how in ("slow", "short"):  # every request's timings ten times slower, or ten times faster
    factor = 10.0 if how == "slow" else 0.1
    rows = records("soak-requests.jsonl")
    for row in rows:
        row["sent_ms"] *= factor
        row["token_ms"] = [t * factor for t in row["token_ms"]]
    write_records("soak-requests.jsonl", rows)
elif how == "few":  # half the requests, the result's counts untouched
    rows = records("soak-requests.jsonl")
    write_records("soak-requests.jsonl", rows[: len(rows) // 2])
elif how == "errors":  # two requests failed under load
    rows = records("soak-requests.jsonl")
    for row in [row for row in rows if not row["golden_sample"]][:2]:
        row["error"], row["token_ms"] = "BUSY", []
    write_records("soak-requests.jsonl", rows)
else:
    raise SystemExit(f"cheating_runner: no mode {mode}")
sys.exit(status)
