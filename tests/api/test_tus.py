"""The tus endpoint against a live server, with tuspy as the client."""

import base64
import contextlib
import fcntl
import hashlib
import io
import socket
import time
import uuid
from urllib.parse import urlsplit

import pytest
import requests
from tusclient import client as tus
from tusclient.exceptions import TusCommunicationError, TusUploadFailed
from tusclient.uploader import Uploader

from tests.factories import db_snapshot, sha256, tar_bytes
from vendor.models import Artifact, Blob, Upload
from vendor.services import uploads as upload_services

pytestmark = pytest.mark.django_db(transaction=True)

DATA = bytes(range(256)) * 4096  # 1 MiB


class Sha256Uploader(Uploader):
    CHECKSUM_ALGORITHM_PAIR = ("sha256", hashlib.sha256)


def tus_client(live_server, account) -> tus.TusClient:
    return tus.TusClient(f"{live_server.url}/api/v1/uploads/", headers={"Authorization": f"Token {account.key}"})


def metadata(data: bytes, **overrides) -> dict:
    return {"kind": "golden", "version": "1.0", "filename": "golden.npz", "sha256": sha256(data), **overrides}


def uploader(live_server, account, data, *, chunk_size=256 * 1024, url=None, **overrides) -> Sha256Uploader:
    return Sha256Uploader(
        file_stream=io.BytesIO(data),
        client=tus_client(live_server, account),
        url=url,
        chunk_size=chunk_size,
        metadata=metadata(data, **overrides),
        upload_checksum=True,
    )


def headers(account, **extra) -> dict:
    return {"Authorization": f"Token {account.key}", "Tus-Resumable": "1.0.0", **extra}


def test_a_tus_upload_becomes_a_verified_artifact(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload()
    response = requests.get(upload.url, headers=headers(vendor_a), timeout=10)
    assert response.status_code == 200
    body = response.json()
    assert (body["offset"], body["length"], body["artifact_state"]) == (len(DATA), len(DATA), "verified")
    artifact = Artifact.objects.get(pk=body["artifact"])
    assert (artifact.kind, artifact.version, artifact.file_name) == ("golden", "1.0", "golden.npz")
    assert artifact.blob.sha256 == sha256(DATA)
    download = requests.get(f"{live_server.url}/api/v1/artifacts/{artifact.pk}/download/", headers=headers(vendor_a))
    assert download.content == DATA
    assert not list(upload_services.upload_temp_dir().glob("*.part"))


def test_a_chunk_is_never_read_into_memory_by_django(live_server, vendor_a, settings):
    # request.body would refuse anything over DATA_UPLOAD_MAX_MEMORY_SIZE; the chunk streams past it.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    uploader(live_server, vendor_a, DATA, chunk_size=len(DATA)).upload()
    assert Artifact.objects.get().state == Artifact.VERIFIED


def test_the_same_bytes_uploaded_twice_are_one_artifact(live_server, vendor_a):
    first = uploader(live_server, vendor_a, DATA)
    first.upload()
    second = uploader(live_server, vendor_a, DATA)
    second.upload()
    assert first.url != second.url
    artifact = Artifact.objects.get()
    assert sorted(upload.artifact_id for upload in Upload.objects.all()) == [artifact.pk, artifact.pk]
    assert Blob.objects.count() == 1


def test_a_second_writer_is_told_the_upload_is_busy(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=1024)
    path = upload_services.upload_path(Upload.objects.get())
    with open(path, "r+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # as a PATCH in progress holds it
        response = requests.patch(
            upload.url,
            data=DATA[1024:2048],
            headers=headers(vendor_a, **{"Upload-Offset": "1024", "Content-Type": "application/offset+octet-stream"}),
        )
    assert response.status_code == 423
    assert Upload.objects.get().offset == 1024


def test_tuspy_default_sha1_checksums_work_too(live_server, vendor_a):
    upload = tus_client(live_server, vendor_a).uploader(
        file_stream=io.BytesIO(DATA), chunk_size=300_000, metadata=metadata(DATA), upload_checksum=True
    )
    upload.upload()
    assert Artifact.objects.get().state == Artifact.VERIFIED


def cut_patch(url: str, account, offset: int, body: bytes, claimed_length: int) -> None:
    """Send a PATCH that announces `claimed_length` bytes, send only `body`, and hang up."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port)) as connection:
        request = (
            f"PATCH {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Token {account.key}\r\nTus-Resumable: 1.0.0\r\n"
            f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: {offset}\r\n"
            f"Content-Length: {claimed_length}\r\n\r\n"
        )
        connection.sendall(request.encode() + body)
        connection.shutdown(socket.SHUT_WR)


def wait_for_offset(upload_id, at_least: int) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        offset = Upload.objects.get(pk=upload_id).offset
        if offset >= at_least:
            return offset
        time.sleep(0.05)
    raise AssertionError(f"the server never recorded {at_least} bytes")


@pytest.mark.parametrize("state_stored", [True, False], ids=["stored-hash-state", "no-hash-state"])
def test_an_upload_resumes_after_a_cut_connection(live_server, vendor_a, state_stored):
    first = uploader(live_server, vendor_a, DATA)
    first.upload(stop_at=256 * 1024)
    assert first.offset == 256 * 1024
    upload_id = first.url.rstrip("/").rsplit("/", 1)[1]

    # The connection breaks 300000 bytes into a chunk that claimed to hold the rest of the file.
    cut_patch(first.url, vendor_a, first.offset, DATA[first.offset : first.offset + 300_000], len(DATA) - first.offset)
    kept = wait_for_offset(upload_id, first.offset + 300_000)
    assert kept == first.offset + 300_000
    if not state_stored:
        Upload.objects.filter(pk=upload_id).update(hash_state=b"")  # as an upload begun before states were stored

    resumed = uploader(live_server, vendor_a, DATA, url=first.url)  # tuspy asks the server for the offset
    assert resumed.offset == kept
    resumed.upload()
    artifact = Artifact.objects.get()
    assert artifact.state == Artifact.VERIFIED
    assert artifact.blob.sha256 == sha256(DATA)


def test_a_chunk_with_a_wrong_checksum_is_discarded_with_460(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=1024)
    chunk = DATA[1024:2048]
    bad = base64.b64encode(hashlib.sha256(b"not the chunk").digest()).decode()
    response = requests.patch(
        upload.url,
        data=chunk,
        headers=headers(
            vendor_a,
            **{
                "Upload-Offset": "1024",
                "Content-Type": "application/offset+octet-stream",
                "Upload-Checksum": f"sha256 {bad}",
            },
        ),
    )
    assert response.status_code == 460
    assert response.json()["errors"][0]["field"] == "Upload-Checksum"
    assert requests.head(upload.url, headers=headers(vendor_a)).headers["Upload-Offset"] == "1024"


def test_a_replayed_chunk_is_refused_with_409(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=2048)
    response = requests.patch(
        upload.url,
        data=DATA[1024:2048],
        headers=headers(vendor_a, **{"Upload-Offset": "1024", "Content-Type": "application/offset+octet-stream"}),
    )
    assert response.status_code == 409
    assert response.json()["errors"][0]["field"] == "Upload-Offset"
    assert Upload.objects.get().offset == 2048


def test_a_final_digest_mismatch_rejects_the_upload(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA, sha256=sha256(b"something else"))
    with pytest.raises(TusUploadFailed) as error:
        upload.upload()
    assert error.value.status_code == 400
    artifact = Artifact.objects.get()
    assert artifact.state == Artifact.REJECTED
    assert not Blob.objects.exists()
    body = requests.get(upload.url, headers=headers(vendor_a)).json()
    assert (body["artifact_state"], body["artifact"]) == ("rejected", artifact.pk)
    assert "SHA-256" in body["rejection_reason"]
    assert not list(upload_services.upload_temp_dir().glob("*.part"))


def test_an_unsafe_archive_is_rejected_at_the_end(live_server, vendor_a):
    data = tar_bytes({"../escape.sh": b"#!/bin/sh\n"})
    upload = uploader(live_server, vendor_a, data, kind="runner_bundle", filename="runner.tar")
    with pytest.raises(TusUploadFailed):
        upload.upload()
    assert Artifact.objects.get().state == Artifact.REJECTED
    assert not Blob.objects.exists()


@pytest.mark.parametrize(
    ("extra", "status", "field"),
    [
        ({"Upload-Length": "abc"}, 400, "Upload-Length"),
        ({"Upload-Length": "-5"}, 400, "Upload-Length"),
        ({"Upload-Length": str(30 * 1024**3)}, 413, "Upload-Length"),
        ({"Upload-Metadata": "kind"}, 400, "Upload-Metadata.version"),
        ({"Upload-Metadata": "kind Z29sZGVu,kind Z29sZGVu"}, 400, "Upload-Metadata.kind"),
        ({"Upload-Metadata": "kind !!!notbase64"}, 400, "Upload-Metadata.kind"),
        ({"Tus-Resumable": "0.2.2"}, 412, "Tus-Resumable"),
        ({"Upload-Defer-Length": "1"}, 400, "Upload-Defer-Length"),
    ],
)
def test_malformed_creation_headers_name_the_header(live_server, vendor_a, extra, status, field):
    good = {"Upload-Length": str(len(DATA)), "Upload-Metadata": encode(metadata(DATA))}
    before = db_snapshot()
    response = requests.post(f"{live_server.url}/api/v1/uploads/", headers=headers(vendor_a, **{**good, **extra}))
    assert response.status_code == status
    assert response.json()["errors"][0]["field"] == field
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"filename": "../../etc/cron.d/evil"}, "Upload-Metadata.filename"),
        ({"filename": "/abs/path"}, "Upload-Metadata.filename"),
        ({"kind": "firmware"}, "Upload-Metadata.kind"),
        ({"sha256": "ABC"}, "Upload-Metadata.sha256"),
        ({"version": "../1"}, "Upload-Metadata.version"),
    ],
)
def test_bad_metadata_names_the_key(live_server, vendor_a, overrides, field):
    response = requests.post(
        f"{live_server.url}/api/v1/uploads/",
        headers=headers(
            vendor_a, **{"Upload-Length": str(len(DATA)), "Upload-Metadata": encode(metadata(DATA, **overrides))}
        ),
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert not Upload.objects.exists()


def encode(values: dict) -> str:
    return ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in values.items())


def test_patch_header_errors(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=1024)
    chunk_headers = {"Upload-Offset": "1024", "Content-Type": "application/offset+octet-stream"}
    cases = [
        ({**chunk_headers, "Content-Type": "application/json"}, 415, "Content-Type"),
        ({**chunk_headers, "Upload-Offset": "x"}, 400, "Upload-Offset"),
        ({**chunk_headers, "Upload-Offset": "0"}, 409, "Upload-Offset"),
        ({**chunk_headers, "Upload-Checksum": "md5 AAAA"}, 400, "Upload-Checksum"),
        ({**chunk_headers, "Upload-Checksum": "sha256 AAAA"}, 400, "Upload-Checksum"),
    ]
    for extra, status, field in cases:
        response = requests.patch(upload.url, data=DATA[1024:2048], headers=headers(vendor_a, **extra))
        assert (response.status_code, response.json()["errors"][0]["field"]) == (status, field), extra
    past_the_end = requests.patch(upload.url, data=DATA[1024:] + b"extra", headers=headers(vendor_a, **chunk_headers))
    assert (past_the_end.status_code, past_the_end.json()["errors"][0]["field"]) == (400, "Content-Length")
    assert Upload.objects.get().offset == 1024


def test_termination_deletes_the_partial_bytes(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=4096)
    assert len(list(upload_services.upload_temp_dir().glob("*.part"))) == 1
    response = requests.delete(upload.url, headers=headers(vendor_a))
    assert response.status_code == 204
    assert not Upload.objects.exists()
    assert not list(upload_services.upload_temp_dir().glob("*.part"))
    assert requests.head(upload.url, headers=headers(vendor_a)).status_code == 404


def test_an_expired_upload_answers_410_and_is_swept(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=4096)
    creation = requests.head(upload.url, headers=headers(vendor_a))
    assert "Upload-Expires" in creation.headers
    Upload.objects.update(expires_at="2000-01-01T00:00:00Z")
    with pytest.raises((TusUploadFailed, TusCommunicationError)):
        uploader(live_server, vendor_a, DATA, url=upload.url).upload()
    assert requests.head(upload.url, headers=headers(vendor_a)).status_code == 410
    assert upload_services.upload_expire_stale() == 1
    assert not Upload.objects.exists()
    assert not list(upload_services.upload_temp_dir().glob("*.part"))


def test_options_advertises_the_extensions(live_server, vendor_a):
    response = requests.options(f"{live_server.url}/api/v1/uploads/", headers=headers(vendor_a))
    assert response.status_code == 204
    assert response.headers["Tus-Version"] == "1.0.0"
    assert set(response.headers["Tus-Extension"].split(",")) == {"creation", "checksum", "termination", "expiration"}
    assert "sha256" in response.headers["Tus-Checksum-Algorithm"].split(",")


def test_another_vendor_cannot_touch_an_upload(live_server, vendor_a, vendor_b):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=4096)
    before = db_snapshot()
    chunk = {"Upload-Offset": "4096", "Content-Type": "application/offset+octet-stream"}
    assert requests.head(upload.url, headers=headers(vendor_b)).status_code == 404
    assert requests.get(upload.url, headers=headers(vendor_b)).status_code == 404
    assert requests.patch(upload.url, data=DATA[4096:8192], headers=headers(vendor_b, **chunk)).status_code == 404
    assert requests.delete(upload.url, headers=headers(vendor_b)).status_code == 404
    assert db_snapshot() == before


def in_flight(path) -> bool:
    """Whether a PATCH holds the upload's file (as it does from its first byte to its answer)."""
    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


def open_patch(url: str, account, offset: int, claimed_length: int) -> socket.socket:
    parts = urlsplit(url)
    connection = socket.create_connection((parts.hostname, parts.port), timeout=30)
    connection.sendall(
        (
            f"PATCH {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Token {account.key}\r\n"
            f"Tus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\nUpload-Offset: {offset}\r\n"
            f"Content-Length: {claimed_length}\r\nConnection: close\r\n\r\n"
        ).encode()
    )
    return connection


def answer_status(connection: socket.socket) -> int:
    answer = b""
    while b"\r\n" not in answer and (part := connection.recv(65536)):
        answer += part
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("checkpoint_seconds", [0.05, 3600], ids=["seen-at-a-checkpoint", "seen-at-the-end"])
def test_termination_stops_a_patch_in_flight(live_server, vendor_a, monkeypatch, checkpoint_seconds):
    monkeypatch.setattr(upload_services, "CHECKPOINT_SECONDS", checkpoint_seconds)
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=1024)
    path = upload_services.upload_path(Upload.objects.get())
    connection = open_patch(upload.url, vendor_a, 1024, len(DATA) - 1024)
    with connection:
        connection.sendall(DATA[1024:4096])
        deadline = time.monotonic() + 20
        while not in_flight(path):
            assert time.monotonic() < deadline, "the PATCH never started writing"
            time.sleep(0.02)
        assert requests.delete(upload.url, headers=headers(vendor_a), timeout=30).status_code == 204
        # The client goes on sending the rest of the file, a block at a time; the server stops it.
        sent = 4096
        with contextlib.suppress(OSError):  # the server may close while the client still sends
            while sent < len(DATA):
                connection.sendall(DATA[sent : sent + 64 * 1024])
                sent += 64 * 1024
                time.sleep(0.005)
        assert answer_status(connection) == 404
    assert not Upload.objects.exists()
    assert not Artifact.objects.exists() and not Blob.objects.exists()
    assert not path.exists()


def test_x_http_method_override_stands_for_patch_and_delete(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=1024)
    chunk = {"Upload-Offset": "1024", "Content-Type": "application/offset+octet-stream"}
    appended = requests.post(
        upload.url, data=DATA[1024:2048], headers=headers(vendor_a, **chunk, **{"X-HTTP-Method-Override": "PATCH"})
    )
    assert (appended.status_code, appended.headers["Upload-Offset"]) == (204, "2048")
    refused = requests.post(upload.url, headers=headers(vendor_a, **{"X-HTTP-Method-Override": "PUT"}))
    assert (refused.status_code, refused.json()["errors"][0]["field"]) == (400, "X-HTTP-Method-Override")
    deleted = requests.post(upload.url, headers=headers(vendor_a, **{"X-HTTP-Method-Override": "DELETE"}))
    assert deleted.status_code == 204
    assert not Upload.objects.exists()


def test_options_needs_no_token(live_server):
    for url in (f"{live_server.url}/api/v1/uploads/", f"{live_server.url}/api/v1/uploads/{uuid.uuid4()}/"):
        response = requests.options(url)
        assert response.status_code == 204, url
        assert response.headers["Tus-Version"] == "1.0.0"
        assert "termination" in response.headers["Tus-Extension"].split(",")
    assert requests.head(f"{live_server.url}/api/v1/uploads/{uuid.uuid4()}/").status_code == 401


def test_cors_answers_only_configured_origins(live_server, vendor_a, settings):
    settings.CORS_ALLOWED_ORIGINS = ["https://uploads.example.org"]
    url = f"{live_server.url}/api/v1/uploads/"
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,tus-resumable,upload-length,upload-metadata",
    }
    allowed = requests.options(url, headers={"Origin": "https://uploads.example.org", **preflight})
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://uploads.example.org"
    assert {"tus-resumable", "upload-length", "upload-metadata"} <= set(
        allowed.headers["Access-Control-Allow-Headers"].split(", ")
    )
    created = requests.post(
        url,
        headers=headers(
            vendor_a,
            Origin="https://uploads.example.org",
            **{"Upload-Length": str(len(DATA)), "Upload-Metadata": encode(metadata(DATA))},
        ),
    )
    assert created.status_code == 201
    exposed = set(created.headers["Access-Control-Expose-Headers"].split(", "))
    assert {"Location", "Upload-Offset", "Tus-Resumable"} <= exposed
    elsewhere = requests.options(url, headers={"Origin": "https://elsewhere.example", **preflight})
    assert "Access-Control-Allow-Origin" not in elsewhere.headers


def test_refusals_of_method_length_and_header_size_are_in_the_api_error_format(live_server, vendor_a):
    upload = uploader(live_server, vendor_a, DATA)
    upload.upload(stop_at=1024)
    for response in (
        requests.post(upload.url, headers={"Authorization": f"Token {vendor_a.key}"}),
        requests.put(upload.url, headers=headers(vendor_a)),
    ):
        assert response.status_code == 405
        assert response.json()["errors"][0]["code"] == "method_not_allowed"
    chunked = requests.patch(
        upload.url,
        data=iter([DATA[1024:2048]]),  # a generator: requests sends it chunked, with no Content-Length
        headers=headers(vendor_a, **{"Upload-Offset": "1024", "Content-Type": "application/offset+octet-stream"}),
    )
    assert (chunked.status_code, chunked.json()["errors"][0]["field"]) == (411, "Content-Length")
    huge = {"Upload-Length": str(len(DATA)), "Upload-Metadata": encode(metadata(DATA, filename="f" * 6000))}
    too_large = requests.post(f"{live_server.url}/api/v1/uploads/", headers=headers(vendor_a, **huge))
    assert too_large.status_code == 431
    assert too_large.json()["errors"][0] == {
        "field": "Upload-Metadata",
        "code": "header_too_large",
        "message": "Upload-Metadata holds at most 4096 bytes.",
    }
    assert Upload.objects.get().offset == 1024
