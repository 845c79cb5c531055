"""calculet served as deployed: gunicorn with the project's gunicorn.conf.py, on the test database and storage."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.acceptance.workers import ROOT, worker_env


@contextmanager
def gunicorn(workers: int = 1, **env) -> Iterator[tuple[str, list[int]]]:
    """Yields the server's URL and its workers' process ids once /healthz answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "gunicorn"), "-c", "gunicorn.conf.py", "calculet.wsgi"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
    server = subprocess.Popen(command, cwd=ROOT, env=worker_env(LOG_LEVEL="WARNING", **env), start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
        yield url, [int(pid) for pid in children]
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
