"""The processes a soak starts — gunicorn, Celery workers, Celery beat — each in a process group of its own, so
that stopping one stops everything it started; and their CPU time, read from /proc."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Service:
    """One command in its own session (process group), its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict, log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def logged_errors(self) -> list[str]:
        """The ERROR lines of its log (Django's and Celery's format: time, level, logger, message)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [f"{self.name}: {line[:400]}" for line in lines if " ERROR " in line or " CRITICAL " in line]

    def stop(self, grace: float) -> None:
        """SIGTERM the group, SIGKILL whatever is left after `grace` seconds."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
        # The leader may be gone while its children are not (a gunicorn or Celery pool child).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self._log.close()


def _stat_fields(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; the fields after it are space-separated.
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(group: int) -> tuple[float, float]:
    """CPU seconds of the live processes of a process group: (their own, their reaped children's).

    A Celery pool child waits for its runner subprocesses, so their CPU time is in the pool child's
    children's time even though each runner ran in a session of its own."""
    own = children = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fields = _stat_fields(pid)
        if fields is None or int(fields[2]) != group:  # fields[2] is pgrp
            continue
        own += int(fields[11]) + int(fields[12])  # utime, stime
        children += int(fields[13]) + int(fields[14])  # cutime, cstime
    return own / CLOCK_TICKS, children / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (every core, every user)."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / CLOCK_TICKS


def start_gunicorn(env: dict, log_dir: Path, port: int, workers: int) -> Service:
    """Gunicorn as docs/deploy.md runs it: gunicorn.conf.py (gevent workers)."""
    argv = [
        str(ROOT / ".venv" / "bin" / "gunicorn"), "-c", "gunicorn.conf.py", "calculet.wsgi",
        "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--log-level", "warning",
    ]  # fmt: skip
    return Service("gunicorn", argv, env, log_dir)


def start_worker(env: dict, log_dir: Path, name: str) -> Service:
    """A worker for the simulator target's queue and the default queue (the sweeper), one run at a time;
    the options are those of `manage.py serve_target`."""
    argv = [
        sys.executable, "-m", "celery", "-A", "calculet", "worker", "--queues", "simulator,default",
        "--pool", "prefork", "--concurrency", "1", "--prefetch-multiplier", "1", "--hostname", f"{name}@%h",
        "--without-gossip", "--without-mingle", "--loglevel", "info",
    ]  # fmt: skip
    return Service(name, argv, env, log_dir)


def start_beat(env: dict, log_dir: Path) -> Service:
    argv = [
        sys.executable, "-m", "celery", "-A", "calculet", "beat", "--schedule", str(log_dir / "celerybeat-schedule"),
        "--loglevel", "info",
    ]  # fmt: skip
    return Service("beat", argv, env, log_dir)


def wait_http(url: str, service: Service, timeout: float) -> None:
    session = requests.Session()
    session.trust_env = False  # loopback only, never through a proxy from the environment
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not service.alive():
            raise RuntimeError(f"{service.name} exited; see {service.log_path}")
        try:
            if session.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s; see {service.log_path}")
