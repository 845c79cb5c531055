"""The census of a run's PID namespace (the `Bubblewrap` stack): `python -S -I sandbox_census.py FD COMMAND...`
runs between bwrap's init and the runner. It starts COMMAND, waits for it, and once it has exited and what it
started had SETTLE_SECONDS to end, stops every process left in the namespace, counts them and writes the count
to FD; then it exits with COMMAND's status. Its
exit ends bwrap's init, and with it the namespace, whose last processes the kernel kills.

No process escapes the count: every one in the namespace descends from COMMAND, a signal sent to all
(`kill(-1)`) reaches a child whose fork is under way as well, and the count waits until each has stopped. The
census runs as the worker's user (root: the runner, `nobody`, can neither signal nor trace it) and keeps FD from
COMMAND; its count is the last line on FD, written once every other process has stopped, so a runner of the
same user that opened FD through /proc cannot write after it. Standard library only, and nothing of this
package: it runs with `-S -I`, and imports only what costs nothing to start.
"""

import os
import sys
import time

INIT = 1
# signal.SIGSTOP on Linux, without the signal module, whose import of enum is most of a census's start-up.
SIGSTOP = 19
STOPPED = ("T", "t")
DEAD = ("Z", "X")
STOP_SECONDS = 5
# How long the census lets what the runner started end on its own after it: helpers that end when their pipe to
# the runner closes (multiprocessing's resource tracker and forkserver) are not left behind.
SETTLE_SECONDS = 1.0


def thread_states(pid: str) -> list[str]:
    """The state of each thread of a process: its main thread may have exited (a zombie in /proc/PID/stat)
    while others run on."""
    found: list[str] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                found.append(stat.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue
    return found


def processes() -> list[list[str]]:
    """The states of the live threads of each process in this PID namespace (its private /proc) but its init
    and this one; a process all of whose threads are zombies is left out."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (INIT, os.getpid()):
            continue
        alive = [state for state in thread_states(name) if state not in DEAD]
        if alive:
            found.append(alive)
    return found


def left_in_namespace() -> int:
    """Once every other process is sent SIGSTOP: how many are left, zombies aside, counted when every thread
    of each has stopped (a thread stops on its way back from the kernel, so one still running may be finishing
    a fork, whose child is listed only after). One stuck in the kernel longer than STOP_SECONDS is counted as
    it is."""
    deadline = time.monotonic() + STOP_SECONDS
    while True:
        alive = processes()
        if all(state in STOPPED for threads in alive for state in threads) or time.monotonic() > deadline:
            return len(alive)
        time.sleep(0.001)


def settled() -> bool:
    """Whether every other process has ended within SETTLE_SECONDS."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while processes():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def in_bwraps_namespace() -> bool:
    """Whether this is bwrap's command in a PID namespace of its own (its parent is the namespace's init, bwrap):
    anywhere else a signal to all would reach every process the user may signal."""
    try:
        with open(f"/proc/{INIT}/comm") as comm:
            return os.getppid() == INIT and comm.read().strip() == "bwrap"
    except OSError:
        return False


def main() -> None:
    if not in_bwraps_namespace():
        sys.exit("calculet sandbox: the census runs only as bwrap's command, in a PID namespace of its own")
    report = int(sys.argv[1])
    command = sys.argv[2:]
    os.set_inheritable(report, False)
    runner = os.fork()
    if runner == 0:
        try:
            os.execvp(command[0], command)
        except OSError as error:
            print(f"calculet sandbox: cannot run {command[0]}: {error}", file=sys.stderr)
        os._exit(127)
    _, status = os.waitpid(runner, 0)
    left = 0
    if not settled():
        try:
            os.kill(-1, SIGSTOP)
        except ProcessLookupError:  # the last one ended meanwhile
            pass
        else:
            left = left_in_namespace()
    os.write(report, f"{left}\n".encode())
    code = os.waitstatus_to_exitcode(status)
    sys.exit(128 - code if code < 0 else code)  # killed by signal n: 128 + n, as bwrap reports it


if __name__ == "__main__":
    main()
