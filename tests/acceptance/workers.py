"""Real Celery worker processes for the tests and benchmarks, in their own process groups; waiting on them, and
finding the processes a run leaves behind."""

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection

from acceptance.services import runs_sweep
from tests import tiers

ROOT = Path(__file__).resolve().parents[2]
BOARD_DOUBLE = Path(__file__).resolve().parent / "board_double.py"


def dev_script():
    """scripts/dev.py as a module (it is a script, not a package's)."""
    spec = importlib.util.spec_from_file_location("dev_script", ROOT / "scripts" / "dev.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def database_url() -> str:
    """The URL of the database this process uses now (the test database under pytest)."""
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def worker_env(**overrides) -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ACCEPTANCE_", "CELERY_", "PYTEST_", "DJANGO_"))
    }
    env.update(
        {
            "DATABASE_URL": database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "SECRET_KEY": "worker-test",
            "STORAGE_ROOT": str(settings.STORAGE_ROOT),
            "CALCULET_DATA_DIR": str(Path(settings.STORAGE_ROOT).parent / "worker-data"),
            "ACCEPTANCE_RUN_LEASE_SECONDS": "6",
            "ACCEPTANCE_RUN_HEARTBEAT_SECONDS": "1",
            "ACCEPTANCE_TARGET_HEARTBEAT_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update({key: str(value) for key, value in overrides.items()})
    return env


class Worker:
    """One `celery worker --pool prefork --concurrency 1` (or `manage.py serve_target`, or a server) process group."""

    def __init__(self, argv: list[str], env: dict, log_path: Path, cwd: Path = ROOT):
        tiers.require_slow_mark(" ".join(argv[:4]))
        self.log_path = log_path
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @classmethod
    def celery(cls, queue: str, name: str, log_dir: Path, **env) -> "Worker":
        argv = [
            sys.executable, "-m", "celery", "-A", "calculet", "worker", "--pool", "prefork", "--concurrency", "1",
            "--prefetch-multiplier", "1", "--queues", queue, "--hostname", f"{name}@%h", "--without-gossip",
            "--without-mingle", "--without-heartbeat", "--loglevel", "info",
        ]  # fmt: skip
        return cls(argv, worker_env(**env), log_dir / f"{name}.log")

    @classmethod
    def serve_target(cls, slug: str, options: list[str], log_dir: Path, **env) -> "Worker":
        argv = [sys.executable, "manage.py", "serve_target", slug, *options]
        return cls(argv, worker_env(**env), log_dir / f"{slug}.log")

    @classmethod
    def agent(
        cls,
        server: str,
        token: str,
        state_dir: Path,
        log_dir: Path,
        name: str = "agent",
        runner: str = "",
        options: tuple[str, ...] = (),
    ) -> "Worker":
        """calculet-agent serving the target of `token` (with `runner`, or the simulator's own; `options` more of
        its command line), its environment holding only the server's URL and the target's token: no database,
        broker, storage or signing key."""
        argv = [sys.executable, "-m", "calculet_agent", "--state-dir", str(state_dir), "--poll-seconds", "0.5"]
        argv += ["--runner-command", runner or f"{sys.executable} -m npu_sim run", *options]
        env = {"CALCULET_SERVER": server, "CALCULET_TARGET_TOKEN": token}
        # Started in agent/, `-m calculet_agent` is this checkout's agent, whatever the environment installed.
        return cls(argv, env, log_dir / f"{name}.log", cwd=ROOT / "agent")

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def pool_children(self) -> list[int]:
        try:
            return [int(pid) for pid in Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()]
        except FileNotFoundError:
            return []

    def wait_for_pool_child(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            children = self.pool_children()
            if children:
                return children[0]
            time.sleep(0.1)
        raise AssertionError(f"no pool child after {timeout} s; see {self.log_path}")

    def kill(self) -> None:
        """kill -9 the whole worker: main process, pool child, everything in its process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            self.kill()
        self.log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def broker_flush() -> None:
    """Remove every message and queue of this test process's broker (its keys alone in a parallel run)."""
    from calculet.celery import app

    prefix = app.conf.broker_transport_options.get("global_keyprefix", "")
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)


def wait_until(predicate, *, timeout: float, what: str, workers=(), sweep: bool = True):
    """Poll until `predicate()` is truthy and return its value; with `sweep`, sweep every second as Celery beat
    would."""
    deadline = time.monotonic() + timeout
    last_sweep = 0.0
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if sweep and time.monotonic() - last_sweep > 1:
            runs_sweep()
            last_sweep = time.monotonic()
        time.sleep(0.2)
    logs = "\n".join(worker.log_text()[-3000:] for worker in workers)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs}")


def processes_with(token: str) -> list[int]:
    """Live processes whose command line carries `token` (zombies waiting to be reaped do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if token.encode() not in (entry / "cmdline").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found
