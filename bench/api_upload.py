"""Throughput and server memory of tus uploads through gunicorn (gunicorn.conf.py, 2 workers) over loopback.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/api_upload.py [--sizes 2] [--dir PATH] \
        [--worker-class sync]

Creates a throw-away database (benchapi_<name>) and, for each size (GiB), a file of random bytes under
--dir (default ./data/bench-upload, on the disk the artifacts go to). In the same run it measures, on that
same file:

- openssl dgst -sha256: what hashing the bytes costs;
- dd if=<the file> of=<a new file> bs=1M conv=fsync: what writing them durably costs;
- tuspy uploading it in 64 MiB chunks, and in one PATCH (tuspy's default), to gunicorn as deployed with 2
  workers (each chunk is a new connection, so chunks land on both workers), until the last 204: the bytes are on
  disk (fsync), their SHA-256 checked against the declared one, and stored content-addressed;
- the same one PATCH sent by curl, which streams the file: tuspy reads a whole chunk into memory before it
  sends a byte, so its one-PATCH figure also holds the client reading 2 GiB first (its CPU seconds show it).

ratio = upload throughput / the slower of openssl and dd (goal >= 0.8). Each worker's peak RSS growth during
an upload comes from /proc (peak reset through clear_refs before it; goal <= 64 MiB), and how many bytes each
worker wrote from /proc/<pid>/io, to show where the chunks went; the CPU seconds of the client and of the
workers come from os.times and /proc/<pid>/stat. --worker-class repeats everything with gunicorn's other
worker classes, for comparison. Prints the figures; files and database are removed.
"""

import argparse
import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from tusclient import client as tus

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from vendor.inputs import member_draft  # noqa: E402
from vendor.services.organisations import api_user_create  # noqa: E402

MIB = 1024 * 1024
GIB = 1024 * MIB
BLOCK = 4 * MIB
WORKERS = 2
CHUNK = 64 * MIB


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def start_gunicorn(port: int, storage_root: Path, *options: str) -> subprocess.Popen:
    """gunicorn as deployed (gunicorn.conf.py) with WORKERS workers; `options` are more of its flags."""
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
    command = [str(Path(sys.executable).parent / "gunicorn"), "-c", "gunicorn.conf.py", "calculet.wsgi"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", str(WORKERS), "--log-level", "warning", *options]
    server = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 180  # loading the app takes half a minute on a busy machine
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return server
        except requests.RequestException:
            time.sleep(0.2)
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)
    raise RuntimeError("gunicorn did not start")


def worker_pids(server: subprocess.Popen) -> list[int]:
    children = [int(pid) for pid in Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()]
    if len(children) != WORKERS:
        raise RuntimeError(f"expected {WORKERS} gunicorn workers, found {children}")
    return children


def written_bytes(pid: int) -> int:
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/io").read_text().splitlines() if "wchar" in line)


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


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def tus_create(port: int, key: str, path: Path, sha256: str) -> str:
    """The upload's URL, from tus creation by hand (what tuspy's first request does)."""
    metadata = {"kind": "golden", "version": f"{time.time_ns()}", "filename": path.name, "sha256": sha256}
    encoded = ",".join(f"{name} {base64.b64encode(value.encode()).decode()}" for name, value in metadata.items())
    response = requests.post(
        f"http://127.0.0.1:{port}/api/v1/uploads/",
        headers={
            "Authorization": f"Token {key}",
            "Tus-Resumable": "1.0.0",
            "Upload-Length": str(path.stat().st_size),
            "Upload-Metadata": encoded,
        },
        timeout=60,
    )
    response.raise_for_status()
    return response.headers["Location"]


def curl_upload(port: int, key: str, path: Path, sha256: str, chunk_size: int) -> tuple[float, str]:
    """curl streaming the whole file in one PATCH, from creation to the 204; seconds and the upload's URL."""
    started = time.perf_counter()
    url = requests.compat.urljoin(f"http://127.0.0.1:{port}", tus_create(port, key, path, sha256))
    # From standard input with the length given: `--upload-file <path>` would add the file's name to the URL.
    with open(path, "rb") as body:
        subprocess.run(
            [
                "curl", "--silent", "--show-error", "--fail", "--request", "PATCH", "--upload-file", "-",
                "--header", f"Content-Length: {path.stat().st_size}", "--header", f"Authorization: Token {key}",
                "--header", "Tus-Resumable: 1.0.0", "--header", "Upload-Offset: 0",
                "--header", "Content-Type: application/offset+octet-stream", "--header", "Expect:",
                "--header", "Transfer-Encoding:", url,
            ],
            stdin=body,
            check=True,
        )  # fmt: skip
    return time.perf_counter() - started, url


def tus_upload(port: int, key: str, path: Path, sha256: str, chunk_size: int) -> tuple[float, str]:
    """tuspy from creation to the last 204; seconds and the upload's URL."""
    uploader = tus.TusClient(
        f"http://127.0.0.1:{port}/api/v1/uploads/", headers={"Authorization": f"Token {key}"}
    ).uploader(
        str(path),
        chunk_size=chunk_size,
        metadata={"kind": "golden", "version": f"{time.time_ns()}", "filename": path.name, "sha256": sha256},
    )
    started = time.perf_counter()
    uploader.upload()
    return time.perf_counter() - started, uploader.url


def check_verified(url: str, key: str) -> None:
    state = requests.get(url, headers={"Authorization": f"Token {key}"}, timeout=60).json()
    if state["artifact_state"] != "verified":
        raise RuntimeError(f"upload not verified: {state}")


def measure(size_gib: float, work: Path, port: int, key: str, server: subprocess.Popen) -> list[dict]:
    size = int(size_gib * GIB)
    source = work / f"upload-{size_gib:g}GiB.bin"
    sha256 = write_random_file(source, size)
    subprocess.run(["sync"], check=True)
    openssl = timed(["openssl", "dgst", "-sha256", str(source)])
    dd_target = work / "dd.out"
    dd = timed(["dd", f"if={source}", f"of={dd_target}", "bs=1M", "conv=fsync"])
    dd_target.unlink()
    rate = lambda seconds: size / MIB / seconds  # noqa: E731
    floor = min(rate(openssl), rate(dd))
    rows = []
    ways = (
        (f"tuspy {CHUNK // MIB} MiB chunks", tus_upload, CHUNK),
        ("tuspy one PATCH", tus_upload, size),
        ("curl one PATCH", curl_upload, size),
    )
    for label, upload, chunk_size in ways:
        pids = worker_pids(server)
        rss_before = {pid: memory_kib(pid, "VmRSS") for pid in pids}
        written_before = {pid: written_bytes(pid) for pid in pids}
        for pid in pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak to the current RSS
        cpu_before = {pid: cpu_seconds(pid) for pid in pids}
        client_before = os.times()
        seconds, url = upload(port, key, source, sha256, chunk_size)
        client_after = os.times()
        check_verified(url, key)
        rows.append(
            {
                "size": size_gib,
                "how": label,
                "openssl": rate(openssl),
                "dd": rate(dd),
                "upload": rate(seconds),
                "ratio": rate(seconds) / floor,
                "rss_growth": max((memory_kib(pid, "VmHWM") - rss_before[pid]) / 1024 for pid in pids),
                "written": [(written_bytes(pid) - written_before[pid]) / GIB for pid in pids],
                "server_cpu": sum(cpu_seconds(pid) - cpu_before[pid] for pid in pids),
                # The client's own CPU: tuspy runs in this process, curl is a child.
                "client_cpu": sum(client_after[n] - client_before[n] for n in range(4)),
            }
        )
    source.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2", help="comma-separated sizes in GiB")
    parser.add_argument("--dir", type=Path, default=ROOT / "data" / "bench-upload", help="working directory")
    parser.add_argument("--worker-class", default="", help="comma-separated worker classes to compare with")
    args = parser.parse_args()
    sizes = [float(value) for value in args.sizes.split(",")]
    # gunicorn.conf.py's own worker class first, then each one to compare with.
    worker_classes = [None, *filter(None, args.worker_class.split(","))]

    work = args.dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    storage_root = work / "storage"
    settings.DATABASES["default"]["TEST"]["NAME"] = "benchapi_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = None
    try:
        _, key = api_user_create(member_draft("bench-vendor", "bench-vendor", "vendor", create_org=True))
        connection.close()
        for worker_class in worker_classes:
            port = free_port()
            options = ("--worker-class", worker_class) if worker_class else ()
            server = start_gunicorn(port, storage_root, *options)
            print(
                f"gunicorn.conf.py{f' with --worker-class {worker_class}' if worker_class else ''}, {WORKERS} "
                f"workers over loopback, {os.cpu_count()} CPUs shared with the client, files under {work}"
            )
            print(
                f"{'size':>8}  {'how':<22}{'openssl MiB/s':>14}{'dd fsync MiB/s':>16}{'upload MiB/s':>14}{'ratio':>8}"
                f"{'CPU s client/server':>21}{'peak RSS growth MiB':>21}  GiB written by each worker"
            )
            for size in sizes:
                for row in measure(size, work, port, key, server):
                    written = " / ".join(f"{value:.2f}" for value in row["written"])
                    print(
                        f"{row['size']:>5g}GiB  {row['how']:<22}{row['openssl']:>14.0f}{row['dd']:>16.0f}"
                        f"{row['upload']:>14.0f}{row['ratio']:>7.2f}x"
                        f"{row['client_cpu']:>11.1f} / {row['server_cpu']:<7.1f}{row['rss_growth']:>21.1f}  {written}",
                        flush=True,
                    )
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
            server = None
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
