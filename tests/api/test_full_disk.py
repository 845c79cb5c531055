"""A full artifact disk, for real: the storage directory is a small tmpfs mounted for the test (root only, as
the tests run here and on CI). Uploads answer 507 in the API's error format and keep nothing partial."""

import base64
import io
import os
import re
import subprocess
from urllib.parse import urlsplit

import pytest
import requests
from django.core.files.uploadedfile import SimpleUploadedFile

from calculet.errors import StorageFullError
from calculet.health import FAILED
from tests.factories import db_snapshot, sha256
from vendor.inputs import ArtifactDeclaration
from vendor.models import Artifact, Upload
from vendor.services import uploads as upload_services

pytestmark = pytest.mark.django_db(transaction=True)

MIB = 1024 * 1024
DATA = os.urandom(24 * MIB)


@pytest.fixture
def small_disk(tmp_path):
    """tmp_path/storage (where this test's artifacts and uploads go) on an 8 MiB tmpfs."""
    root = tmp_path / "storage"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "calculet-test-full", str(root)], check=True)
    yield root
    subprocess.run(["umount", "--lazy", str(root)], check=True)


def grow(disk, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)


def tus_headers(account, **extra) -> dict:
    return {"Authorization": f"Token {account.key}", "Tus-Resumable": "1.0.0", **extra}


def patch(url: str, account, offset: int, body: bytes) -> requests.Response:
    headers = tus_headers(account, **{"Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"})
    return requests.patch(url, data=body, headers=headers, timeout=60)


@pytest.fixture
def served(small_disk, gunicorn_server):
    """gunicorn as deployed, writing to the small disk: it, not Django's test server (which reads what a view
    left of a body), decides whether a client still sending hears the answer."""
    with gunicorn_server() as (url, _):
        yield url


def test_a_tus_chunk_on_a_full_disk_is_a_507_to_a_client_still_sending_and_the_upload_resumes(
    served, vendor_a, small_disk
):
    metadata = ",".join(
        f"{key} {base64.b64encode(value.encode()).decode()}"
        for key, value in {"kind": "golden", "version": "1.0", "filename": "g.npz", "sha256": sha256(DATA)}.items()
    )
    created = requests.post(
        f"{served}/api/v1/uploads/",
        headers=tus_headers(vendor_a, **{"Upload-Length": str(len(DATA)), "Upload-Metadata": metadata}),
        timeout=60,
    )
    url = f"{served}{urlsplit(created.headers['Location']).path}"
    assert patch(url, vendor_a, 0, DATA[: 5 * MIB]).status_code == 204

    # The disk fills about 3 MiB into a 19 MiB chunk: the server reads the rest of it, so the client, which sends
    # the whole body before it reads the answer, hears the 507 rather than a broken pipe.
    full = patch(url, vendor_a, 5 * MIB, DATA[5 * MIB :])
    assert full.status_code == 507
    assert full.json() == {
        "errors": [
            {
                "field": None,
                "code": "insufficient_storage",
                "message": f"The artifact store is full; nothing of this chunk was kept. Resume at Upload-Offset "
                f"{5 * MIB} later.",
            }
        ]
    }
    upload = Upload.objects.get()
    assert upload.offset == 5 * MIB
    assert upload_services.upload_path(upload).stat().st_size == 5 * MIB  # cut back: the space is free again
    assert requests.head(url, headers=tus_headers(vendor_a), timeout=60).headers["Upload-Offset"] == str(5 * MIB)

    grow(small_disk, "32m")  # the operator makes room; the client resumes where the server says
    assert patch(url, vendor_a, 5 * MIB, DATA[5 * MIB :]).status_code == 204
    artifact = Artifact.objects.get()
    assert artifact.state == Artifact.VERIFIED and artifact.blob.sha256 == sha256(DATA)


@pytest.mark.parametrize("spooled_on", ["the full disk", "another disk"])
def test_a_plain_upload_on_a_full_disk_is_a_507_and_changes_nothing(
    vendor_a, small_disk, settings, tmp_path, spooled_on
):
    # Django spools the multipart file (over 2.5 MiB) before the view runs: where FILE_UPLOAD_TEMP_DIR says.
    spool = small_disk / "uploads" if spooled_on == "the full disk" else tmp_path / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    settings.FILE_UPLOAD_TEMP_DIR = spool
    data = DATA[: 10 * MIB]
    before = db_snapshot()
    response = vendor_a.client().post(
        "/api/v1/artifacts/",
        {"kind": "golden", "version": "1.0", "sha256": sha256(data), "file": SimpleUploadedFile("golden.npz", data)},
        format="multipart",
    )
    assert response.status_code == 507
    message = "The artifact store is full; nothing of the file was kept."
    assert response.json()["errors"] == [{"field": None, "code": "insufficient_storage", "message": message}]
    assert db_snapshot() == before
    assert [path for path in small_disk.rglob("*") if path.is_file()] == []


def test_readyz_reports_storage_below_the_free_space_threshold(client, settings, small_disk, caplog):
    settings.STORAGE_MIN_FREE_BYTES = 4 * MIB
    settings.FILE_UPLOAD_TEMP_DIR = small_disk
    assert client.get("/readyz").json()["checks"]["storage"] == "ok"
    (small_disk / "filler").write_bytes(bytes(5 * MIB))
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["storage"] == FAILED["storage"]
    assert str(small_disk) not in response.content.decode()
    detail = re.search(
        rf"(\d+) bytes free under {re.escape(str(small_disk))}, below STORAGE_MIN_FREE_BYTES", caplog.text
    )
    assert detail is not None, caplog.text
    assert int(detail[1]) < 4 * MIB


def test_readyz_fails_when_plain_uploads_are_spooled_on_another_volume(client, settings, small_disk, caplog):
    """The wrong setup: the uploads on their volume (here the small disk), the spool on another (the system's,
    like /tmp). Each has free space and is writable; the spool is still in the wrong place."""
    settings.STORAGE_MIN_FREE_BYTES = MIB
    settings.FILE_UPLOAD_TEMP_DIR = small_disk
    assert client.get("/readyz").json()["checks"]["storage"] == "ok"
    elsewhere = small_disk.parent / "spool"
    elsewhere.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = elsewhere
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["storage"] == FAILED["storage"]
    assert f"FILE_UPLOAD_TEMP_DIR {elsewhere} is not on the volume of UPLOAD_TEMP_DIR" in caplog.text


def test_on_a_full_disk_the_rest_of_the_chunk_is_read_before_the_answer(vendor_a, small_disk):
    """Whatever the server in front does with a body the application left unread, the client still sending
    is read to the end of its chunk, so it hears the 507 instead of a reset connection."""
    upload = upload_services.upload_create(
        actor=vendor_a.user,
        length=len(DATA),
        declaration=ArtifactDeclaration(kind="golden", version="1.0", file_name="g.npz", sha256=sha256(DATA)),
    )
    body = io.BytesIO(DATA)
    with pytest.raises(StorageFullError):
        upload_services.upload_append(
            actor=vendor_a.user, upload=upload, offset=0, stream=body, content_length=len(DATA)
        )
    assert body.tell() == len(DATA)
    assert upload_services.upload_path(upload).stat().st_size == Upload.objects.get().offset == 0
