"""A test double of a board host's runner: it speaks the hardware runner protocol, and behind it runs the
simulator. Used as ACCEPTANCE_RUNNER_COMMAND by the worker of the test's hardware target."""

import os
import sys

print("board double: no board here; the simulator answers for it", file=sys.stderr, flush=True)
os.execv(sys.executable, [sys.executable, "-m", "npu_sim", "run", *sys.argv[1:]])
