"""Run one untrusted command under limits. No Django here.

The command runs under bubblewrap (`bwrap`), as an unprivileged user, in a working directory of its own,
with a scrubbed environment and these limits, each of which ends the run with a reason that says which:

- its own PID namespace: when the run ends, bwrap's init inside it dies and the kernel kills every process
  left in the namespace, `setsid` or not; the supervisor returns only once they are gone. Inside, the census
  (`sandbox_census.py`) starts the runner and, once it has exited on its own, stops and counts what it left
  there before the namespace goes (`Outcome.detached_processes`, exact on this stack when the worker is root:
  another worker's runner shares the census's user, and may stop it);
- memory, for the whole process tree together: a cgroup v2 of the run's own (`memory.max`, OOM-killed as one
  group) where the worker's cgroup is delegated with the memory controller; otherwise the supervisor sums the
  tree's proportional set size (PSS) every MEMORY_POLL_SECONDS and kills the namespace past the limit.
  `RLIMIT_AS` bounds each process as well (a backstop between two polls);
- filesystem: the host's read-only, except the working directory; a private /proc and /dev, and a
  /dev/shm of SHM_BYTES that every user may write (multiprocessing's locks and shared memory);
- network: its own network namespace, with only a loopback;
- user: `nobody` when the worker is root (the working directory is handed to it), else the worker's user;
- wall time: the supervisor kills the tree;
- CPU time, largest file written, open files: `resource.setrlimit` in the child;
- output: the supervisor counts what the command writes to stdout and stderr and kills it past the cap;
- working directory size: checked every tick, killed past the cap.

Where bwrap cannot run here (not installed, or the kernel refuses it user namespaces), the command runs in
its own session and process group, as the same user, and each outcome says what was in force (`Isolation`):
no PID namespace (the supervisor kills and counts every descendant it saw, but one that double-forks
between two polls escapes both), the host's filesystem as far as that user may write it, and for the network
only the audit hook that Python runners load. The child also asks the kernel for SIGKILL when its parent
dies, so a killed worker leaves no runner behind.

The two are the isolation stacks `Bubblewrap` and `Session` (`Stack`), and the memory limit's two methods
`Cgroup` and `PssPoll` (`MemoryLimit`); `host()` chooses both once per process. `run_sandboxed` prepares
a run, starts it, watches it and ends it (`_prepare`, `_start`, `_Supervision`). The module uses only the
standard library, so that a program without Django can run it.
"""

import ast
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
import site
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar, Protocol, cast

# The directory holding this package (in a source tree, `agent/`): `python -S` run here imports it.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SITE_DIR = Path(__file__).resolve().parent / "sandbox_site"
CENSUS = Path(__file__).resolve().parent / "sandbox_census.py"
NETWORK_DENIED_EXIT = 97
NETWORK_DENIED_MARKER = "CALCULET-SANDBOX: network access denied"

PR_SET_PDEATHSIG = 1
RUNNER_USER = "nobody"
SHM_BYTES = 64 * 1024 * 1024
MEMORY_POLL_SECONDS = 0.1
GONE_TIMEOUT_SECONDS = 10
# How long what a runner started may take to end on its own after it, as the census allows (`sandbox_census.py`).
SETTLE_SECONDS = 1.0

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
    """What this host allows a sandbox, probed once per process (`host()`): it chooses the isolation stack and
    the memory limit of every run."""

    bwrap: str | None  # a bwrap that ran here, or None
    cgroup_parent: Path | None  # a delegated cgroup v2 with the memory controller for runner cgroups
    user: str
    uid: int
    gid: int

    def stack(self) -> "Stack":
        """The isolation stack for one run: bubblewrap where it runs here, else the fallback (`Session`)."""
        return Bubblewrap(self, self.bwrap) if self.bwrap else Session(self)

    def memory_limit(self, memory_bytes: int) -> "MemoryLimit":
        """The memory limit for one run's whole tree: a cgroup of its own where one is delegated, else PSS polls."""
        return Cgroup(self.cgroup_parent, memory_bytes) if self.cgroup_parent else PssPoll()

    @property
    def isolation(self) -> Isolation:
        return self.stack().isolation


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
    detached_processes: int = 0  # processes left to outlive the runner, as daemons are (the run killed them)

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
            "detached_processes": self.detached_processes,
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


def _bwrap_argv(
    bwrap: str,
    uid: int,
    gid: int,
    view: list[str],
    devices: tuple[str, ...] = (),
    info_fd: int | None = None,
    census: list[str] | None = None,
) -> list[str]:
    """bwrap's arguments up to the runner's command. A root worker runs bwrap as root, so that it can mount
    what the runner's user could not reach (`_runner_view`), and `setpriv` turns into that user, without
    capabilities, before the command; any other worker runs bwrap as itself in a user namespace. `devices`
    are the host's device nodes the runner may use (a board's), in the otherwise minimal /dev. `info_fd`:
    where bwrap writes the pid of the namespace's init (`_namespace_init`). `census`: the command that starts
    the runner inside the namespace and counts what it leaves there (`CENSUS`), as the worker's user."""
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
        "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        *(arg for device in devices for arg in ("--dev-bind", device, device)),
        "--remount-ro", "/dev",
        *view,
        *(["--info-fd", str(info_fd)] if info_fd is not None else []),
        "--",
        *(census or []),
        *(["setpriv", *become, "--no-new-privs", "--"] if as_root else []),
    ]  # fmt: skip


def _runner_view(workdir: Path, cwd: Path, argv: list[str]) -> list[str]:
    """bwrap's mounts for one run: the working directory read-write at its own path (the job names files by
    absolute path). When the runner's user is not the worker's, the Python running this worker, the
    directories it imports from (`sys.path`), the source trees of its editable installs (`_editable_sources`:
    the simulator's, this package's), the census (`CENSUS`) and the files the runner's command names by
    absolute path (its script) are bound read-only too, and a parent of any of these closed to other users
    (pytest's 0700 temporary root, a checkout in `mktemp -d`, a Python under /root) is replaced by a read-only
    tmpfs holding only the way down to what is bound there."""
    view = ["--bind", str(workdir), str(workdir), "--chdir", str(cwd)]
    if os.geteuid() != 0:
        return view
    named = {Path(word).resolve() for word in argv[1:] if Path(word).is_absolute() and Path(word).is_file()}
    python = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    wanted = sorted({*python, CENSUS, *_import_roots(), *_editable_sources(), *named})
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


def _import_roots() -> set[Path]:
    """The directories on `sys.path`, without the interpreter's own and the working directory ("")."""
    return {Path(entry).resolve() for entry in sys.path if entry and Path(entry).is_dir()}


def _editable_sources() -> set[Path]:
    """The source trees of this Python's editable installs (`pip install -e`) that are not on `sys.path`:
    setuptools maps an editable project's packages to its checkout in an `__editable__` finder in site-packages,
    which the runner's Python loads, not a directory on `sys.path` (a `.pth` file's directory is on it). The
    finder is read as text: nothing of site-packages is imported here."""
    found = [
        path
        for site_packages in site.getsitepackages()
        for finder in Path(site_packages).glob("__editable___*_finder.py")
        for path in _finder_paths(finder)
    ]
    return {Path(entry).resolve() for entry in found if Path(entry).exists()}


def _finder_paths(finder: Path) -> list[str]:
    """The paths in a setuptools `__editable__` finder's `MAPPING` (package: its directory) and `NAMESPACES`
    (namespace package: its directories), both literals at the module's top level."""
    paths: list[str] = []
    for statement in ast.parse(finder.read_text()).body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            if statement.target.id == "MAPPING":
                paths += ast.literal_eval(statement.value).values()
            elif statement.target.id == "NAMESPACES":
                paths += [path for directories in ast.literal_eval(statement.value).values() for path in directories]
    return paths


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


class MemoryLimit(Protocol):
    """How a run's whole tree is held to its memory limit: `Cgroup` or `PssPoll`, as the host allows."""

    def join(self) -> None:
        """In the child, before it drops its privileges and execs."""

    def used(self, pids: list[int]) -> int:
        """The tree's memory now, for the supervisor to hold to the limit (0 when the kernel holds it)."""

    def kill(self) -> None: ...

    def out_of_memory(self) -> bool:
        """Whether the kernel ended the tree for its memory."""

    def peak(self) -> int: ...

    def remove(self) -> None:
        """Release what the limit set up, once the tree is gone."""


class PssPoll:
    """The supervisor sums the tree's proportional set size (shared pages counted once) at every poll and kills
    it past the limit; `RLIMIT_AS` bounds each process between two polls."""

    def __init__(self) -> None:
        self.highest = 0

    def join(self) -> None:
        """Nothing to join: the tree is measured from outside."""

    def used(self, pids: list[int]) -> int:
        total = sum(_pss_bytes(pid) for pid in pids)
        self.highest = max(self.highest, total)
        return total

    def kill(self) -> None:
        """Nothing of its own: the tree is killed process by process."""

    def out_of_memory(self) -> bool:
        return False  # a crossing is seen by `used`, and the tree killed then

    def peak(self) -> int:
        return self.highest

    def remove(self) -> None:
        """Nothing to release."""


class Cgroup:
    """A run's own cgroup v2 (a `MemoryLimit`): the kernel holds the whole tree to `memory.max` and OOM-kills it
    as a group."""

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

    def used(self, pids: list[int]) -> int:
        return 0  # the kernel holds the group to memory.max itself

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
    return fields[19] if _alive(pid, fields[0]) else None


def _alive(pid: int, state: str) -> bool:
    """Whether a process whose /proc/PID/stat shows `state` has a thread left: its main thread may have exited
    (a zombie there) while others run on."""
    if state not in ("Z", "X"):
        return True
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, IndexError):
                if Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
    return False


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


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
    recycled pid is never killed. The root leads the run's session; a descendant seen in a session of its
    own (`setsid`, the first step of daemonising) tried to outlive the run, and is remembered in `detached`."""

    def __init__(self, root: int):
        self.root = root
        self.seen: dict[int, str] = {}
        self.detached: set[int] = set()
        self.init: int | None = None  # a PID namespace's init, which outlives the runner by a moment

    def poll(self) -> list[int]:
        """Walk the tree from the root, remembering every process in it; returns those it found alive."""
        found = []
        pending = [self.root]
        while pending:
            pid = pending.pop()
            started = _start_time(pid)
            if started is None:
                continue
            self.seen.setdefault(pid, started)
            found.append(pid)
            if pid != self.root and _session(pid) not in (None, self.root):
                self.detached.add(pid)
            pending += _children(pid)
        return found

    def alive(self) -> list[int]:
        return [pid for pid, started in self.seen.items() if _start_time(pid) == started]

    def left_in_session(self) -> None:
        """Once the runner has exited on its own: every process still in its session or process group
        SETTLE_SECONDS later was left to outlive it (an orphan of a double fork is no longer a descendant, and
        one that forked between two polls was never seen); each joins the tree, to be killed, and `detached`."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while (left := self._in_session()) and time.monotonic() < deadline:
            time.sleep(0.01)
        for pid in left:
            self.add(pid)
            self.detached.add(pid)

    def _in_session(self) -> list[int]:
        """The processes other than the runner (and a namespace's init) in the runner's session or group."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in (self.root, self.init):
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if self.root in (int(fields[2]), int(fields[3])) and _alive(int(entry.name), fields[0]):
                found.append(int(entry.name))
        return found

    def kill(self) -> None:
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def add(self, pid: int) -> None:
        """Count `pid` in the tree before a poll could see it."""
        started = _start_time(pid)
        if started is not None:
            self.seen.setdefault(pid, started)


class Stack(ABC):
    """How one run is confined, made by `Host.stack()` for each run: `Bubblewrap` where bwrap runs, else the
    fallback `Session`. Each says what it adds to the command and to the child's set-up, how it finds the run's
    process tree and what the exit status it sees means. Both end a run the same way: the runner's process
    group, its memory group and every process of the tree are killed, and the run returns once the tree is
    gone (for bubblewrap, the namespace's init with it). The memory limit is the host's (`Host.memory_limit`)."""

    pid_namespace: ClassVar[bool]
    network: ClassVar[str]
    filesystem: ClassVar[str]

    def __init__(self, sandbox_host: Host):
        self.host = sandbox_host

    @property
    def isolation(self) -> Isolation:
        return Isolation(
            pid_namespace=self.pid_namespace,
            network=self.network,
            filesystem=self.filesystem,
            memory=CGROUP_V2 if self.host.cgroup_parent else PSS_POLL,
            user=self.host.user,
        )

    def hand_over(self, workdir: Path) -> None:
        """Give the working directory to the runner's user."""
        if self.host.uid == os.geteuid():
            return
        for root, dirs, files in os.walk(workdir):
            os.chown(root, self.host.uid, self.host.gid)
            for name in dirs + files:
                os.chown(os.path.join(root, name), self.host.uid, self.host.gid, follow_symlinks=False)

    @abstractmethod
    def command(self, argv: list[str], *, workdir: Path, cwd: Path, devices: tuple[str, ...]) -> list[str]:
        """The command to start for the runner's `argv`."""

    def pass_fds(self) -> tuple[int, ...]:
        return ()

    def child_user(self) -> tuple[int, int] | None:
        """The (uid, gid) the child becomes before exec, when nothing in the command changes its user."""
        return None

    def find_tree(self, pid: int) -> ProcessTree:
        """The run's process tree, from the started process."""
        return ProcessTree(pid)

    def exit_status(self, status: int) -> tuple[int | None, int | None]:
        """The runner's exit code and the signal that killed it, from the started process's wait status."""
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return exit_code, signal_number

    def left_behind(self, tree: ProcessTree, *, exited: bool) -> int:
        """How many processes the runner left to outlive it, once the tree is gone; `exited`: on its own, not
        ended by a limit. Here: every process the polls saw leave the runner's session, and when it exited,
        every one still in its session or process group SETTLE_SECONDS after (`ProcessTree`)."""
        return len(tree.detached)

    @abstractmethod
    def abandon(self) -> None:
        """Release what `command` set up, when the run cannot start."""


class Bubblewrap(Stack):
    """bwrap's namespaces: a PID namespace whose init the run waits for and whose census starts the runner and
    counts what it leaves there (`CENSUS`), a network with only a loopback, the host's filesystem read-only but
    for the working directory, `nobody` through `setpriv` for a root worker."""

    pid_namespace = True
    network = NAMESPACE
    filesystem = READ_ONLY

    def __init__(self, sandbox_host: Host, bwrap: str):
        super().__init__(sandbox_host)
        self.bwrap = bwrap
        self.info: tuple[int, int] | None = None  # the pipe bwrap writes its namespace's init to
        self.census: tuple[int, int] | None = None  # the pipe the census writes its count to

    def command(self, argv: list[str], *, workdir: Path, cwd: Path, devices: tuple[str, ...]) -> list[str]:
        self.info = os.pipe()
        self.census = os.pipe()
        view = _runner_view(workdir, cwd, argv)
        # The base interpreter, not the venv's: its standard library is all the census needs, and it is bound in
        # (`_runner_view`: sys.base_prefix). A venv made by copying (venv.EnvBuilder's default, as dev.py makes
        # it) has its own copy of the binary inside the venv, hidden from the runner's user behind a closed parent.
        census = [sys._base_executable, "-S", "-I", str(CENSUS), str(self.census[1])]  # type: ignore[attr-defined]
        return [*_bwrap_argv(self.bwrap, self.host.uid, self.host.gid, view, devices, self.info[1], census), *argv]

    def pass_fds(self) -> tuple[int, ...]:
        return () if self.info is None or self.census is None else (self.info[1], self.census[1])

    def find_tree(self, pid: int) -> ProcessTree:
        """The tree from bwrap's outer process, with the namespace's init in it from the start, so that the run
        ends only once the init is gone (`_namespace_init`)."""
        tree = ProcessTree(pid)
        if self.census is not None:
            os.close(self.census[1])
        if self.info is not None:
            info_read, info_write = self.info
            os.close(info_write)
            init = _namespace_init(info_read)
            if init is not None:
                tree.add(init)
                tree.init = init
        return tree

    def exit_status(self, status: int) -> tuple[int | None, int | None]:
        exit_code, signal_number = super().exit_status(status)
        if exit_code is not None and 128 < exit_code <= 128 + signal.SIGRTMAX:
            # bwrap reports a command killed by signal n as exit status 128 + n, as shells do.
            return None, exit_code - 128
        return exit_code, signal_number

    def left_behind(self, tree: ProcessTree, *, exited: bool) -> int:
        """What the census counted in the namespace once the runner had exited on its own; what the polls saw
        when a limit ended the run, or when the census wrote nothing (the runner's user killed it: a worker
        that is not root runs both as one user, and the run ends as killed by that signal)."""
        report = b""
        if self.census is not None:
            os.set_blocking(self.census[0], False)
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(self.census[0], 65536):
                    report += chunk
            os.close(self.census[0])
        counted = report.splitlines()[-1:]  # the census's own line is the last (`CENSUS`)
        if exited and counted and counted[0].isdigit():
            return int(counted[0])
        return super().left_behind(tree, exited=exited)

    def abandon(self) -> None:
        for pipe in (self.info, self.census):
            if pipe is not None:
                os.close(pipe[0])
                os.close(pipe[1])


class Session(Stack):
    """The fallback where bwrap cannot run: the runner gets a session and process group of its own, as the
    runner's user (the child drops to it), on the host's filesystem and network. Its tree is what the
    supervisor's polls saw of it; for the network only the audit hook Python runners load stands in the way."""

    pid_namespace = False
    network = AUDIT_HOOK
    filesystem = USER_PERMISSIONS

    def hand_over(self, workdir: Path) -> None:
        """Without bwrap nothing can show the runner's user a parent closed to it, so that is checked first."""
        if self.host.uid != os.geteuid():
            for directory in workdir.parents:
                if not directory.stat().st_mode & 0o001:
                    raise PermissionError(
                        f"the runner's user {self.host.user} cannot reach {workdir}: {directory} is not searchable "
                        "by others (choose an ACCEPTANCE_RUN_DIR whose parents are)"
                    )
        super().hand_over(workdir)

    def command(self, argv: list[str], *, workdir: Path, cwd: Path, devices: tuple[str, ...]) -> list[str]:
        return argv

    def child_user(self) -> tuple[int, int] | None:
        return None if self.host.uid == os.geteuid() else (self.host.uid, self.host.gid)

    def abandon(self) -> None:
        """Nothing to release: the command is the runner's own."""


def _drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


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


def _child_setup(limits: Limits, memory: MemoryLimit, drop_to: tuple[int, int] | None) -> Callable[[], None]:
    parent = os.getpid()

    def setup() -> None:
        # Runs in the forked child before exec: keep it to system calls. The memory group is joined while still
        # privileged; the death signal is asked for after any change of user (which clears it).
        memory.join()
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
    # The host's choice of OpenBLAS kernels (npu_sim/kernels.py), so a simulator run gives the same bits as
    # calculet's own computations beside it.
    if "OPENBLAS_CORETYPE" in os.environ:
        env["OPENBLAS_CORETYPE"] = os.environ["OPENBLAS_CORETYPE"]
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
    sandbox_host: Host | None = None,
) -> Outcome:
    """Run `argv` in `cwd` (default `workdir`, whose total size is limited) under `limits`, passing its
    output to `on_output(stream, chunk)` as it comes. `workdir` is handed to the runner's user and is its
    TMPDIR. `devices` (paths such as a board's /dev node) are bound into the sandbox's /dev; the runner's
    user must be allowed to open them. `sandbox_host` is what the host allows, `host()` unless given: a host
    without `bwrap` runs the fallback stack.

    `on_tick` is called about every `tick_seconds`; returning False cancels the run (the caller lost its
    lease). Never raises for anything the command does; raises OSError only when it cannot be started.
    Returns once no process of the run is left.
    """
    stack = (sandbox_host or host()).stack()
    workdir = Path(workdir)
    cwd = Path(cwd or workdir)
    command, memory = _prepare(stack, argv, workdir=workdir, cwd=cwd, limits=limits, devices=devices)
    started = time.monotonic()
    process = _start(stack, memory, command, cwd=cwd, env={**env, "TMPDIR": str(workdir)}, limits=limits)
    run = _Supervision(stack, memory, process, started=started, limits=limits, on_output=on_output)
    try:
        run.watch(workdir, on_tick, tick_seconds)
    finally:
        status, rusage = run.end()
    return run.outcome(status, rusage)


def _prepare(
    stack: Stack, argv: list[str], *, workdir: Path, cwd: Path, limits: Limits, devices: tuple[str, ...]
) -> tuple[list[str], MemoryLimit]:
    """Hand the working directory to the runner's user; the command the stack starts, and the memory limit."""
    stack.hand_over(workdir)
    command = stack.command(argv, workdir=workdir, cwd=cwd, devices=devices)
    try:
        return command, stack.host.memory_limit(limits.memory_bytes)
    except OSError:
        stack.abandon()
        raise


def _start(
    stack: Stack, memory: MemoryLimit, command: list[str], *, cwd: Path, env: dict[str, str], limits: Limits
) -> subprocess.Popen[bytes]:
    """Start the command in a session of its own, its limits set in the child before exec. When it cannot be
    started, what was set up for it is released and OSError raised."""
    try:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=stack.pass_fds(),
            preexec_fn=_child_setup(limits, memory, stack.child_user()),  # noqa: PLW1509
        )
    except (OSError, subprocess.SubprocessError) as error:
        stack.abandon()
        memory.remove()
        if isinstance(error, OSError):
            raise
        raise OSError(f"the sandbox could not be set up: {error}") from error  # the child's setup failed


class _Supervision:
    """A started run, watched until no process of it is left: its output passed on and counted, its limits
    held (the first one crossed kills the tree and is the run's), and its end waited for."""

    def __init__(
        self,
        stack: Stack,
        memory: MemoryLimit,
        process: subprocess.Popen[bytes],
        *,
        started: float,
        limits: Limits,
        on_output: Callable[[str, bytes], None],
    ):
        self.stack = stack
        self.memory = memory
        self.process = process
        self.started = started
        self.limits = limits
        self.on_output = on_output
        self.tree = stack.find_tree(process.pid)
        self.limit_hit: str | None = None
        self.output_bytes = 0
        self.memory_peak = 0
        self.left_behind = 0
        self.tail = b""
        # The kernel tells the selector when the runner exits (Linux 5.3+), so no polling delay is added per run.
        self.pidfd = os.pidfd_open(process.pid)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.pidfd, selectors.EVENT_READ)
        # Both pipes exist: Popen was asked for them.
        self.stdout, self.stderr = cast(IO[bytes], process.stdout), cast(IO[bytes], process.stderr)
        self.streams = {self.stdout.fileno(): "stdout", self.stderr.fileno(): "stderr"}
        for fd in self.streams:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ)

    def watch(self, workdir: Path, on_tick: Callable[[], bool] | None, tick_seconds: float) -> None:
        """Until the runner exits: pass its output on; every MEMORY_POLL_SECONDS walk the tree and measure its
        memory; past the wall time kill it; every `tick_seconds` check the working directory and ask `on_tick`."""
        wall_deadline = self.started + self.limits.wall_seconds
        next_tick = self.started + tick_seconds
        next_poll = self.started
        exited = False
        while not exited:
            exited = self._wait(min(next_tick, next_poll, wall_deadline))
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + MEMORY_POLL_SECONDS
                if self.memory.used(self.tree.poll()) > self.limits.memory_bytes:
                    self._stop(MEMORY)
            if now > wall_deadline:
                self._stop(WALL_TIME)
            if now >= next_tick:
                next_tick = now + tick_seconds
                self._tick(workdir, on_tick)

    def end(self) -> tuple[int, resource.struct_rusage]:
        """Kill whatever the runner left behind and wait until it is gone; then read its last output and
        release what the run held. Returns the started process's wait status and resource usage."""
        self.tree.poll()
        if self.limit_hit is None:  # not killed: what is still running was left behind
            self.tree.left_in_session()
        self._kill()
        for fd in list(self.streams):
            while fd in self.streams and self._read(fd):
                pass
        _, status, rusage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        gone_by = time.monotonic() + GONE_TIMEOUT_SECONDS
        while self.tree.alive() and time.monotonic() < gone_by:
            time.sleep(0.01)
        self.selector.close()
        os.close(self.pidfd)
        self.stdout.close()
        self.stderr.close()
        if self.limit_hit is None and self.memory.out_of_memory():
            self.limit_hit = MEMORY
        self.memory_peak = self.memory.peak()
        self.memory.remove()
        self.left_behind = self.stack.left_behind(self.tree, exited=self.limit_hit is None)
        return status, rusage

    def outcome(self, status: int, rusage: resource.struct_rusage) -> Outcome:
        exit_code, signal_number = self.stack.exit_status(status)
        max_rss = rusage.ru_maxrss * 1024
        tail = self.tail.decode("utf-8", errors="replace")
        limit, reason = _explain(self.limit_hit, exit_code, signal_number, self.limits, max_rss, tail)
        return Outcome(
            exit_code=exit_code,
            signal_number=signal_number,
            limit_hit=limit,
            reason=reason,
            elapsed_seconds=time.monotonic() - self.started,
            max_rss_bytes=max_rss,
            output_bytes=self.output_bytes,
            isolation=self.stack.isolation,
            memory_peak_bytes=self.memory_peak,
            detached_processes=self.left_behind,
        )

    def _wait(self, deadline: float) -> bool:
        """Read what the streams have until `deadline`; True once the runner has exited."""
        exited = False
        for key, _ in self.selector.select(timeout=max(0.0, deadline - time.monotonic())):
            if key.fd == self.pidfd:
                exited = True
            elif key.fd in self.streams:
                self._read(key.fd)
        return exited

    def _read(self, fd: int) -> bool:
        """Pass on what the stream has, cut at the output limit; False at its end or when nothing is waiting."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            self.selector.unregister(fd)
            self.streams.pop(fd)
            return False
        room = self.limits.output_bytes - self.output_bytes
        self.output_bytes += len(chunk)
        if len(chunk) > room:
            chunk = chunk[: max(room, 0)]
            self._stop(OUTPUT)
        if chunk:
            if self.streams[fd] == "stderr":
                self.tail = (self.tail + chunk)[-16384:]
            self.on_output(self.streams[fd], chunk)
        return True

    def _tick(self, workdir: Path, on_tick: Callable[[], bool] | None) -> None:
        if self.limit_hit is None and _directory_bytes(workdir) > self.limits.workdir_bytes:
            self._stop(WORKDIR_SIZE)
        if self.limit_hit is None and on_tick is not None and not on_tick():
            self._stop(CANCELLED)

    def _stop(self, limit: str) -> None:
        """End the run for `limit`, unless a limit ended it already."""
        if self.limit_hit is None:
            self.limit_hit = limit
            self._kill()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.memory.kill()
        self.tree.kill()
