"""The runner sandbox and the runner protocol's verdicts, on real subprocesses: no database.

Every test of what the sandbox does runs on both isolation stacks: bubblewrap, which this host has, and the
fallback, forced by handing `run_sandboxed` this host without its bwrap. Where the fallback cannot promise
what bubblewrap does (a PID or network namespace, a read-only host), the test asserts what it does instead.

The fallback runs here as the worker's own user, as it does for a worker that is not root: for a root worker
it runs the runner as `nobody`, who needs the worker's Python readable by others, and this suite's Python
may live where it is not (under a closed /root). `test_the_fallback_runs_a_root_workers_runner_as_its_user`
covers that drop with a program every user may run.
"""

import dataclasses
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import venv
from pathlib import Path

import pytest
from calculet_agent import sandbox
from calculet_agent.sandbox import Limits, run_sandboxed, scrubbed_environment

from acceptance import protocol, stages
from tests.acceptance.workers import processes_with

# Generous: only the tests of the wall-time limit are meant to meet it, whatever the machine's load.
LIMITS = Limits(
    wall_seconds=60,
    memory_bytes=512 * 1024**2,
    output_bytes=1024**2,
    file_bytes=8 * 1024**2,
    workdir_bytes=32 * 1024**2,
)
WORKER_USER = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture(params=["bubblewrap", "fallback"])
def sandbox_host(request) -> sandbox.Host:
    """This host as probed, with bwrap (the suite's machines have it), or the same host without bwrap, which
    runs the fallback stack, as the worker's own user (see the module's docstring)."""
    probed = sandbox.host()
    assert probed.bwrap is not None, "bwrap cannot run on this machine: install bubblewrap"
    if request.param == "bubblewrap":
        return probed
    return dataclasses.replace(probed, bwrap=None, user=WORKER_USER, uid=os.geteuid(), gid=os.getegid())


def bubblewrap(sandbox_host: sandbox.Host) -> bool:
    return sandbox_host.bwrap is not None


def with_limits(**changes) -> Limits:
    return dataclasses.replace(LIMITS, **changes)


def run_python(code: str, tmp_path: Path, sandbox_host: sandbox.Host, limits: Limits = LIMITS, **options):
    return run_command([sys.executable, "-c", code], tmp_path, sandbox_host, limits, **options)


def run_command(argv: list[str], workdir: Path, sandbox_host: sandbox.Host, limits: Limits = LIMITS, **options):
    chunks: list[bytes] = []
    options.setdefault("on_output", lambda stream, chunk: chunks.append(chunk))
    outcome = run_sandboxed(
        argv, workdir=workdir, env=scrubbed_environment(), limits=limits, sandbox_host=sandbox_host, **options
    )
    return outcome, b"".join(chunks).decode(errors="replace")


def wait_until(condition, seconds: float = 60) -> bool:
    """Whether `condition()` held within `seconds` (a bound against hanging, not a measure of speed)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            continue


def test_a_well_behaved_command_exits_cleanly_with_its_output(tmp_path, sandbox_host):
    outcome, output = run_python("import numpy; print('sum', numpy.arange(4).sum())", tmp_path, sandbox_host)
    assert outcome.clean_exit
    assert "sum 6" in output
    assert outcome.limit_hit is None


def test_the_runners_user_may_use_dev_shm(tmp_path, sandbox_host):
    # multiprocessing's locks and shared memory live in /dev/shm. bwrap made its tmpfs 0755 root's, so a root
    # worker's runner (nobody) was refused them: PermissionError from the first Lock.
    code = (
        "import multiprocessing\n"
        "from multiprocessing import shared_memory\n"
        "with multiprocessing.Lock(): pass\n"
        "block = shared_memory.SharedMemory(create=True, size=4096)\n"
        "block.close()\n"
        "block.unlink()\n"
        "print('shared')"
    )
    outcome, output = run_python(code, tmp_path, sandbox_host)
    assert outcome.clean_exit, output
    assert "shared" in output


def test_sleeping_past_the_wall_time_is_killed_with_the_reason(tmp_path, sandbox_host):
    outcome, _ = run_python("import time; time.sleep(60)", tmp_path, sandbox_host, with_limits(wall_seconds=1))
    assert outcome.limit_hit == sandbox.WALL_TIME
    assert outcome.reason == "wall-time limit of 1 s exceeded; the runner was killed"
    assert outcome.elapsed_seconds < 60  # killed, not waited for


def test_allocating_past_the_memory_limit_ends_with_the_memory_reason(tmp_path, sandbox_host):
    code = "import numpy; a = numpy.ones(2 * 1024**3 // 8); print(a.sum())"
    outcome, _ = run_python(code, tmp_path, sandbox_host)
    assert outcome.limit_hit == sandbox.MEMORY
    assert outcome.reason == "memory limit of 512 MiB exceeded"


def test_a_runner_killed_by_a_signal_is_told_apart_from_one_that_exits(tmp_path, sandbox_host):
    # bwrap reports its command's death by signal n as exit status 128 + n; the fallback sees the signal itself.
    outcome, _ = run_python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", tmp_path, sandbox_host)
    assert (outcome.exit_code, outcome.signal_number, outcome.limit_hit) == (None, 15, None)
    assert outcome.reason == "runner killed by signal 15 (SIGTERM)"
    record = outcome.sandbox_record()
    assert (record["exit_code"], record["signal"]) == (None, 15)
    exited, _ = run_python("raise SystemExit(3)", tmp_path, sandbox_host)
    assert (exited.exit_code, exited.signal_number, exited.reason) == (3, None, "runner exited with status 3")


def test_writing_gigabytes_to_stdout_is_cut_at_the_output_cap(tmp_path, sandbox_host):
    outcome, output = run_python("import sys\nwhile True: sys.stdout.write('x' * 65536)", tmp_path, sandbox_host)
    assert outcome.limit_hit == sandbox.OUTPUT
    assert len(output) == LIMITS.output_bytes
    assert outcome.output_bytes > LIMITS.output_bytes
    assert outcome.reason == f"output limit of {LIMITS.output_bytes} bytes exceeded; the runner was killed"


def test_writing_a_huge_file_hits_the_file_size_limit(tmp_path, sandbox_host):
    outcome, _ = run_python("f = open('big', 'wb')\nwhile True: f.write(b'x' * 1048576)", tmp_path, sandbox_host)
    assert outcome.limit_hit == sandbox.FILE_SIZE
    assert outcome.reason == f"file-size limit of {LIMITS.file_bytes} bytes exceeded"
    assert (tmp_path / "big").stat().st_size <= LIMITS.file_bytes


def test_many_small_files_hit_the_working_directory_limit(tmp_path, sandbox_host):
    code = "import time\nfor i in range(100):\n    open(f'f{i}', 'wb').write(b'x' * 4 * 1048576); time.sleep(0.05)"
    outcome, _ = run_python(code, tmp_path, sandbox_host)
    assert outcome.limit_hit == sandbox.WORKDIR_SIZE
    assert outcome.reason == f"working directory grew past {LIMITS.workdir_bytes} bytes; the runner was killed"


def test_a_network_connection_is_denied_and_says_so(tmp_path, sandbox_host):
    # The audit hook every Python runner loads ends it on either stack at its first step towards the network
    # (create_connection resolves the address first), before the kernel is asked.
    code = "import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)"
    outcome, output = run_python(code, tmp_path, sandbox_host)
    assert outcome.limit_hit == sandbox.NETWORK
    assert outcome.reason == "network access denied in the sandbox (socket.getaddrinfo '192.0.2.1')"
    assert outcome.exit_code == sandbox.NETWORK_DENIED_EXIT


def test_without_the_python_hook_only_bubblewrap_keeps_the_runner_off_the_network(tmp_path, sandbox_host):
    # -I ignores PYTHONPATH, so the audit hook is not loaded. Under bubblewrap the runner's loopback is its own
    # (the host's listener is not on it) and nothing else is routed; the fallback has no network namespace, so
    # the runner reaches the host's listener.
    token = uuid.uuid4().hex
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'{token}')\n"
            "except ConnectionRefusedError:\n"
            "    print('loopback refused', flush=True)\n"
            "    socket.create_connection(('192.0.2.1', 80), timeout=5)\n"
            "print('reached the host')\n"
        )
        outcome, output = run_command([sys.executable, "-I", "-c", code], tmp_path, sandbox_host)
        listener.setblocking(False)
        if bubblewrap(sandbox_host):
            assert "loopback refused" in output and "Network is unreachable" in output
            assert outcome.limit_hit == sandbox.NETWORK
            assert outcome.reason == (
                "network access denied in the sandbox (connection attempt failed: the sandbox has no network)"
            )
            with pytest.raises(BlockingIOError):
                listener.accept()
        else:
            assert outcome.clean_exit, outcome.reason
            assert "reached the host" in output
            connection, _ = listener.accept()
            with connection:
                connection.settimeout(10)
                assert connection.recv(64) == token.encode()


def test_the_environment_is_scrubbed(tmp_path, monkeypatch, sandbox_host):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    outcome, output = run_python("import os, json; print(json.dumps(sorted(os.environ)))", tmp_path, sandbox_host)
    names = json.loads(output)
    assert "DATABASE_URL" not in names and "SECRET_KEY" not in names and "REDIS_URL" not in names
    assert "PATH" in names and "TMPDIR" in names


def test_cancelling_from_the_tick_kills_the_runner(tmp_path, sandbox_host):
    outcome, _ = run_python(
        "import time; time.sleep(60)", tmp_path, sandbox_host, on_tick=lambda: False, tick_seconds=0.2
    )
    assert outcome.limit_hit == sandbox.CANCELLED
    assert outcome.reason == "the run was cancelled or taken over; the runner was killed"


def test_the_runner_and_its_children_are_gone_after_the_run(tmp_path, sandbox_host):
    # One child stays in the runner's process group, one leaves it with setsid: both are in the tree the
    # supervisor walks when it ends the run, on either stack.
    token = uuid.uuid4().hex
    code = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{token}'])\n"
        f"subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(60)', '{token}'])\n"
        "time.sleep(60)"
    )
    outcome, _ = run_python(code, tmp_path, sandbox_host, with_limits(wall_seconds=1))
    assert outcome.limit_hit == sandbox.WALL_TIME
    assert processes_with(token) == []


def test_a_daemon_that_leaves_between_two_polls_survives_only_the_fallback(tmp_path, sandbox_host):
    # The runner starts a daemon that calls setsid and forks once more, so that it is orphaned, while the
    # supervisor is held in on_output (no poll can see it), and exits. Under bubblewrap it was in the PID
    # namespace, which dies with the runner, and the run ends once it is gone. The fallback kills what its
    # polls saw: this daemon survives it unless a cgroup of the run's own holds it (the kernel kills the group).
    token = uuid.uuid4().hex
    daemon = (
        "import os, time\n"
        "os.setsid()\n"
        "middle = os.getpid()\n"
        "if os.fork(): os._exit(0)\n"
        "while os.getppid() == middle: time.sleep(0.01)\n"
        "open(f'up-{os.getpid()}', 'w').close()\n"
        "time.sleep(300)"
    )
    code = (
        "import glob, os, subprocess, sys, time\n"
        "print('ready', flush=True)\n"
        "while not os.path.exists('go'): time.sleep(0.01)\n"
        f"subprocess.Popen([sys.executable, '-c', {daemon!r}, '{token}']).wait()\n"
        "while not glob.glob('up-*'): time.sleep(0.01)\n"
        "print('daemon up')"
    )
    chunks: list[bytes] = []

    def hold_the_supervisor(stream: str, chunk: bytes) -> None:
        chunks.append(chunk)
        if b"ready" in chunk:
            (tmp_path / "go").touch()
            assert wait_until(lambda: list(tmp_path.glob("up-*")))

    try:
        outcome, _ = run_python(code, tmp_path, sandbox_host, on_output=hold_the_supervisor)
        left = processes_with(token)
    finally:
        kill_all(processes_with(token))
    assert outcome.clean_exit, outcome.reason
    assert b"daemon up" in b"".join(chunks)
    escapes = not bubblewrap(sandbox_host) and sandbox_host.cgroup_parent is None
    assert len(left) == (1 if escapes else 0)
    assert outcome.isolation.pid_namespace is bubblewrap(sandbox_host)


def test_a_forking_memory_hog_is_held_to_one_limit_for_the_whole_tree(tmp_path, sandbox_host):
    # Four children of 400 MiB each stay under the per-process address-space limit of 1024 MiB; together
    # they do not.
    code = (
        "import os, time\n"
        "children = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'x' * (400 * 1024 * 1024)\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
    )
    limits = with_limits(memory_bytes=1024 * 1024**2, wall_seconds=120)
    outcome, _ = run_python(code, tmp_path, sandbox_host, limits)
    assert outcome.limit_hit == sandbox.MEMORY
    assert outcome.reason == "memory limit of 1024 MiB exceeded by the runner's processes together; they were killed"
    assert outcome.memory_peak_bytes > 1024 * 1024**2
    verdict = protocol.outcome_verdict(outcome, tmp_path / "result.json", "runner", "")
    assert verdict.verdict == stages.ERROR
    assert "memory limit of 1024 MiB exceeded" in verdict.reason
    assert verdict.result["sandbox"]["memory_peak_bytes"] == outcome.memory_peak_bytes


def test_a_runner_writes_outside_its_directory_only_without_bubblewrap(tmp_path, sandbox_host):
    # A directory anyone may write to, and the run directory's parent, outside the run's own. Bubblewrap's
    # host is read-only; the fallback's is what the runner's user may write (here the worker's own user).
    outside = Path(tempfile.mkdtemp(prefix="calculet-sandbox-outside-"))
    outside.chmod(0o777)
    escaped = tmp_path.parent / f"escaped-{tmp_path.name}"
    try:
        code = (
            "import errno, sys\n"
            "failed = []\n"
            f"for path in [{str(outside / 'note')!r}, {str(escaped)!r}]:\n"
            "    try:\n"
            "        open(path, 'w').write('was here')\n"
            "    except OSError as error:\n"
            "        failed.append(errno.errorcode[error.errno])\n"
            "open('inside', 'w').write('fine')\n"
            "print(' '.join(failed) or 'none failed')"
        )
        outcome, output = run_python(code, tmp_path, sandbox_host)
        assert outcome.clean_exit, outcome.reason
        assert (tmp_path / "inside").read_text() == "fine"
        if bubblewrap(sandbox_host):
            assert output.split() == ["EROFS", "EROFS"]
            assert list(outside.iterdir()) == [] and not escaped.exists()
        else:
            assert output.split() == ["none", "failed"]
            assert (outside / "note").read_text() == escaped.read_text() == "was here"
            assert outcome.isolation.filesystem == sandbox.USER_PERMISSIONS
    finally:
        shutil.rmtree(outside)
        escaped.unlink(missing_ok=True)


def test_only_the_device_nodes_given_are_in_a_bubblewrap_sandbox(tmp_path, sandbox_host):
    # Bubblewrap's /dev is minimal and a hardware host gives it its board's node (/dev/kmsg stands for one
    # here); the fallback has the host's /dev, whatever it is given.
    devices = ("/dev/kmsg", "/dev/loop0", "/dev/null")
    code = f"import os; print(*(os.path.exists(path) for path in {devices!r}))"
    given, with_kmsg = run_python(code, tmp_path, sandbox_host, devices=("/dev/kmsg",))
    _, without = run_python(code, tmp_path, sandbox_host)
    assert given.clean_exit, given.reason
    if bubblewrap(sandbox_host):
        assert with_kmsg.split() == ["True", "False", "True"]
        assert without.split() == ["False", "False", "True"]
    else:
        on_the_host = [str(os.path.exists(path)) for path in devices]
        assert with_kmsg.split() == without.split() == on_the_host


def test_the_outcome_records_the_isolation_in_force(tmp_path, sandbox_host):
    outcome, output = run_python("import os; print(os.getuid())", tmp_path, sandbox_host)
    if bubblewrap(sandbox_host):
        user = "nobody" if os.geteuid() == 0 else WORKER_USER
        confined = {"pid_namespace": True, "network_isolation": "namespace", "filesystem": "read-only"}
    else:
        user = WORKER_USER
        confined = {"pid_namespace": False, "network_isolation": "audit-hook", "filesystem": "user-permissions"}
    assert int(output) == pwd.getpwnam(user).pw_uid
    record = protocol.outcome_verdict(outcome, tmp_path / "result.json", "runner", "").result["sandbox"]
    assert record == {
        "exit_code": 0,
        "signal": None,
        "limit": None,
        "elapsed_seconds": round(outcome.elapsed_seconds, 3),
        "max_rss_bytes": outcome.max_rss_bytes,
        "memory_peak_bytes": outcome.memory_peak_bytes,
        "output_bytes": len(output),
        "detached_processes": 0,
        **confined,
        "memory_limit": "cgroup-v2" if sandbox_host.cgroup_parent else "pss-poll",
        "user": user,
    }


def test_a_runner_that_daemonises_has_it_named_in_its_verdict(tmp_path, sandbox_host):
    # The daemon calls setsid and lingers there before it forks away, so that a poll of either stack sees it in
    # a session of its own; the runner then exits 0, its result is a pass, and still its verdict says so.
    token = uuid.uuid4().hex
    daemon = "import os, time\nos.setsid()\ntime.sleep(0.5)\nif os.fork(): os._exit(0)\ntime.sleep(300)"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {daemon!r}, '{token}']).wait()\n"
    try:
        outcome, _ = run_python(code, tmp_path, sandbox_host)
        left = processes_with(token)
    finally:
        kill_all(processes_with(token))
    assert outcome.clean_exit, outcome.reason
    assert outcome.detached_processes >= 1
    if bubblewrap(sandbox_host):
        assert left == []  # the PID namespace died with the runner
    write_result(tmp_path / "result.json")  # as a runner that did its job writes it
    verdict = protocol.outcome_verdict(outcome, tmp_path / "result.json", "golden", "")
    assert verdict.verdict == stages.PASS
    assert verdict.result["sandbox"]["detached_processes"] == outcome.detached_processes
    finding = next(f for f in verdict.findings if f["code"] == "processes_left_behind")
    assert finding["severity"] == "warning" and "daemonised" in finding["message"]


def test_a_daemon_that_leaves_just_before_the_runner_exits_is_counted_under_bubblewrap(tmp_path):
    # The daemon calls setsid and forks at once, while the supervisor is held in on_output, and the runner exits
    # as soon as it is up: no poll sees it. The supervisor is held until it is gone, so that what it finds after
    # is only what the namespace reported (before the census, the kernel killed it with the namespace, counted
    # nowhere: detached_processes 0).
    token = uuid.uuid4().hex
    daemon = "import os, time\nos.setsid()\nif os.fork(): os._exit(0)\nopen('up', 'w').close()\ntime.sleep(300)"
    code = (
        "import os, subprocess, sys, time\n"
        "print('ready', flush=True)\n"
        "while not os.path.exists('go'): time.sleep(0.01)\n"
        f"subprocess.Popen([sys.executable, '-c', {daemon!r}, '{token}']).wait()\n"
        "while not os.path.exists('up'): time.sleep(0.01)\n"
    )

    def hold_the_supervisor(stream: str, chunk: bytes) -> None:
        if b"ready" in chunk:
            (tmp_path / "go").touch()
            assert wait_until(lambda: (tmp_path / "up").exists())
            assert wait_until(lambda: processes_with(token) == [])

    try:
        outcome, _ = run_python(code, tmp_path, sandbox.host(), on_output=hold_the_supervisor)
    finally:
        kill_all(processes_with(token))
    assert outcome.clean_exit, outcome.reason
    assert outcome.detached_processes == 1
    write_result(tmp_path / "result.json")
    verdict = protocol.outcome_verdict(outcome, tmp_path / "result.json", "golden", "")
    assert verdict.verdict == stages.PASS
    finding = next(f for f in verdict.findings if f["code"] == "processes_left_behind")
    assert "left 1 process(es) to outlive it" in finding["message"]


def threads_with(token: str) -> list[int]:
    """Processes with a live thread whose command line carries `token`: one whose main thread has exited shows
    as a zombie with an empty command line in /proc/PID, but not in its other threads' /proc/PID/task/TID."""
    found = []
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        try:
            alive = (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
            if alive and token.encode() in (task / "cmdline").read_bytes():
                found.append(int(task.parent.parent.name))
        except OSError:
            continue
    return sorted(set(found))


def test_a_daemon_whose_main_thread_exits_is_counted_and_killed(tmp_path, sandbox_host):
    # The daemon calls setsid and lingers, so that a poll of either stack sees it, then its main thread alone
    # exits (the raw exit system call, not exit_group) while another thread sleeps on: /proc/PID/stat shows a
    # zombie. Before, the census counted it as one (0 left under bubblewrap), and the fallback's tree took it
    # for gone: counted, but never killed, it outlived the run.
    token = uuid.uuid4().hex
    daemon = (
        "import ctypes, os, threading, time\n"
        "os.setsid()\n"
        "time.sleep(0.5)\n"
        "threading.Thread(target=lambda: (open('up', 'w').close(), time.sleep(300))).start()\n"
        "while not os.path.exists('up'): time.sleep(0.01)\n"
        "ctypes.CDLL(None).syscall(60, 0)\n"  # SYS_exit on x86-64: this thread only
    )
    code = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {daemon!r}, '{token}'])\n"
        "while not os.path.exists('up'): time.sleep(0.01)\n"
        "time.sleep(0.3)\n"
    )
    try:
        outcome, _ = run_python(code, tmp_path, sandbox_host)
        left = threads_with(token)
    finally:
        kill_all(threads_with(token))
    assert outcome.clean_exit, outcome.reason
    assert outcome.detached_processes == 1
    assert left == []


def test_the_census_refuses_to_run_outside_bwraps_namespace(tmp_path):
    # Its signal to all stops every process its user may signal: outside bwrap's namespace, a host's. Here it
    # is PID 1 of a namespace of unshare's, where a census that did not refuse would stop only what is in it.
    unshare = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    census = [sys.executable, "-S", "-I", str(sandbox.CENSUS), "1", "/bin/echo", "ran"]
    ran = subprocess.run([*unshare, *census], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout) == (1, ""), ran.stderr
    assert "the census runs only as bwrap's command, in a PID namespace of its own" in ran.stderr


def test_a_runner_that_waits_for_its_children_has_no_finding(tmp_path, sandbox_host):
    # Children run and waited for (a shell's background job among them, a fork the last thing before the exit):
    # nothing outlives the runner, run after run.
    code = (
        "import os, subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "subprocess.run(['/bin/sh', '-c', '/bin/true & wait'], check=True)\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    for _ in range(5):
        outcome, _ = run_python(code, tmp_path, sandbox_host)
        assert outcome.clean_exit, outcome.reason
        assert outcome.detached_processes == 0
        write_result(tmp_path / "result.json")
        verdict = protocol.outcome_verdict(outcome, tmp_path / "result.json", "golden", "")
        assert [f for f in verdict.findings if f["code"] == "processes_left_behind"] == []


def test_the_standard_librarys_helpers_that_end_with_the_runner_are_not_left_behind(tmp_path, sandbox_host):
    # Shared memory starts multiprocessing's resource tracker, a forkserver pool the forkserver: both end once
    # their pipe to the runner closes, a moment after its exit. Before, the census (and the fallback's look at
    # the session) found them still running then: processes_left_behind on a runner that did nothing wrong.
    code = (
        "import multiprocessing\n"
        "from multiprocessing import shared_memory\n"
        "if __name__ == '__main__':\n"
        "    block = shared_memory.SharedMemory(create=True, size=4096)\n"
        "    block.close()\n"
        "    block.unlink()\n"
        "    with multiprocessing.get_context('forkserver').Pool(2) as pool:\n"
        "        print(sum(pool.map(abs, range(10))))\n"
    )
    (tmp_path / "runner.py").write_text(code)
    for _ in range(3):
        outcome, output = run_command([sys.executable, str(tmp_path / "runner.py")], tmp_path, sandbox_host)
        assert outcome.clean_exit, output
        assert "45" in output
        assert outcome.detached_processes == 0


def test_a_runner_that_leaves_an_orphan_in_its_session_has_it_named_in_its_verdict(tmp_path):
    # No setsid and no lingering: the child forks and exits at once, so its orphan is never in a session of its
    # own and is no descendant of the runner when the runner exits 0. It is still in the runner's session. On
    # the fallback, where no PID namespace ends it, it was killed by the process group and counted nowhere.
    fallback = dataclasses.replace(sandbox.host(), bwrap=None, user=WORKER_USER, uid=os.geteuid(), gid=os.getegid())
    token = uuid.uuid4().hex
    daemon = "import os, time\nif os.fork(): os._exit(0)\ntime.sleep(300)"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {daemon!r}, '{token}']).wait()\n"
    try:
        outcome, _ = run_python(code, tmp_path, fallback)
    finally:
        kill_all(processes_with(token))
    assert outcome.clean_exit, outcome.reason
    assert outcome.detached_processes == 1
    write_result(tmp_path / "result.json")
    verdict = protocol.outcome_verdict(outcome, tmp_path / "result.json", "golden", "")
    assert verdict.verdict == stages.PASS
    finding = next(f for f in verdict.findings if f["code"] == "processes_left_behind")
    assert "left 1 process(es) to outlive it" in finding["message"]


def test_the_fallback_runs_a_root_workers_runner_as_its_user(tmp_path):
    # This host without bwrap, as probed: for a root worker the runner's user is `nobody`, which the child
    # becomes before exec, without supplementary groups; it may write where others may, not in the worker's
    # directories. The run directory's parents must let others through.
    fallback = dataclasses.replace(sandbox.host(), bwrap=None)
    base = Path(tempfile.mkdtemp(prefix="calculet-sandbox-fallback-"))
    base.chmod(0o755)
    outside = base / "open"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    workdir = base / "run"
    workdir.mkdir()
    try:
        script = (
            f"id -u; id -G; echo x > {outside}/note && echo written; "
            f"{{ echo x > {base}/escaped; }} 2>/dev/null || echo refused"
        )
        outcome, output = run_command(["/bin/sh", "-c", script], workdir, fallback)
        assert outcome.clean_exit, outcome.reason
        uid, groups, *writes = output.splitlines()
        assert uid == str(fallback.uid)
        if fallback.uid != os.geteuid():  # a root worker: the child became `nobody`, without supplementary groups
            assert groups == str(fallback.gid)
            assert writes == ["written", "refused"]
        else:
            assert writes == ["written"]
        assert (outside / "note").stat().st_uid == fallback.uid
        assert workdir.stat().st_uid == fallback.uid
        assert outcome.sandbox_record()["user"] == fallback.user == ("nobody" if os.geteuid() == 0 else WORKER_USER)
        assert outcome.sandbox_record()["pid_namespace"] is False
    finally:
        shutil.rmtree(base)


def test_the_fallback_refuses_a_directory_its_runner_user_cannot_reach(tmp_path):
    # pytest's temporary root is closed to others. Bubblewrap shows the runner's user the way down to its
    # directory (every test above runs in one); without it, nothing starts and nothing is handed over.
    nobody = pwd.getpwnam("nobody")
    as_nobody = dataclasses.replace(sandbox.host(), bwrap=None, user="nobody", uid=nobody.pw_uid, gid=nobody.pw_gid)
    closed = next(parent for parent in tmp_path.parents if not parent.stat().st_mode & 0o001)
    with pytest.raises(PermissionError) as refused:
        run_command(["/bin/true"], tmp_path, as_nobody)
    assert str(refused.value) == (
        f"the runner's user nobody cannot reach {tmp_path}: {closed} is not searchable by others "
        "(choose an ACCEPTANCE_RUN_DIR whose parents are)"
    )
    assert tmp_path.stat().st_uid == os.geteuid()


def test_the_sandbox_runs_with_only_the_standard_library(tmp_path):
    # `python -S` has no site-packages (no Django, no numpy): the sandbox must import and run a command there.
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from calculet_agent import sandbox\n"
        "limits = sandbox.Limits(wall_seconds=60, memory_bytes=2**29, output_bytes=2**20, file_bytes=2**20,"
        " workdir_bytes=2**20)\n"
        "seen = []\n"
        f"outcome = sandbox.run_sandboxed(['/bin/echo', 'ran'], workdir=Path({str(tmp_path)!r}),"
        " env=sandbox.scrubbed_environment(), limits=limits, on_output=lambda stream, chunk: seen.append(chunk))\n"
        "outside = {name.split('.')[0] for name in sys.modules} - {*sys.stdlib_module_names, '__main__'}\n"
        "print(outcome.clean_exit, b''.join(seen).decode().strip(), sorted(outside))"
    )
    ran = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=sandbox.PACKAGE_ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["True", "ran", "['calculet_agent']"]


def test_a_runner_imports_the_editable_install_of_a_checkout_in_a_closed_directory(tmp_path):
    # A checkout in `mktemp -d` (0700), its venv inside, and a project installed editable there: setuptools
    # sends its package's imports to the checkout through a finder in site-packages, not a directory on sys.path.
    # A root worker's runner runs as nobody, who cannot pass the closed directory: the sandbox binds what the
    # finder names (before it did, the runner failed with "No module named 'flatpkg'").
    closed = Path(tempfile.mkdtemp(prefix="calculet-sandbox-checkout-"))
    assert closed.stat().st_mode & 0o777 == 0o700
    project = closed / "project"
    (project / "flatpkg").mkdir(parents=True)
    (project / "flatpkg" / "__init__.py").write_text("WHERE = __file__\n")
    (project / "pyproject.toml").write_text(
        '[project]\nname = "flatpkg"\nversion = "1"\n[tool.setuptools]\npackages = ["flatpkg"]\n'
    )
    python = closed / "venv" / "bin" / "python"
    runner = "import flatpkg; print(flatpkg.WHERE)"
    worker = (
        "import sys, tempfile\n"
        f"sys.path.insert(0, {str(sandbox.PACKAGE_ROOT)!r})\n"
        "from pathlib import Path\n"
        "from calculet_agent import sandbox\n"
        "limits = sandbox.Limits(wall_seconds=60, memory_bytes=2**30, output_bytes=2**20, file_bytes=2**20,"
        " workdir_bytes=2**20)\n"
        "seen = []\n"
        f"outcome = sandbox.run_sandboxed([sys.executable, '-c', {runner!r}], workdir=Path({str(tmp_path)!r}),"
        " env=sandbox.scrubbed_environment(), limits=limits, on_output=lambda stream, chunk: seen.append(chunk))\n"
        "print(outcome.isolation.user, outcome.exit_code, b''.join(seen).decode())"
    )
    try:
        venv.EnvBuilder().create(closed / "venv")
        install = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "-e", project]
        subprocess.run(install, check=True, capture_output=True, timeout=600)
        site_packages = next((closed / "venv" / "lib").glob("python*/site-packages"))
        assert list(site_packages.glob("__editable___flatpkg_*_finder.py")), "installed through a finder"
        ran = subprocess.run([python, "-c", worker], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(closed)
    assert ran.returncode == 0, ran.stderr
    user = "nobody" if os.geteuid() == 0 else WORKER_USER
    assert ran.stdout.split() == [user, "0", str(project / "flatpkg" / "__init__.py")], ran.stdout


def write_result(path: Path, **fields):
    result = {
        "schema_version": 2,
        "stage": "golden",
        "verdict": "pass",
        "metrics": {"cosine": 0.99999},
        "checks": [{"name": "cosine", "passed": True, "detail": "0.99999 >= 0.9999"}],
        "log_excerpt": "",
        "produced_files": [],
    }
    result.update(fields)
    path.write_text(json.dumps(result))


ISOLATED = sandbox.Isolation(True, sandbox.NAMESPACE, sandbox.READ_ONLY, sandbox.PSS_POLL, "nobody")


def clean(exit_code=0) -> sandbox.Outcome:
    return sandbox.Outcome(exit_code, None, None, "", 0.1, 0, 0, ISOLATED)


def test_a_well_formed_pass_is_a_pass_with_its_metrics(tmp_path):
    write_result(tmp_path / "result.json")
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert outcome.verdict == stages.PASS
    assert outcome.metrics == {"cosine": 0.99999}


def test_a_fail_names_the_failed_checks(tmp_path):
    checks = [
        {"name": "cosine", "passed": False, "detail": "0.9990 < 0.9999"},
        {"name": "top1", "passed": True, "detail": "1.0"},
    ]
    write_result(tmp_path / "result.json", verdict="fail", checks=checks)
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert outcome.verdict == stages.FAIL
    assert "cosine: 0.9990 < 0.9999" in outcome.reason
    # The runner reported no finding: the failed check is the run's finding all the same.
    assert outcome.findings == [
        {"code": "check_failed", "severity": "error", "field": "checks.cosine", "message": "cosine: 0.9990 < 0.9999"}
    ]


def test_a_probe_that_failed_a_check_names_it_in_the_findings(tmp_path):
    probe = {"name": "soak", "verdict": "fail", "checks": [{"name": "rate", "passed": False, "detail": "3.1 < 4"}]}
    write_result(tmp_path / "result.json", stage="soak", verdict="fail", probes=[probe])
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "soak", "")
    assert outcome.verdict == stages.FAIL
    assert [(f["code"], f["field"], f["message"]) for f in outcome.findings] == [
        ("check_failed", "probes.soak.checks.rate", "rate: 3.1 < 4")
    ]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"stage": "soak"}, "not 'golden'"),
        ({"schema_version": 1}, "schema_version"),
        ({"probes": [{"name": "decode_batch", "verdict": "fail"}]}, "says pass while one of its probes"),
        ({"verdict": "maybe"}, "expected pass or fail"),
        ({"checks": [{"name": "cosine", "passed": False, "detail": ""}]}, "says pass while"),
    ],
)
def test_a_malformed_result_is_an_error_not_a_verdict(tmp_path, fields, problem):
    write_result(tmp_path / "result.json", **fields)
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert outcome.verdict == stages.ERROR
    assert problem in outcome.reason


def test_a_missing_result_or_a_refused_job_is_an_error(tmp_path):
    missing = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert missing.verdict == stages.ERROR
    assert "no result file" in missing.reason
    refused = protocol.outcome_verdict(clean(2), tmp_path / "result.json", "golden", "error: unknown stage 'x'\n")
    assert refused.verdict == stages.ERROR
    assert "refused the job (exit 2): error: unknown stage 'x'" in refused.reason


def test_stage_params_come_from_the_answer_over_the_defaults():
    golden = protocol.stage_params(
        stages.GOLDEN,
        golden_tolerances_given={"cosine_min": 0.99995, "decode_logits.top1_min": 1.0, "k": 3.0},
        error_paths=[],
        thresholds={},
    )
    assert golden["tolerances"]["prefill_logits"] == {
        **protocol.DEFAULT_GOLDEN_TOLERANCES,
        "cosine_min": 0.99995,
        "k": 3,
    }
    assert golden["tolerances"]["decode_logits"]["top1_min"] == 1.0
    assert golden["tolerances"]["prefill_logits"]["top1_min"] == protocol.DEFAULT_GOLDEN_TOLERANCES["top1_min"]
    assert golden["min_decode_steps"] == protocol.MIN_GOLDEN_DECODE_STEPS == 4
    raised = protocol.stage_params(
        stages.GOLDEN, golden_tolerances_given={}, error_paths=[], thresholds={"golden_min_decode_steps": 8.0}
    )
    assert raised["min_decode_steps"] == 8 and isinstance(raised["min_decode_steps"], int)
    soak = protocol.stage_params(
        stages.SOAK,
        golden_tolerances_given={},
        error_paths=[],
        thresholds={"min_decode_tokens_per_s": 55, "soak_requests": 4.0},
    )
    assert soak["min_decode_tokens_per_s"] == 55
    assert soak["requests"] == 4 and isinstance(soak["requests"], int)
    assert soak["concurrency"] == protocol.DEFAULT_SOAK["concurrency"]
    failure = protocol.stage_params(
        stages.FAILURE,
        golden_tolerances_given={},
        error_paths=[{"scenario": "kv_apply_failure", "expect_code": 15}],
        thresholds={},
    )
    assert failure["scenarios"] == [{"fault": "kv_apply_failure", "expect_code": 15}]
    assert protocol.stage_params(stages.RUNNER, golden_tolerances_given={}, error_paths=[], thresholds={}) == {}
