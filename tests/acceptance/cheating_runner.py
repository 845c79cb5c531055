"""A runner that wants to pass, for the tests: it speaks the runner protocol and lies.

`echo` (issue 20's runner): never opens the package, reports the job's target versions as a hardware device
and marks the stage and every requested probe passed. `tamper-golden` / `tamper-soak`: runs the simulator,
then corrupts the logits it measured at that stage while keeping the simulator's passing verdict.
`drop-golden`: runs the simulator, then removes the logits it measured at the golden stage.
"""

import json
import os
import subprocess
import sys

import numpy as np

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

status = subprocess.run([sys.executable, "-m", "npu_sim", "run", *args], check=False).returncode
stage = mode.removeprefix("tamper-").removeprefix("drop-")
measured = result_path.rsplit("/", 1)[0] + ("/golden-actual.npz" if stage == "golden" else "/soak-golden-actual.npz")
if status == 0 and job["stage"] == stage and mode.startswith("drop-"):
    os.remove(measured)
elif status == 0 and job["stage"] == stage:
    with np.load(measured) as npz:
        arrays = {name: npz[name] for name in npz.files}
    # Reversing each row keeps the values and their histogram but moves every logit to another token.
    arrays["decode_logits"] = arrays["decode_logits"][..., ::-1].copy()
    np.savez(measured, **arrays)
sys.exit(status)
