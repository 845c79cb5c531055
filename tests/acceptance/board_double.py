"""A test double of a board host's runner: it speaks the hardware runner protocol, and behind it runs the
simulator. Registered as the hardware runner command of the tests' hardware targets.

It says what it is: the device in its result is the simulator's (`kind` simulator) with `double` true and an
identity naming it a double, so its evidence is E4, never E0. `--device-config FILE` (before the protocol's
own arguments) makes it report other versions, as a board whose runtime was upgraded would.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

# The simulator of the source tree this file belongs to, behind the sandbox's own path.
SIMULATOR_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(Path(__file__).resolve().parents[2])]),
}
args = sys.argv[1:]
print("board double: no board here; the simulator answers for it", file=sys.stderr, flush=True)
status = subprocess.run([sys.executable, "-m", "npu_sim", "run", *args], check=False, env=SIMULATOR_ENV).returncode
result_path = args[args.index("--result") + 1] if "--result" in args else None
if status == 0 and result_path:
    with open(result_path, encoding="utf-8") as handle:
        result = json.load(handle)
    device = result.setdefault("device", {})
    device["double"] = True
    device["identity"] = f"board test double (no board): {device.get('identity', 'npu_sim')}"
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
sys.exit(status)
