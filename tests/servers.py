"""calculet served as deployed: gunicorn with the project's gunicorn.conf.py, on the test database and storage."""

import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.acceptance.workers import Worker, wait_until, worker_env


def _serves(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except requests.RequestException:
        return False


@contextmanager
def gunicorn(workers: int = 1, port: int | None = None, **env) -> Iterator[tuple[str, list[int]]]:
    """Yields the server's URL and its workers' process ids once /healthz answers (on `port`, or a free one).
    It is a `Worker`, so only a test of a slow tier may start it."""
    if port is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "gunicorn"), "-c", "gunicorn.conf.py", "calculet.wsgi"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
    with tempfile.TemporaryDirectory(prefix="calculet-gunicorn-") as logs:
        server = Worker(command, worker_env(LOG_LEVEL="WARNING", **env), Path(logs) / "gunicorn.log")
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: _serves(url), timeout=60, what="gunicorn", workers=[server], sweep=False)
            wait_until(lambda: len(server.pool_children()) >= workers, timeout=60, what="gunicorn's workers",
                       workers=[server], sweep=False)  # fmt: skip
            yield url, server.pool_children()
        finally:
            server.stop()
