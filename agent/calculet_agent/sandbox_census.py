"""The census of a run's PID namespace (the `Bubblewrap` stack): `python -S -I sandbox_census.py FD COMMAND...`
runs between bwrap's init and the runner. It starts COMMAND, waits for it, and once it has exited stops every
process left in the namespace, counts them and writes the count to FD; then it exits with COMMAND's status. Its
exit ends bwrap's init, and with it the namespace, whose last processes the kernel kills.

No process escapes the count: every one in the namespace descends from COMMAND, a signal sent to all
(`kill(-1)`) reaches a child whose fork is under way as well, and the count waits until each has stopped. The
census runs as the worker's user (root: the runner, `nobody`, can neither signal nor trace it), is not dumpable
(a runner of the same user cannot open its file descriptors) and keeps FD from COMMAND. Standard library only,
and nothing of this package: it runs with `-S -I`.
"""

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_DUMPABLE = 4
INIT = 1
STOPPED = ("T", "t")
DEAD = ("Z", "X")
STOP_SECONDS = 5


def states() -> list[str]:
    """The state of each process in this PID namespace (its private /proc) but its init and this one."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (INIT, os.getpid()):
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                found.append(stat.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue
    return found


def left_in_namespace() -> int:
    """Once every other process is sent SIGSTOP: how many are left, zombies aside, counted when each has
    stopped (a process stops on its way back from the kernel, so one still running may be finishing a fork,
    whose child is listed only after). One stuck in the kernel longer than STOP_SECONDS is counted as it is."""
    deadline = time.monotonic() + STOP_SECONDS
    while True:
        alive = [state for state in states() if state not in DEAD]
        if all(state in STOPPED for state in alive) or time.monotonic() > deadline:
            return len(alive)
        time.sleep(0.001)


def main() -> None:
    report = int(sys.argv[1])
    command = sys.argv[2:]
    os.set_inheritable(report, False)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    runner = os.fork()
    if runner == 0:
        try:
            os.execvp(command[0], command)
        except OSError as error:
            print(f"calculet sandbox: cannot run {command[0]}: {error}", file=sys.stderr)
        os._exit(127)
    _, status = os.waitpid(runner, 0)
    with contextlib.suppress(ProcessLookupError):  # nothing else is left
        os.kill(-1, signal.SIGSTOP)
    os.write(report, f"{left_in_namespace()}\n".encode())
    code = os.waitstatus_to_exitcode(status)
    sys.exit(128 - code if code < 0 else code)  # killed by signal n: 128 + n, as bwrap reports it


if __name__ == "__main__":
    main()
