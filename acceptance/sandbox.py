"""Run one untrusted command under limits. No Django here.

The command runs in its own session and process group, in a working directory of its own, with a
scrubbed environment and these limits, each of which ends the run with a reason that says which:

- wall time: the supervisor kills the whole process group;
- CPU time, memory (address space), largest file written, open files: `resource.setrlimit` in the child;
- output: the supervisor counts what the command writes to stdout and stderr and kills it past the cap;
- working directory size: checked every tick, killed past the cap;
- network: a new, empty network namespace (`unshare(CLONE_NEWNET)`, or with a user namespace when not
  root) so no interface but a downed loopback exists. Where the kernel refuses both, Python runners still
  meet an audit hook that ends them on their first connect/bind/send; native code would not, and the
  outcome says which isolation was in force (`network_isolation`).

The child also asks the kernel for SIGKILL when its parent dies, so a killed worker leaves no runner behind.
"""

import contextlib
import ctypes
import os
import resource
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "sandbox_site"
NETWORK_DENIED_EXIT = 97
NETWORK_DENIED_MARKER = "CALCULET-SANDBOX: network access denied"

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1

NAMESPACE = "namespace"
USER_NAMESPACE = "user-namespace"
AUDIT_HOOK = "audit-hook"

WALL_TIME = "wall_time"
CPU_TIME = "cpu_time"
MEMORY = "memory"
OUTPUT = "output"
FILE_SIZE = "file_size"
WORKDIR_SIZE = "workdir_size"
NETWORK = "network"
CANCELLED = "cancelled"

_libc = ctypes.CDLL(None, use_errno=True)
_isolation_method: str | None = None


@dataclass(frozen=True)
class Limits:
    wall_seconds: float
    memory_bytes: int
    output_bytes: int
    file_bytes: int
    workdir_bytes: int
    open_files: int = 256

    @property
    def cpu_seconds(self) -> int:
        # A backstop for a supervisor that cannot kill (it always can; this only bounds the worst case).
        return int(self.wall_seconds) + 10


@dataclass
class Outcome:
    exit_code: int | None
    signal_number: int | None
    limit_hit: str | None
    reason: str
    elapsed_seconds: float
    max_rss_bytes: int
    output_bytes: int
    network_isolation: str

    @property
    def clean_exit(self) -> bool:
        return self.limit_hit is None and self.exit_code == 0


def _unshare(flags: int) -> bool:
    return _libc.unshare(flags) == 0


def network_isolation_method() -> str:
    """Which network isolation this machine allows, probed once per process in a throwaway child."""
    global _isolation_method
    if _isolation_method is not None:
        return _isolation_method
    for method, flags in ((NAMESPACE, CLONE_NEWNET), (USER_NAMESPACE, CLONE_NEWUSER | CLONE_NEWNET)):
        pid = os.fork()
        if pid == 0:
            os._exit(0 if _unshare(flags) else 1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            _isolation_method = method
            return method
    _isolation_method = AUDIT_HOOK
    return _isolation_method


def _child_setup(limits: Limits, isolation: str) -> Callable[[], None]:
    parent = os.getpid()

    def setup() -> None:
        # Runs in the forked child before exec: keep it to system calls.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        if isolation == NAMESPACE and not _unshare(CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        if isolation == USER_NAMESPACE and not _unshare(CLONE_NEWUSER | CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER|CLONE_NEWNET) failed")
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return setup


def scrubbed_environment(extra: dict[str, str] | None = None, *, python_path: list[str] | None = None) -> dict:
    """Only what a runner needs: no credentials, no proxy settings, no Django or Celery configuration."""
    bin_dirs = [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "PATH": os.pathsep.join(dict.fromkeys(bin_dirs)),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join([str(SITE_DIR), *(python_path or [])]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.update(extra or {})
    return env


def _directory_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _looks_out_of_memory(tail: str) -> bool:
    return any(marker in tail for marker in ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "ENOMEM"))


def _looks_network_denied(tail: str) -> bool:
    return NETWORK_DENIED_MARKER in tail or "Network is unreachable" in tail


def _explain(
    limit_hit: str | None, exit_code: int | None, signal_number: int | None, limits: Limits, max_rss: int, tail: str
) -> tuple[str | None, str]:
    mib = limits.memory_bytes // (1024 * 1024)
    if limit_hit == WALL_TIME:
        return limit_hit, f"wall-time limit of {limits.wall_seconds:g} s exceeded; the runner was killed"
    if limit_hit == OUTPUT:
        return limit_hit, f"output limit of {limits.output_bytes} bytes exceeded; the runner was killed"
    if limit_hit == WORKDIR_SIZE:
        return limit_hit, f"working directory grew past {limits.workdir_bytes} bytes; the runner was killed"
    if limit_hit == CANCELLED:
        return limit_hit, "the run was cancelled or taken over; the runner was killed"
    if signal_number == signal.SIGXCPU:
        return CPU_TIME, f"CPU-time limit of {limits.cpu_seconds} s exceeded"
    if signal_number == signal.SIGXFSZ:
        return FILE_SIZE, f"file-size limit of {limits.file_bytes} bytes exceeded"
    if exit_code != 0 and ("File too large" in tail or "EFBIG" in tail):
        return FILE_SIZE, f"file-size limit of {limits.file_bytes} bytes exceeded"
    if exit_code == NETWORK_DENIED_EXIT or (exit_code != 0 and _looks_network_denied(tail)):
        line = next((ln for ln in tail.splitlines() if NETWORK_DENIED_MARKER in ln), "")
        detail = line.split(":", 2)[-1].strip() if line else "connection attempt failed: the sandbox has no network"
        return NETWORK, f"network access denied in the sandbox ({detail})"
    if exit_code != 0 and (_looks_out_of_memory(tail) or max_rss >= limits.memory_bytes * 0.95):
        return MEMORY, f"memory limit of {mib} MiB exceeded"
    if signal_number is not None:
        name = signal.Signals(signal_number).name if signal_number in signal.Signals._value2member_map_ else "?"
        if signal_number == signal.SIGKILL:
            return MEMORY, f"runner killed by SIGKILL (likely the memory limit of {mib} MiB or the OOM killer)"
        return None, f"runner killed by signal {signal_number} ({name})"
    if exit_code:
        return None, f"runner exited with status {exit_code}"
    return None, ""


def run_sandboxed(
    argv: list[str],
    *,
    workdir: Path,
    env: dict[str, str],
    cwd: Path | None = None,
    limits: Limits,
    on_output: Callable[[str, bytes], None],
    on_tick: Callable[[], bool] | None = None,
    tick_seconds: float = 1.0,
) -> Outcome:
    """Run `argv` in `cwd` (default `workdir`, whose total size is limited) under `limits`, passing its
    output to `on_output(stream, chunk)` as it comes.

    `on_tick` is called about every `tick_seconds`; returning False cancels the run (the caller lost its
    lease). Never raises for anything the command does; raises OSError only when it cannot be started.
    """
    isolation = network_isolation_method()
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd or workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        preexec_fn=_child_setup(limits, isolation),  # noqa: PLW1509 - the limits must apply before exec
    )
    pgid = process.pid
    # The kernel tells the selector when the runner exits (Linux 5.3+), so no polling delay is added per run.
    pidfd = os.pidfd_open(process.pid)
    selector = selectors.DefaultSelector()
    selector.register(pidfd, selectors.EVENT_READ)
    streams = {process.stdout.fileno(): "stdout", process.stderr.fileno(): "stderr"}
    for fd in streams:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    limit_hit: str | None = None
    output_bytes = 0
    tail = b""

    def read(fd: int) -> bool:
        """Pass on what the stream has; False at its end or when nothing is waiting."""
        nonlocal limit_hit, output_bytes, tail
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            selector.unregister(fd)
            streams.pop(fd)
            return False
        room = limits.output_bytes - output_bytes
        output_bytes += len(chunk)
        if len(chunk) > room:
            chunk = chunk[: max(room, 0)]
            if limit_hit is None:
                limit_hit = OUTPUT
                _kill_group(pgid)
        if chunk:
            if streams[fd] == "stderr":
                tail = (tail + chunk)[-16384:]
            on_output(streams[fd], chunk)
        return True

    next_tick = started + tick_seconds
    exited = False
    try:
        while not exited:
            timeout = max(0.0, min(next_tick, started + limits.wall_seconds) - time.monotonic())
            for key, _ in selector.select(timeout=timeout):
                if key.fd == pidfd:
                    exited = True
                elif key.fd in streams:
                    read(key.fd)
            now = time.monotonic()
            if limit_hit is None and now - started > limits.wall_seconds:
                limit_hit = WALL_TIME
                _kill_group(pgid)
            if now >= next_tick:
                next_tick = now + tick_seconds
                if limit_hit is None and _directory_bytes(workdir) > limits.workdir_bytes:
                    limit_hit = WORKDIR_SIZE
                    _kill_group(pgid)
                if limit_hit is None and on_tick is not None and not on_tick():
                    limit_hit = CANCELLED
                    _kill_group(pgid)
    finally:
        # Whatever the runner left behind in its group goes too; then its last output is read.
        _kill_group(pgid)
        for fd in list(streams):
            while fd in streams and read(fd):
                pass
        _, status, rusage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        selector.close()
        os.close(pidfd)
        process.stdout.close()
        process.stderr.close()
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    max_rss = rusage.ru_maxrss * 1024
    limit, reason = _explain(
        limit_hit, exit_code, signal_number, limits, max_rss, tail.decode("utf-8", errors="replace")
    )
    return Outcome(
        exit_code=exit_code,
        signal_number=signal_number,
        limit_hit=limit,
        reason=reason,
        elapsed_seconds=time.monotonic() - started,
        max_rss_bytes=max_rss,
        output_bytes=output_bytes,
        network_isolation=isolation,
    )
