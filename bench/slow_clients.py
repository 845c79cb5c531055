"""Whether slow clients hold the server: 50 connections sending a body a byte a second and 50 sending their
headers a byte a second, while a 2 GiB tus upload streams in one PATCH, against gunicorn as deployed
(gunicorn.conf.py, 2 workers) over loopback.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/slow_clients.py [--worker-class sync,gthread]

Creates a throw-away database (benchapi_<name>) and a vendor token, starts gunicorn, writes a file of random
bytes under --dir and starts curl uploading it; then opens the slow connections (the slow bodies are
authenticated `POST /api/v1/tokens/` with `Content-Length: 100000`, the slow headers a `GET /healthz` whose
header lines never end) and trickles a byte a second into each. Meanwhile, every 0.25 s, it asks
`GET /healthz` and an authenticated `GET /api/v1/questions/` on new connections (5 s time-out) and records
each answer's time, until the upload has finished and at least --seconds have passed. Prints, per worker
class (the configuration's own first, then each of --worker-class for comparison), how many probes answered,
their median and slowest times, how many took over 1 s, and the upload's throughput. Every process it started
is stopped and the files and database removed; it sends traffic to 127.0.0.1 only.
"""

import argparse
import contextlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import api_upload  # noqa: E402  (sets Django up, as every bench does)
from api_upload import GIB, MIB, ROOT, curl_upload, free_port, start_gunicorn, write_random_file  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from vendor.inputs import member_draft  # noqa: E402
from vendor.services.organisations import api_user_create  # noqa: E402

SLOW_BODIES = 50
SLOW_HEADERS = 50
PROBE_EVERY = 0.25
PROBE_TIMEOUT = 5.0


def slow_connections(port: int, key: str) -> list[socket.socket]:
    """The slow clients, each past its first bytes: a body announced and begun, or headers begun."""
    sockets = []
    body_head = (
        f"POST /api/v1/tokens/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    ).encode()
    for n in range(SLOW_BODIES + SLOW_HEADERS):
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(body_head if n < SLOW_BODIES else b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        sockets.append(client)
    return sockets


def trickle(sockets: list[socket.socket], stop: threading.Event) -> None:
    """A byte a second into every slow connection (a space: still valid JSON whitespace or header value)."""
    while not stop.wait(1.0):
        for client in sockets:
            with contextlib.suppress(OSError):  # the server closed it: it no longer holds anything
                client.send(b" ")


def probe(port: int, key: str, stop: threading.Event, times: dict[str, list[float]]) -> None:
    targets = {
        "/healthz": ("/healthz", {}),
        "GET /api/v1/questions/": ("/api/v1/questions/", {"Authorization": f"Token {key}"}),
    }
    while not stop.wait(PROBE_EVERY):
        for label, (path, headers) in targets.items():
            started = time.perf_counter()
            try:
                ok = requests.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=PROBE_TIMEOUT).ok
            except requests.RequestException:
                ok = False
            times[label].append(time.perf_counter() - started if ok else float("inf"))


def measure(worker_class: str | None, work: Path, source: Path, sha256: str, key: str, seconds: float) -> dict:
    port = free_port()
    server = start_gunicorn(port, work / "storage", *(["--worker-class", worker_class] if worker_class else []))
    stop = threading.Event()
    times: dict[str, list[float]] = {"/healthz": [], "GET /api/v1/questions/": []}
    sockets: list[socket.socket] = []
    try:
        sockets = slow_connections(port, key)
        threads = [
            threading.Thread(target=trickle, args=(sockets, stop), daemon=True),
            threading.Thread(target=probe, args=(port, key, stop, times), daemon=True),
        ]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        upload_seconds = None
        # An upload that did not get through (its creation not answered in 60 s: a held server) shows as failed.
        with contextlib.suppress(subprocess.CalledProcessError, requests.RequestException):
            upload_seconds, _ = curl_upload(port, key, source, sha256, source.stat().st_size)
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        stop.set()
        for thread in threads:
            thread.join(timeout=PROBE_TIMEOUT * 3)
    finally:
        stop.set()
        for client in sockets:
            client.close()
        api_upload.os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    size = source.stat().st_size
    return {
        "worker_class": worker_class or "gunicorn.conf.py (gevent)",
        "upload": size / MIB / upload_seconds if upload_seconds else None,
        "probes": {
            label: {
                "asked": len(values),
                "answered": sum(value != float("inf") for value in values),
                "median": statistics.median(values),
                "max": max(values),
                "over_1s": sum(value > 1.0 for value in values),
            }
            for label, values in times.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=float, default=2, help="the upload's size in GiB")
    parser.add_argument("--seconds", type=float, default=20, help="probe at least this long")
    parser.add_argument("--worker-class", default="", help="comma-separated worker classes to compare with")
    parser.add_argument("--dir", type=Path, default=ROOT / "data" / "bench-slow", help="working directory")
    args = parser.parse_args()

    work = args.dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    settings.DATABASES["default"]["TEST"]["NAME"] = "benchapi_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        _, key = api_user_create(member_draft("bench-vendor", "bench-vendor", "vendor", create_org=True))
        connection.close()
        source = work / "upload.bin"
        sha256 = write_random_file(source, int(args.size * GIB))
        print(
            f"{SLOW_BODIES} slow bodies + {SLOW_HEADERS} slow headers, a byte a second each, during a "
            f"{args.size:g} GiB tus upload (curl, one PATCH); probes every {PROBE_EVERY} s, time-out {PROBE_TIMEOUT} s"
        )
        print(
            f"{'worker class':<28}{'probe':<24}{'answered':>12}{'median s':>10}{'max s':>9}{'> 1 s':>7}"
            f"{'upload MiB/s':>14}"
        )
        for worker_class in [None, *filter(None, args.worker_class.split(","))]:
            row = measure(worker_class, work, source, sha256, key, args.seconds)
            upload = f"{row['upload']:.0f}" if row["upload"] else "failed"
            for label, probes in row["probes"].items():
                print(
                    f"{row['worker_class']:<28}{label:<24}{probes['answered']:>5} of {probes['asked']:<4}"
                    f"{probes['median']:>10.3f}{probes['max']:>9.3f}{probes['over_1s']:>7}{upload:>14}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
