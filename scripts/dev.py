#!/usr/bin/env python3
"""Set-up and the two everyday commands, needing nothing but Python 3.11+.

python3 scripts/dev.py run [--port N]  # venv, install what serving needs, migrate, import, serve, worker, agent, demo
python3 scripts/dev.py test [--fast]   # venv, install with the test tools, lint, checks, the test suite
"""

import argparse
import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from npu_sim.kernels import pinned_kernels  # noqa: E402 (no numpy: read before the venv exists)

VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
INSTALL_STAMP = VENV / ".calculet-installed"


def sh(*args: str | Path, env: dict | None = None) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], cwd=ROOT, env=env, check=True)


def ensure_venv(extras: str = "") -> None:
    """Create .venv and install the agent and the project (with `extras`, e.g. "test"), again whenever either
    pyproject.toml changes.
    `run` installs only what serving needs; `test` adds the test tools, which `run` then finds installed too."""
    if not PYTHON.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    manifests = (ROOT / "pyproject.toml").read_bytes() + (ROOT / "agent" / "pyproject.toml").read_bytes()
    digest = hashlib.sha256(manifests).hexdigest()
    installed = INSTALL_STAMP.read_text().split() if INSTALL_STAMP.exists() else []
    if installed[:1] == [digest] and (not extras or extras in installed[1:]):
        return
    sh(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    # The target agent first: the project depends on it by name, and it is not on an index.
    sh(PYTHON, "-m", "pip", "install", "--quiet", "-e", "./agent", "-e", f".[{extras}]" if extras else ".")
    kept = [extra for extra in installed[1:] if installed[:1] == [digest]]
    INSTALL_STAMP.write_text(" ".join([digest, *dict.fromkeys([*kept, *([extras] if extras else [])])]))


def worker_commands(python: Path | str) -> list[list[str]]:
    """The Celery worker `run` starts when there is no REDIS_URL, taking the server's own tasks (checks,
    notifications) off the embedded broker as workers take them off Redis, with Celery beat inside it (the
    sweeper, the health jobs)."""
    default_worker = [str(python), "-m", "celery", "-A", "calculet", "worker", "--queues", "default"]
    default_worker += ["--concurrency", "1", "--beat", "--without-gossip", "--without-mingle", "--loglevel", "info"]
    return [default_worker]


# The name of the simulator's target token `run` makes anew at each start (the one before revoked).
AGENT_TOKEN_NAME = "scripts/dev.py run"


def agent_dir() -> Path:
    """The state directory of the simulator's calculet-agent: its key, input cache, run directories and token."""
    return data_dir() / "agent"


def agent_command(python: Path | str, state_dir: Path) -> list[str]:
    """calculet-agent serving the bundled simulator target as an agent serves a board, with the simulator as its
    runner: the target token in `state_dir`/token, the server's URL in its environment (`agent_env`)."""
    agent = [str(Path(python).parent / "calculet-agent"), "--token-file", str(state_dir / "token")]
    agent += ["--state-dir", str(state_dir), "--runner-command", f"{python} -m npu_sim run", "--poll-seconds", "2"]
    return agent


def agent_env(url: str) -> dict:
    """All the agent's environment: the server's URL. No database, broker, storage or signing key."""
    return {"CALCULET_SERVER": url}


def wait_serving(url: str, server: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until the web server answers /healthz; a server that exits or never answers stops `run`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the web server exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"the web server did not answer {url}/healthz within {timeout:.0f} s")


def start(commands: list[list[str]], env: dict) -> list[subprocess.Popen]:
    """Start each command in a process group of its own, which `stop` ends whole (a worker and its pool)."""
    processes = []
    for command in commands:
        print("+", " ".join(command), flush=True)
        processes.append(subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True))
    return processes


def stop(processes: list[subprocess.Popen], grace_seconds: float = 10) -> None:
    """Ask each process to stop (a worker finishes its task), then kill its whole group, at the latest after
    `grace_seconds`: the sweeper re-sends a run whose worker was killed, as it does for any lost worker."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def data_dir() -> Path:
    """The settings' CALCULET_DATA_DIR: where the SQLite file, the embedded broker and `run`'s secret key live."""
    return Path(os.environ.get("CALCULET_DATA_DIR", ROOT / "data"))


def port_in_use(port: int) -> bool:
    """Whether another server listens on 127.0.0.1:`port` (bound as runserver binds, so a port another
    process has just left still counts as free)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def run_port(args: list[str]) -> int:
    """`run`'s port: --port N, else $PORT, else 8000; a busy one stops `run` before it installs anything."""
    parser = argparse.ArgumentParser(prog="scripts/dev.py run")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")), help="default: $PORT or 8000")
    port = parser.parse_args(args).port
    if port_in_use(port):
        sys.exit(f"port {port} is in use on 127.0.0.1: stop what serves it, or choose another (--port N or PORT=N)")
    return port


def secret_key() -> str:
    """A signing key of this checkout's own, made on the first `run` and kept in the data folder, so logins
    survive a restart."""
    path = data_dir() / "secret-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def run(port: int) -> None:
    # Without DEBUG, as deployed: a missing page is the product's own 404 page (Django's debug page would list
    # every URL pattern) and an error the product's 500, its traceback in this console. runserver --insecure
    # serves the static files, which only DEBUG would otherwise have it serve. DEBUG=1 brings the debug pages.
    env = {
        **os.environ,
        "DEBUG": os.environ.get("DEBUG", "0"),
        "CALCULET_BASE_URL": os.environ.get("CALCULET_BASE_URL", f"http://127.0.0.1:{port}"),
    }
    if "SECRET_KEY" not in env:
        env["SECRET_KEY"] = secret_key()
    manage = [PYTHON, "manage.py"]
    sh(*manage, "migrate", "--no-input", env=env)
    sh(*manage, "import_checklist", env=env)
    # With REDIS_URL set, the workers and the simulator's agent are yours to run, as in production (README.md).
    laptop = not env.get("REDIS_URL")
    if laptop:
        # Before the demo sends its runs: from this token on, the simulator's runner stages are pulled.
        sh(*manage, "target_token", "create", "simulator", "--name", AGENT_TOKEN_NAME, "--replace",
           "--key-file", agent_dir() / "token", env=env)  # fmt: skip
    # A terminal closed or a `kill` stops the workers too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.default_int_handler)
    processes = start(worker_commands(PYTHON), env) if laptop else []
    try:
        server = start([[str(PYTHON), "manage.py", "runserver", "--insecure", f"127.0.0.1:{port}"]], env)[0]
        processes.append(server)
        if laptop:
            local = f"http://127.0.0.1:{port}"  # whatever CALCULET_BASE_URL says to browsers
            wait_serving(local, server)
            processes += start([agent_command(PYTHON, agent_dir())], agent_env(local))
        sh(*manage, "seed_demo", env=env)  # waits for the demo's chains, which the simulator's agent runs
        server.wait()
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
    finally:
        stop(processes)


# The fast tier's processes: one per core of this 2-core machine, each on a test database of its own. Each
# test file goes whole to one of them, so a module-scoped fixture (the proof matrix's, the judged packages')
# is built once, not in each process that gets one of the file's tests.
FAST_PARALLEL = ["--numprocesses", "2", "--dist", "loadfile"]
# The edit-test loop fuzzes the API with a quarter of the requests the whole suite (CI) sends.
FAST_FUZZ = ["--fuzz-examples", "2"]


def test(args: list[str]) -> None:
    """Lint, checks and the suite; with --fast (first), the tests in parallel without the slow tiers
    (tests/tiers.py: real workers, live servers, browsers, the laptop default). Other arguments go to pytest."""
    # The suite runs on the real services; a machine without them fails here rather than skipping.
    env = {
        **os.environ,
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/calculet"),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "test-only-secret-key"),
        **pinned_kernels(),
    }
    # Every test process (and each worker a test starts) imports the same few hundred modules and pytest
    # rewrites every test module's asserts: cached compiled, they load in half the time.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    fast = args[:1] == ["--fast"]
    sh(PYTHON, "-m", "ruff", "check", ".", env=env)
    sh(PYTHON, "-m", "mypy", env=env)
    sh(VENV / "bin" / "lint-imports", env=env)
    sh(PYTHON, "manage.py", "check", env=env)
    sh(PYTHON, "manage.py", "makemigrations", "--check", "--dry-run", env=env)
    if fast:
        sh(PYTHON, "-m", "pytest", "--fast", *FAST_PARALLEL, *FAST_FUZZ, *args[1:], env=env)
    elif args:
        sh(PYTHON, "-m", "pytest", *args, env=env)
    else:
        test_tiers_side_by_side(env)


def with_path(url: str, path: str) -> str:
    return urllib.parse.urlsplit(url)._replace(path=path).geturl()


def test_tiers_side_by_side(env: dict) -> None:
    """The whole suite as two pytest processes at once: the slow tiers (which spend most of their time waiting
    on the workers, servers and browsers they start) on the given database and Redis database, the fast tier
    on a database and a Redis database of its own (the slow tiers empty theirs). On a 2-core machine the suite
    then takes about as long as the longer of the two. The fast tier's report follows the slow tiers'."""
    database = urllib.parse.urlsplit(env["DATABASE_URL"])
    redis_database = int(urllib.parse.urlsplit(env["REDIS_URL"]).path.strip("/") or 0)
    fast_env = {
        **env,
        "DATABASE_URL": with_path(env["DATABASE_URL"], database.path + "_fast"),
        "REDIS_URL": with_path(env["REDIS_URL"], f"/{(redis_database + 1) % 16}"),
    }
    fast_command = [str(PYTHON), "-m", "pytest", "--fast"]
    slow_command = [str(PYTHON), "-m", "pytest", "--slow"]
    with tempfile.TemporaryFile(mode="w+") as fast_report:
        print("+", " ".join(fast_command), "(its report follows the slow tiers')", flush=True)
        fast = subprocess.Popen(fast_command, cwd=ROOT, env=fast_env, stdout=fast_report, stderr=subprocess.STDOUT)
        print("+", " ".join(slow_command), flush=True)
        slow_status = subprocess.run(slow_command, cwd=ROOT, env=env).returncode
        fast_status = fast.wait()
        fast_report.seek(0)
        shutil.copyfileobj(fast_report, sys.stdout)
        sys.stdout.flush()
    print(f"slow tiers: exit status {slow_status}; fast tier: exit status {fast_status}", flush=True)
    if slow_status or fast_status:
        sys.exit(1)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "test"):
        sys.exit(__doc__)
    command, args = sys.argv[1], sys.argv[2:]
    if command == "run":
        port = run_port(args)  # before anything is installed or migrated
        ensure_venv()
        run(port)
    else:
        ensure_venv("test")
        test(args)


if __name__ == "__main__":
    main()
