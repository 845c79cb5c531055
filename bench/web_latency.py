"""p95 latency of the dashboard and the question list under 16 concurrent clients, against a trivial view.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/web_latency.py [--seconds 20]

Creates a throw-away database (benchweb_<name>), fills it with `bench/web_dataset.py` (60 questions,
5,000 artifacts, 50,000 runs, 100,000 audit rows), serves it with gunicorn, logs 16 clients in as a PM and
lets each request the pages back to back. Two measurements, each after a warm-up:

- mixed: every client cycles through /healthz, the dashboard and the question list, so the trivial view
  sees the same load as the pages; the ratios are page p95 / /healthz p95 of this run (goal <= 3x);
- alone: each URL by itself under 16 clients, for what one page costs when nothing else is asked for.

Before serving, each page's CPU time per request is measured in this process (Django's test client, 20
requests after a warm-up, `time.process_time`), once with its cached parts (calculet.pagecache) and once
rendered afresh (the cache emptied before each request): on a shared machine it moves far less with the load
than requests per second do. With --writes-per-second N a thread commits N writes a second during the load
(a target's heartbeat, as a live worker writes), so the cached parts are rendered afresh after each. Prints
the figures; the database is dropped at the end.
"""

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench import web_dataset  # noqa: E402

CLIENTS = 16
PAGES = {"healthz": "/healthz", "dashboard": "/", "question list": "/questions/"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def start_gunicorn(port: int, workers: int, threads: int) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "0", "LOG_LEVEL": "WARNING"}
    env.pop("REDIS_URL", None)
    command = [
        str(ROOT / ".venv" / "bin" / "gunicorn"),
        "calculet.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    for _ in range(300):
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200:
                return server
        except requests.RequestException:
            time.sleep(0.1)
    stop_gunicorn(server)
    raise RuntimeError("gunicorn did not start")


def stop_gunicorn(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def logged_in_session(base: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(
        f"{base}/login/",
        data={"username": "ada", "password": web_dataset.PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/login/"},
        allow_redirects=False,
    )
    if response.status_code != 302:
        raise RuntimeError(f"log in failed: {response.status_code}")
    return session


def load(base: str, cookies, paths: list[str], seconds: float) -> dict[str, list[float]]:
    """CLIENTS threads, each requesting `paths` in turn for `seconds`; milliseconds per path."""
    latencies: dict[str, list[float]] = {path: [] for path in paths}
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    errors = []

    def client(offset: int) -> None:
        session = requests.Session()
        session.cookies.update(cookies)
        index = offset
        mine: dict[str, list[float]] = {path: [] for path in paths}
        while time.perf_counter() < deadline:
            path = paths[index % len(paths)]
            index += 1
            start = time.perf_counter()
            response = session.get(f"{base}{path}")
            elapsed = (time.perf_counter() - start) * 1000
            if response.status_code != 200:
                errors.append(f"{path}: {response.status_code}")
                return
            mine[path].append(elapsed)
        with lock:
            for path, values in mine.items():
                latencies[path].extend(values)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"requests failed: {errors[:3]}")
    return latencies


def cpu_per_request(paths: list[str], *, afresh: bool, repeat: int = 20) -> dict[str, float]:
    """CPU milliseconds one request of each path costs, served in this process to the PM; `afresh` empties
    the cache before each request, so its parts are rendered."""
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="ada"))
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    costs = {}
    for path in paths:
        for _ in range(3):
            client.get(path)
        spent = 0.0
        for _ in range(repeat):
            if afresh:
                cache.clear()
            started = time.process_time()
            if client.get(path).status_code != 200:
                raise RuntimeError(f"{path} did not answer 200")
            spent += time.process_time() - started
        costs[path] = spent / repeat * 1000
    connection.close()
    return costs


def heartbeats(per_second: float, stop: threading.Event) -> int:
    """Commit a target's heartbeat `per_second` times a second until `stop`; how many were written."""
    from acceptance.models import Target

    target = Target.objects.first()
    written = 0
    while not stop.wait(1 / per_second):
        Target.objects.filter(pk=target.pk).update(last_heartbeat_at=timezone.now())
        written += 1
    connection.close()
    return written


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def report(title: str, latencies: dict[str, list[float]], seconds: float) -> None:
    base = p95(latencies[PAGES["healthz"]])
    print(f"{title}")
    print(f"  {'page':<15}{'requests':>9}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'p95 ratio':>11}")
    for name, path in PAGES.items():
        values = latencies[path]
        ratio = p95(values) / base
        print(
            f"  {name:<15}{len(values):>9}{len(values) / seconds:>8.1f}{statistics.median(values):>9.1f}"
            f"{p95(values):>9.1f}{ratio:>10.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time of each measurement")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    parser.add_argument("--writes-per-second", type=float, default=0, help="commits a second during the load")
    args = parser.parse_args()

    settings.DATABASES["default"]["TEST"]["NAME"] = "benchweb_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = None
    try:
        started = time.perf_counter()
        counts = web_dataset.build()
        connection.close()
        print(f"dataset {counts} built in {time.perf_counter() - started:.0f} s")
        for afresh in (False, True):
            costs = cpu_per_request([PAGES["dashboard"], PAGES["question list"]], afresh=afresh)
            print(
                f"CPU per request, in process, {'rendered afresh' if afresh else 'cached parts'}: "
                + ", ".join(f"{path} {ms:.1f} ms" for path, ms in costs.items())
            )
        port = free_port()
        server = start_gunicorn(port, args.workers, args.threads)
        base = f"http://127.0.0.1:{port}"
        cookies = logged_in_session(base).cookies
        print(
            f"gunicorn {args.workers} workers x {args.threads} threads (gthread), {CLIENTS} clients, "
            f"{args.seconds:.0f} s per measurement, PostgreSQL, {os.cpu_count()} CPUs shared with the clients"
        )
        paths = list(PAGES.values())
        load(base, cookies, paths, 3)
        if args.writes_per_second:
            stop = threading.Event()
            writer = ThreadPoolExecutor(max_workers=1)
            written = writer.submit(heartbeats, args.writes_per_second, stop)
        report(
            "mixed: each client cycles through the three URLs", load(base, cookies, paths, args.seconds), args.seconds
        )
        alone = {}
        for path in paths:
            load(base, cookies, [path], 2)
            alone.update(load(base, cookies, [path], args.seconds / 2))
        report("alone: each URL by itself", alone, args.seconds / 2)
        if args.writes_per_second:
            stop.set()
            print(f"heartbeats committed during the load: {written.result()}")
            writer.shutdown()
    finally:
        if server is not None:
            stop_gunicorn(server)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
