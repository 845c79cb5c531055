"""Resumable uploads through the service, across processes as across gunicorn workers."""

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.acceptance.workers import ROOT, worker_env
from tests.factories import sha256
from vendor.inputs import ArtifactDeclaration
from vendor.models import Artifact, Upload
from vendor.services import uploads as upload_services
from vendor.services.uploads import upload_append, upload_create

pytestmark = pytest.mark.django_db(transaction=True)

MIB = 1024 * 1024
DATA = os.urandom(10 * MIB)

# Appends one chunk in a process of its own, as a PATCH landing on another web worker does, and prints how many
# bytes the append read through read(2) and friends (/proc/self/io `rchar`, page cache included).
APPEND_IN_A_NEW_PROCESS = """
import io, json, sys
import django

django.setup()
from vendor.models import Upload
from vendor.services.uploads import upload_append

chunk = open(sys.argv[3], "rb").read()
upload = Upload.objects.get(pk=sys.argv[1])


def rchar():
    return next(int(line.split()[1]) for line in open("/proc/self/io") if line.startswith("rchar:"))


before = rchar()
upload = upload_append(
    actor=upload.user, upload=upload, offset=int(sys.argv[2]), stream=io.BytesIO(chunk), content_length=len(chunk)
)
read = rchar() - before
print(json.dumps({"offset": upload.offset, "read": read}))
"""


def test_a_chunk_in_another_process_continues_the_hash_without_reading_the_stored_bytes(vendor_a, tmp_path):
    upload = upload_create(
        actor=vendor_a.user,
        length=len(DATA),
        declaration=ArtifactDeclaration(kind="golden", version="1.0", file_name="golden.npz", sha256=sha256(DATA)),
    )
    upload = upload_append(
        actor=vendor_a.user, upload=upload, offset=0, stream=io.BytesIO(DATA[: 8 * MIB]), content_length=8 * MIB
    )
    chunk = tmp_path / "chunk"
    chunk.write_bytes(DATA[8 * MIB : 9 * MIB])
    script = tmp_path / "append.py"
    script.write_text(APPEND_IN_A_NEW_PROCESS)
    env = {**worker_env(), "DJANGO_SETTINGS_MODULE": "calculet.settings", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(script), str(upload.pk), str(8 * MIB), str(chunk)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    appended = json.loads(result.stdout.strip().splitlines()[-1])
    assert appended["offset"] == 9 * MIB
    # The 8 MiB stored before were not read again (a re-hash would read all of them).
    assert appended["read"] < MIB

    upload.refresh_from_db()
    upload = upload_append(
        actor=vendor_a.user, upload=upload, offset=9 * MIB, stream=io.BytesIO(DATA[9 * MIB :]), content_length=MIB
    )
    artifact = Artifact.objects.get(pk=upload.artifact_id)
    assert artifact.state == Artifact.VERIFIED
    assert artifact.blob.sha256 == sha256(DATA)


def test_an_upload_without_a_stored_hash_state_hashes_its_stored_bytes_once(vendor_a):
    upload = upload_create(
        actor=vendor_a.user,
        length=len(DATA),
        declaration=ArtifactDeclaration(kind="golden", version="1.0", file_name="golden.npz", sha256=sha256(DATA)),
    )
    upload_append(actor=vendor_a.user, upload=upload, offset=0, stream=io.BytesIO(DATA[:MIB]), content_length=MIB)
    Upload.objects.filter(pk=upload.pk).update(hash_state=b"")  # begun before hash states were stored
    upload.refresh_from_db()
    upload = upload_append(
        actor=vendor_a.user, upload=upload, offset=MIB, stream=io.BytesIO(DATA[MIB:]), content_length=len(DATA) - MIB
    )
    assert Artifact.objects.get(pk=upload.artifact_id).state == Artifact.VERIFIED


def test_a_byte_checkpoint_flushes_while_the_next_bytes_arrive_and_records_only_what_is_durable(vendor_a, monkeypatch):
    """Every CHECKPOINT_BYTES the fsync runs in another thread while the PATCH reads on; the offset it makes
    durable is stored once it has completed, never before. A fsync in the request's thread would wait here for a
    read that cannot come meanwhile, and the test would fail."""
    monkeypatch.setattr(upload_services, "CHECKPOINT_BYTES", 2 * MIB)
    upload = upload_create(
        actor=vendor_a.user,
        length=len(DATA),
        declaration=ArtifactDeclaration(kind="golden", version="1.0", file_name="golden.npz", sha256=sha256(DATA)),
    )
    real_fsync, main = os.fsync, threading.current_thread()
    flushes = []  # (bytes the file held when the fsync began, whether the PATCH read past them meanwhile)
    durable = [0]  # file sizes whose fsync has completed
    recorded_ahead = []  # offsets seen stored before an fsync had covered them

    class Body(io.BytesIO):
        def read(self, size=-1):
            offset = Upload.objects.get(pk=upload.pk).offset
            if offset > max(durable):
                recorded_ahead.append((offset, max(durable)))
            return super().read(size)

    body = Body(DATA)

    def fsync(fd):
        if threading.current_thread() is main:  # the fsync that ends the PATCH
            return real_fsync(fd)
        covered = os.fstat(fd).st_size
        deadline = time.monotonic() + 10
        while body.tell() <= covered and time.monotonic() < deadline:
            time.sleep(0.001)
        real_fsync(fd)
        durable.append(covered)
        flushes.append((covered, body.tell() > covered))

    monkeypatch.setattr(upload_services.os, "fsync", fsync)
    upload = upload_append(actor=vendor_a.user, upload=upload, offset=0, stream=body, content_length=len(DATA))
    assert len(flushes) == 4  # at 2, 4, 6 and 8 MiB; the last bytes are flushed by the PATCH's end
    assert all(overlapped for _, overlapped in flushes), flushes
    assert recorded_ahead == []
    assert Artifact.objects.get(pk=upload.artifact_id).state == Artifact.VERIFIED


@pytest.fixture
def gunicorn_worker(gunicorn_server):
    """calculet.wsgi served by one gunicorn worker, as deployed (gunicorn.conf.py), on the test database."""
    with gunicorn_server(workers=1) as (url, (worker,)):
        yield url, worker


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def test_a_chunk_passes_through_the_web_worker_without_faulting_in_fresh_memory(vendor_a, gunicorn_worker):
    # gunicorn copies a body through several megabyte buffers; served by fresh mmaps, each copy faulted a page in
    # every 4 KiB (over 100,000 faults for this chunk), costing more than the copying itself.
    url, worker = gunicorn_worker
    data = os.urandom(128 * MIB)
    upload = upload_create(
        actor=vendor_a.user,
        length=len(data),
        declaration=ArtifactDeclaration(kind="golden", version="1.0", file_name="golden.npz", sha256=sha256(data)),
    )
    before = minor_faults(worker)
    response = requests.patch(
        f"{url}/api/v1/uploads/{upload.pk}/",
        data=data,
        headers={
            "Authorization": f"Token {vendor_a.key}",
            "Tus-Resumable": "1.0.0",
            "Upload-Offset": "0",
            "Content-Type": "application/offset+octet-stream",
        },
        timeout=300,
    )
    assert response.status_code == 204, response.text
    assert minor_faults(worker) - before < len(data) // 4096 // 8
    assert Artifact.objects.get(pk=Upload.objects.get(pk=upload.pk).artifact_id).state == Artifact.VERIFIED


def test_a_worker_killed_mid_chunk_keeps_what_it_had_recorded_and_the_upload_resumes(vendor_a, gunicorn_worker):
    """As tusd does: the bytes a PATCH had received before the server was cut are kept, HEAD reports them."""
    url, worker = gunicorn_worker
    data = os.urandom(8 * MIB)
    upload = upload_create(
        actor=vendor_a.user,
        length=len(data),
        declaration=ArtifactDeclaration(kind="golden", version="1.0", file_name="golden.npz", sha256=sha256(data)),
    )
    tus = {"Authorization": f"Token {vendor_a.key}", "Tus-Resumable": "1.0.0"}
    head = f"PATCH /api/v1/uploads/{upload.pk}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in tus.items()
    )
    head += f"Upload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: {len(data)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as connection:
        connection.sendall(head.encode() + data[: 3 * MIB])
        # A checkpoint is due CHECKPOINT_SECONDS (2 s) in: the first block (1 MiB) read after that records it.
        time.sleep(upload_services.CHECKPOINT_SECONDS + 0.5)
        connection.sendall(data[3 * MIB : 4 * MIB])
        deadline = time.monotonic() + 60
        while Upload.objects.get(pk=upload.pk).offset < 4 * MIB:
            assert time.monotonic() < deadline, "the PATCH never recorded a checkpoint"
            time.sleep(0.1)
        connection.sendall(data[4 * MIB : 4 * MIB + 1000])  # received, never recorded: lost with the worker
        os.kill(worker, signal.SIGKILL)  # as a time-out or an out-of-memory kill would
    kept = Upload.objects.get(pk=upload.pk).offset
    assert kept == 4 * MIB
    # gunicorn starts a new worker; HEAD there reports what was kept, and the upload resumes from it.
    deadline = time.monotonic() + 60
    while True:
        try:
            offset = requests.head(f"{url}/api/v1/uploads/{upload.pk}/", headers=tus, timeout=5).headers[
                "Upload-Offset"
            ]
            break
        except requests.RequestException:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert int(offset) == kept
    resumed = requests.patch(
        f"{url}/api/v1/uploads/{upload.pk}/",
        data=data[kept:],
        headers={**tus, "Upload-Offset": str(kept), "Content-Type": "application/offset+octet-stream"},
        timeout=120,
    )
    assert resumed.status_code == 204, resumed.text
    artifact = Artifact.objects.get(pk=Upload.objects.get(pk=upload.pk).artifact_id)
    assert artifact.state == Artifact.VERIFIED and artifact.blob.sha256 == sha256(data)
