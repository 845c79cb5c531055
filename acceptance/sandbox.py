"""Run one untrusted command under limits. No Django here.

The command runs under bubblewrap (`bwrap`), as an unprivileged user, in a working directory of its own,
with a scrubbed environment and these limits, each of which ends the run with a reason that says which:

- its own PID namespace: when the run ends, bwrap's init inside it dies and the kernel kills every process
  left in the namespace, `setsid` or not; the supervisor returns only once they are gone;
- memory, for the whole process tree together: a cgroup v2 of the run's own (`memory.max`, OOM-killed as one
  group) where the worker's cgroup is delegated with the memory controller; otherwise the supervisor sums the
  tree's proportional set size (PSS) every MEMORY_POLL_SECONDS and kills the namespace past the limit.
  `RLIMIT_AS` bounds each process as well (a backstop between two polls);
- filesystem: the host's read-only, except the working directory; a private /proc and /dev, and a
  /dev/shm of SHM_BYTES;
- network: its own network namespace, with only a loopback;
- user: `nobody` when the worker is root (the working directory is handed to it), else the worker's user;
- wall time: the supervisor kills the tree;
- CPU time, largest file written, open files: `resource.setrlimit` in the child;
- output: the supervisor counts what the command writes to stdout and stderr and kills it past the cap;
- working directory size: checked every tick, killed past the cap.

Where bwrap cannot run here (not installed, or the kernel refuses it user namespaces), the command runs in
its own session and process group, as the same user, and each outcome says what was in force (`Isolation`):
no PID namespace (the supervisor kills every descendant it saw, but one that double-forks between two
polls escapes), the host's filesystem as far as that user may write it, and for the network only the audit
hook that Python runners load. The child also asks the kernel for SIGKILL when its parent dies, so a killed
worker leaves no runner behind.
"""

import contextlib
import ctypes
import itertools
import json
import os
import pwd
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

PROJECT_DIR = Path(__file__).resolve().parents[1]
SITE_DIR = PROJECT_DIR / "acceptance" / "sandbox_site"
NETWORK_DENIED_EXIT = 97
NETWORK_DENIED_MARKER = "CALCULET-SANDBOX: network access denied"

PR_SET_PDEATHSIG = 1
RUNNER_USER = "nobody"
SHM_BYTES = 64 * 1024 * 1024
MEMORY_POLL_SECONDS = 0.1
GONE_TIMEOUT_SECONDS = 10

# What an outcome records about its isolation.
NAMESPACE = "namespace"
AUDIT_HOOK = "audit-hook"
READ_ONLY = "read-only"
USER_PERMISSIONS = "user-permissions"
CGROUP_V2 = "cgroup-v2"
PSS_POLL = "pss-poll"

WALL_TIME = "wall_time"
CPU_TIME = "cpu_time"
MEMORY = "memory"
OUTPUT = "output"
FILE_SIZE = "file_size"
WORKDIR_SIZE = "workdir_size"
NETWORK = "network"
CANCELLED = "cancelled"

_libc = ctypes.CDLL(None, use_errno=True)
_host: "Host | None" = None
_cgroup_names = itertools.count(1)


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


@dataclass(frozen=True)
class Isolation:
    """What confined a run: recorded in every outcome, so a run says what it was (not) protected by."""

    pid_namespace: bool
    network: str  # NAMESPACE or AUDIT_HOOK
    filesystem: str  # READ_ONLY outside the working directory, or USER_PERMISSIONS
    memory: str  # CGROUP_V2 or PSS_POLL, for the whole tree
    user: str


@dataclass(frozen=True)
class Host:
    """What this host allows a sandbox, probed once per process."""

    bwrap: str | None  # a bwrap that ran here, or None
    cgroup_parent: Path | None  # a delegated cgroup v2 with the memory controller for runner cgroups
    user: str
    uid: int
    gid: int

    @property
    def isolation(self) -> Isolation:
        return Isolation(
            pid_namespace=self.bwrap is not None,
            network=NAMESPACE if self.bwrap else AUDIT_HOOK,
            filesystem=READ_ONLY if self.bwrap else USER_PERMISSIONS,
            memory=CGROUP_V2 if self.cgroup_parent else PSS_POLL,
            user=self.user,
        )


@dataclass
class Outcome:
    exit_code: int | None
    signal_number: int | None
    limit_hit: str | None
    reason: str
    elapsed_seconds: float
    max_rss_bytes: int
    output_bytes: int
    isolation: Isolation
    memory_peak_bytes: int = 0

    @property
    def clean_exit(self) -> bool:
        return self.limit_hit is None and self.exit_code == 0

    def sandbox_record(self) -> dict:
        """What the run stores about its sandbox (`Run.result["sandbox"]`)."""
        return {
            "exit_code": self.exit_code,
            "signal": self.signal_number,
            "limit": self.limit_hit,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "max_rss_bytes": self.max_rss_bytes,
            "memory_peak_bytes": self.memory_peak_bytes,
            "output_bytes": self.output_bytes,
            "network_isolation": self.isolation.network,
            "pid_namespace": self.isolation.pid_namespace,
            "memory_limit": self.isolation.memory,
            "filesystem": self.isolation.filesystem,
            "user": self.isolation.user,
        }


def _runner_account() -> tuple[str, int, int]:
    """`nobody` when the worker is root; otherwise the worker's own user (it cannot become another)."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam(RUNNER_USER)
        return entry.pw_name, entry.pw_uid, entry.pw_gid
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # an arbitrary uid without a passwd entry, as some container platforms run
        name = str(os.geteuid())
    return name, os.geteuid(), os.getegid()


def _drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _bwrap_argv(
    bwrap: str, uid: int, gid: int, view: list[str], devices: tuple[str, ...] = (), info_fd: int | None = None
) -> list[str]:
    """bwrap's arguments up to the runner's command. A root worker runs bwrap as root, so that it can mount
    what the runner's user could not reach (`_runner_view`), and `setpriv` turns into that user, without
    capabilities, before the command; any other worker runs bwrap as itself in a user namespace. `devices`
    are the host's device nodes the runner may use (a board's), in the otherwise minimal /dev. `info_fd`:
    where bwrap writes the pid of the namespace's init (`_namespace_init`)."""
    as_root = os.geteuid() == 0
    become = ["--reuid", str(uid), "--regid", str(gid), "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    return [
        bwrap,
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        *([] if as_root else ["--unshare-user", "--disable-userns"]),
        "--die-with-parent",
        "--ro-bind", "/", "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        *(arg for device in devices for arg in ("--dev-bind", device, device)),
        "--remount-ro", "/dev",
        *view,
        *(["--info-fd", str(info_fd)] if info_fd is not None else []),
        "--",
        *(["setpriv", *become, "--no-new-privs", "--"] if as_root else []),
    ]  # fmt: skip


def _runner_view(workdir: Path, cwd: Path) -> list[str]:
    """bwrap's mounts for one run: the working directory read-write at its own path (the job names files by
    absolute path). When the runner's user is not the worker's, the Python running this worker and this
    project are bound read-only too, and a parent of any of these closed to other users (pytest's 0700
    temporary root, a Python under /root) is replaced by a read-only tmpfs holding only the way down to
    what is bound there."""
    view = ["--bind", str(workdir), str(workdir), "--chdir", str(cwd)]
    if os.geteuid() != 0:
        return view
    wanted = sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), PROJECT_DIR})
    read_only = [path for path in wanted if not any(path != other and path.is_relative_to(other) for other in wanted)]
    covers: list[Path] = []
    ways: list[Path] = []
    bound: list[Path] = []
    for path in [*read_only, workdir]:
        closed = next((parent for parent in reversed(path.parents) if not parent.stat().st_mode & 0o001), None)
        if closed is None:
            continue
        if closed not in covers:
            covers.append(closed)
        for parent in reversed(path.parents):
            inside = any(parent.is_relative_to(done) for done in bound)
            if parent.is_relative_to(closed) and parent != closed and parent not in ways and not inside:
                ways.append(parent)
        bound.append(path)
    binds = [arg for path in bound if path != workdir for arg in ("--ro-bind", str(path), str(path))]
    return [
        *(arg for cover in covers for arg in ("--tmpfs", str(cover))),
        *(arg for way in ways for arg in ("--perms", "0755", "--dir", str(way))),
        *binds,
        *view,
        *(arg for cover in covers for arg in ("--remount-ro", str(cover))),
    ]


def _bwrap_usable(uid: int, gid: int) -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    try:
        probe = subprocess.run(
            [*_bwrap_argv(bwrap, uid, gid, []), "/bin/true"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bwrap if probe.returncode == 0 else None


def _cgroup2_mount() -> Path | None:
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2":
                return Path(fields[4])
    return None


def _cgroup_parent() -> Path | None:
    """Where runner cgroups go: the parent of the worker's own cgroup v2 (its own, when it is the root one),
    if it has the memory controller and was delegated to the worker: the root of the hierarchy this worker
    sees (a VM, or a container that moved its processes into a child cgroup), a cgroup systemd delegated
    (`Delegate=` with `DelegateSubgroup=`, marked by the `trusted.delegate` attribute) or one chowned to the
    worker's (non-root) user. The memory controller is enabled for its children if it is not yet. Anything
    else, such as cgroup v1 or a container's read-only /sys/fs/cgroup, leaves the memory limit to PSS
    polling."""
    try:
        mount = _cgroup2_mount()
        with open("/proc/self/cgroup") as lines:
            own = next((line[3:].strip() for line in lines if line.startswith("0::")), None)
        if mount is None or own is None:
            return None
        parent = mount / own.lstrip("/")
        if own != "/":
            parent = parent.parent
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return None
        delegated = parent == mount or (os.geteuid() != 0 and parent.stat().st_uid == os.geteuid())
        if not delegated:
            with contextlib.suppress(OSError):
                delegated = os.getxattr(parent, "trusted.delegate") == b"1"
        if not delegated:
            return None
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+memory")
        trial = parent / f"calculet-probe-{os.getpid()}"
        trial.mkdir()
        trial.rmdir()
    except OSError:
        return None
    return parent


def host() -> Host:
    """What this host allows, probed once per process (a throwaway bwrap, a look at the cgroup hierarchy)."""
    global _host
    if _host is None:
        user, uid, gid = _runner_account()
        _host = Host(_bwrap_usable(uid, gid), _cgroup_parent(), user, uid, gid)
    return _host


def network_isolation_method() -> str:
    return host().isolation.network


class Cgroup:
    """A run's own cgroup v2: the kernel holds the whole tree to `memory.max` and OOM-kills it as a group."""

    def __init__(self, parent: Path, memory_bytes: int):
        self.path = parent / f"calculet-run-{os.getpid()}-{next(_cgroup_names)}"
        self.path.mkdir()
        try:
            (self.path / "memory.max").write_text(str(memory_bytes))
            (self.path / "memory.oom.group").write_text("1")
            with contextlib.suppress(FileNotFoundError):  # no swap accounting on this kernel
                (self.path / "memory.swap.max").write_text("0")
            self.procs = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        except OSError:
            self.path.rmdir()
            raise

    def join(self) -> None:
        """In the child, before it drops its privileges and execs: everything it starts is in the group."""
        os.write(self.procs, b"0")

    def _value(self, name: str, key: str | None = None) -> int:
        try:
            text = (self.path / name).read_text()
        except OSError:
            return 0
        if key is None:
            return int(text)
        return next((int(line.split()[1]) for line in text.splitlines() if line.split()[0] == key), 0)

    def out_of_memory(self) -> bool:
        return self._value("memory.events", "oom_kill") > 0

    def peak(self) -> int:
        return self._value("memory.peak")

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")

    def remove(self) -> None:
        """Remove the group once the kernel has emptied it (a moment after the kill)."""
        os.close(self.procs)
        deadline = time.monotonic() + GONE_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def _pss_bytes(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("Pss:")), 0)


class ProcessTree:
    """The runner and every descendant the supervisor has seen, each named by (pid, start time) so that a
    recycled pid is never killed."""

    def __init__(self, root: int):
        self.root = root
        self.seen: dict[int, str] = {}

    def poll(self, *, measure: bool) -> int:
        """Walk the tree from the root; with `measure`, its PSS in bytes (shared pages counted once)."""
        total = 0
        pending = [self.root]
        while pending:
            pid = pending.pop()
            started = _start_time(pid)
            if started is None:
                continue
            self.seen.setdefault(pid, started)
            if measure:
                total += _pss_bytes(pid)
            pending += _children(pid)
        return total

    def alive(self) -> list[int]:
        return [pid for pid, started in self.seen.items() if _start_time(pid) == started]

    def kill(self) -> None:
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def add(self, pid: int) -> None:
        """Count `pid` in the tree before a poll could see it."""
        started = _start_time(pid)
        if started is not None:
            self.seen.setdefault(pid, started)


def _namespace_init(info_read: int) -> int | None:
    """The pid of the PID namespace's init, from what bwrap writes to its info fd right after it made the
    namespace (then it closes the fd; None when bwrap failed first). The init leaves the namespace last: its
    exit waits until the kernel has killed and reaped every process left there. bwrap's outer process may
    exit before that, as soon as the runner's exit status reaches it, so the supervisor waits for the init."""
    with os.fdopen(info_read, "rb") as info:
        data = info.read()
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _child_setup(limits: Limits, cgroup: Cgroup | None, drop_to: tuple[int, int] | None) -> Callable[[], None]:
    parent = os.getpid()

    def setup() -> None:
        # Runs in the forked child before exec: keep it to system calls. The cgroup is joined while still
        # privileged; the death signal is asked for after any change of user (which clears it).
        if cgroup is not None:
            cgroup.join()
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if drop_to is not None:
            _drop_privileges(*drop_to)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return setup


def _hand_over(workdir: Path, sandbox_host: Host) -> None:
    """Give the working directory to the runner's user. Without bwrap nothing can show that user a parent
    closed to it, so that is checked first."""
    if sandbox_host.uid == os.geteuid():
        return
    for directory in workdir.parents if sandbox_host.bwrap is None else []:
        if not directory.stat().st_mode & 0o001:
            raise PermissionError(
                f"the runner's user {sandbox_host.user} cannot reach {workdir}: {directory} is not searchable by "
                "others (choose an ACCEPTANCE_RUN_DIR whose parents are)"
            )
    for root, dirs, files in os.walk(workdir):
        os.chown(root, sandbox_host.uid, sandbox_host.gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), sandbox_host.uid, sandbox_host.gid, follow_symlinks=False)


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
    if limit_hit == MEMORY:
        return limit_hit, f"memory limit of {mib} MiB exceeded by the runner's processes together; they were killed"
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


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


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
    devices: tuple[str, ...] = (),
) -> Outcome:
    """Run `argv` in `cwd` (default `workdir`, whose total size is limited) under `limits`, passing its
    output to `on_output(stream, chunk)` as it comes. `workdir` is handed to the runner's user and is its
    TMPDIR. `devices` (paths such as a board's /dev node) are bound into the sandbox's /dev; the runner's
    user must be allowed to open them.

    `on_tick` is called about every `tick_seconds`; returning False cancels the run (the caller lost its
    lease). Never raises for anything the command does; raises OSError only when it cannot be started.
    Returns once no process of the run is left.
    """
    sandbox_host = host()
    workdir = Path(workdir)
    cwd = Path(cwd or workdir)
    _hand_over(workdir, sandbox_host)
    info_read, info_write = os.pipe() if sandbox_host.bwrap else (None, None)
    if sandbox_host.bwrap:
        view = _runner_view(workdir, cwd)
        bwrap_argv = _bwrap_argv(sandbox_host.bwrap, sandbox_host.uid, sandbox_host.gid, view, devices, info_write)
        command = [*bwrap_argv, *argv]
        drop_to = None
    else:
        command = argv
        drop_to = (sandbox_host.uid, sandbox_host.gid) if sandbox_host.uid != os.geteuid() else None
    cgroup = Cgroup(sandbox_host.cgroup_parent, limits.memory_bytes) if sandbox_host.cgroup_parent else None
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env={**env, "TMPDIR": str(workdir)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=() if info_write is None else (info_write,),
            preexec_fn=_child_setup(limits, cgroup, drop_to),  # noqa: PLW1509
        )
    except subprocess.SubprocessError as error:  # the child's setup failed before exec
        _close(info_read, info_write)
        if cgroup is not None:
            cgroup.remove()
        raise OSError(f"the sandbox could not be set up: {error}") from error
    except OSError:
        _close(info_read, info_write)
        if cgroup is not None:
            cgroup.remove()
        raise
    # Both pipes exist: Popen was asked for them.
    stdout, stderr = cast(IO[bytes], process.stdout), cast(IO[bytes], process.stderr)
    tree = ProcessTree(process.pid)
    if info_read is not None:
        _close(info_write)
        init = _namespace_init(info_read)
        if init is not None:
            tree.add(init)
    # The kernel tells the selector when the runner exits (Linux 5.3+), so no polling delay is added per run.
    pidfd = os.pidfd_open(process.pid)
    selector = selectors.DefaultSelector()
    selector.register(pidfd, selectors.EVENT_READ)
    streams = {stdout.fileno(): "stdout", stderr.fileno(): "stderr"}
    for fd in streams:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    limit_hit: str | None = None
    output_bytes = 0
    memory_peak = 0
    tail = b""

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill()
        tree.kill()

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
                kill()
        if chunk:
            if streams[fd] == "stderr":
                tail = (tail + chunk)[-16384:]
            on_output(streams[fd], chunk)
        return True

    next_tick = started + tick_seconds
    next_poll = started
    exited = False
    try:
        while not exited:
            deadline = min(next_tick, next_poll, started + limits.wall_seconds)
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                if key.fd == pidfd:
                    exited = True
                elif key.fd in streams:
                    read(key.fd)
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + MEMORY_POLL_SECONDS
                memory = tree.poll(measure=cgroup is None)
                memory_peak = max(memory_peak, memory)
                if limit_hit is None and memory > limits.memory_bytes:
                    limit_hit = MEMORY
                    kill()
            if limit_hit is None and now - started > limits.wall_seconds:
                limit_hit = WALL_TIME
                kill()
            if now >= next_tick:
                next_tick = now + tick_seconds
                if limit_hit is None and _directory_bytes(workdir) > limits.workdir_bytes:
                    limit_hit = WORKDIR_SIZE
                    kill()
                if limit_hit is None and on_tick is not None and not on_tick():
                    limit_hit = CANCELLED
                    kill()
    finally:
        # Whatever the runner left behind goes too, and the run ends only when it is gone; then its last
        # output is read.
        tree.poll(measure=False)
        kill()
        for fd in list(streams):
            while fd in streams and read(fd):
                pass
        _, status, rusage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        gone_by = time.monotonic() + GONE_TIMEOUT_SECONDS
        while tree.alive() and time.monotonic() < gone_by:
            time.sleep(0.01)
        selector.close()
        os.close(pidfd)
        stdout.close()
        stderr.close()
        if cgroup is not None:
            if limit_hit is None and cgroup.out_of_memory():
                limit_hit = MEMORY
            memory_peak = cgroup.peak()
            cgroup.remove()
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if sandbox_host.bwrap and exit_code is not None and 128 < exit_code <= 128 + signal.SIGRTMAX:
        # bwrap reports a command killed by signal n as exit status 128 + n, as shells do.
        signal_number = exit_code - 128
        exit_code = None
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
        isolation=sandbox_host.isolation,
        memory_peak_bytes=memory_peak,
    )
