"""Throughput and server memory of a tus upload through gunicorn over loopback.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/api_upload.py [--sizes 1,2] [--dir PATH]

Creates a throw-away database (benchapi_<name>) and, for each size (GiB), a file of random bytes under
--dir (default ./data/bench-upload, on the disk the artifacts go to). In the same run it measures:

- openssl dgst -sha256 on the file: what hashing the bytes costs;
- dd if=/dev/zero bs=1M conv=fsync of the same size: what writing them durably costs;
- the upload: a tus POST, then one PATCH streaming the whole file (what tuspy does by default) to gunicorn
  as docs/deploy.md runs it (sync workers), until its 204: the bytes are on disk (fsync), their SHA-256
  checked against the declared one, and stored content-addressed.

ratio = upload throughput / the slower of openssl and dd (goal >= 0.8). The worker's peak RSS growth
during the upload comes from /proc (peak reset through clear_refs before the PATCH; goal <= 64 MiB, and no
more for the largest size than for the smallest). Prints the figures; files and database are removed.
"""

import argparse
import hashlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from base64 import b64encode
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from vendor.services.organisations import api_user_create  # noqa: E402

MIB = 1024 * 1024
GIB = 1024 * MIB
BLOCK = 4 * MIB


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def start_gunicorn(port: int, storage_root: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "STORAGE_ROOT": str(storage_root),
        "UPLOAD_MAX_BYTES": str(64 * GIB),
        "API_THROTTLE_RATE": "100000/min",
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    command = [
        str(ROOT / ".venv" / "bin" / "gunicorn"),
        "calculet.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "1",
        "--timeout",
        "3600",
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return server
        except requests.RequestException:
            time.sleep(0.2)
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)
    raise RuntimeError("gunicorn did not start")


def worker_pid(server: subprocess.Popen) -> int:
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"expected one gunicorn worker, found {children}")
    return int(children[0])


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing for {pid}")


def write_random_file(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            block = os.urandom(min(BLOCK, size - written))
            digest.update(block)
            handle.write(block)
            written += len(block)
    return digest.hexdigest()


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def upload(port: int, key: str, path: Path, size: int, sha256: str) -> str:
    metadata = {"kind": "golden", "version": f"{size}.{int(time.time())}", "filename": path.name, "sha256": sha256}
    encoded = ",".join(f"{name} {b64encode(value.encode()).decode()}" for name, value in metadata.items())
    auth = {"Authorization": f"Token {key}", "Tus-Resumable": "1.0.0"}
    created = requests.post(
        f"http://127.0.0.1:{port}/api/v1/uploads/",
        headers={**auth, "Upload-Length": str(size), "Upload-Metadata": encoded},
        timeout=60,
    )
    if created.status_code != 201:
        raise RuntimeError(f"creation failed: {created.status_code} {created.text}")
    return created.headers["Location"]


def patch_whole_file(port: int, key: str, location: str, path: Path, size: int) -> float:
    """One PATCH carrying the whole file, streamed from disk in 1 MiB writes; seconds until the 204."""
    connection_ = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    started = time.perf_counter()
    connection_.putrequest("PATCH", location.split(f":{port}", 1)[1])
    for name, value in {
        "Authorization": f"Token {key}",
        "Tus-Resumable": "1.0.0",
        "Upload-Offset": "0",
        "Content-Type": "application/offset+octet-stream",
        "Content-Length": str(size),
    }.items():
        connection_.putheader(name, value)
    connection_.endheaders()
    with open(path, "rb") as handle:
        while block := handle.read(MIB):
            connection_.send(block)
    response = connection_.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - started
    connection_.close()
    if response.status != 204:
        raise RuntimeError(f"PATCH failed: {response.status} {body[:300]!r}")
    return elapsed


def measure(size_gib: float, work: Path, port: int, key: str, server: subprocess.Popen) -> dict:
    size = int(size_gib * GIB)
    source = work / f"upload-{size_gib:g}GiB.bin"
    sha256 = write_random_file(source, size)
    subprocess.run(["sync"], check=True)
    openssl = timed(["openssl", "dgst", "-sha256", str(source)])
    dd_target = work / "dd.out"
    dd = timed(["dd", "if=/dev/zero", f"of={dd_target}", "bs=1M", f"count={size // MIB}", "conv=fsync"])
    dd_target.unlink()

    location = upload(port, key, source, size, sha256)
    pid = worker_pid(server)
    rss_before = memory_kib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak to the current RSS
    seconds = patch_whole_file(port, key, location, source, size)
    peak = memory_kib(pid, "VmHWM")
    state = requests.get(location, headers={"Authorization": f"Token {key}"}, timeout=60).json()
    if state["artifact_state"] != "verified":
        raise RuntimeError(f"upload not verified: {state}")
    source.unlink()
    rate = lambda s: size / MIB / s  # noqa: E731
    return {
        "size": size_gib,
        "openssl": rate(openssl),
        "dd": rate(dd),
        "upload": rate(seconds),
        "ratio": rate(seconds) / min(rate(openssl), rate(dd)),
        "rss_before": rss_before / 1024,
        "rss_growth": (peak - rss_before) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,2", help="comma-separated sizes in GiB")
    parser.add_argument("--dir", type=Path, default=ROOT / "data" / "bench-upload", help="working directory")
    args = parser.parse_args()
    sizes = [float(value) for value in args.sizes.split(",")]

    work = args.dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    storage_root = work / "storage"
    settings.DATABASES["default"]["TEST"]["NAME"] = "benchapi_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = None
    try:
        _, key = api_user_create("bench-vendor", "bench-vendor", "vendor", create_org=True)
        connection.close()
        port = free_port()
        server = start_gunicorn(port, storage_root)
        print(
            f"gunicorn 1 sync worker over loopback, one PATCH per file, {os.cpu_count()} CPUs shared with the client, "
            f"files under {work}"
        )
        print(
            f"{'size':>8}{'openssl MiB/s':>15}{'dd fsync MiB/s':>16}{'upload MiB/s':>14}{'ratio':>8}"
            f"{'RSS before MiB':>16}{'peak growth MiB':>17}"
        )
        for size in sizes:
            row = measure(size, work, port, key, server)
            print(
                f"{row['size']:>5g}GiB{row['openssl']:>15.0f}{row['dd']:>16.0f}{row['upload']:>14.0f}"
                f"{row['ratio']:>7.2f}x{row['rss_before']:>16.1f}{row['rss_growth']:>17.1f}",
                flush=True,
            )
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
