import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.factories import db_snapshot, make_artifact, sha256, zero_bomb
from vendor.models import Artifact, Blob
from vendor.services import artifacts

DATA = b"golden tensor bytes " * 1000


def plain_upload(client, data=DATA, **fields):
    body = {
        "kind": "golden",
        "version": "1.0",
        "sha256": sha256(data),
        "file": SimpleUploadedFile("golden.npz", data),
        **fields,
    }
    return client.post("/api/v1/artifacts/", body, format="multipart")


def test_a_small_file_uploads_in_one_request(vendor_a):
    response = plain_upload(vendor_a.client())
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["kind"], body["file_name"], body["size"], body["sha256"], body["state"]) == (
        "golden",
        "golden.npz",
        len(DATA),
        sha256(DATA),
        "verified",
    )
    assert body["download_url"] == f"/api/v1/artifacts/{body['id']}/download/"


def test_a_plain_upload_with_the_wrong_digest_is_rejected(vendor_a):
    response = plain_upload(vendor_a.client(), sha256=sha256(b"other"))
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "field": "sha256",
        "code": "digest_mismatch",
        "message": f"The received bytes have SHA-256 {sha256(DATA)}; {sha256(b'other')} was declared.",
    }
    assert list(Artifact.objects.values_list("state", flat=True)) == ["rejected"]
    assert not Blob.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "firmware"}, "kind"),
        ({"sha256": "xyz"}, "sha256"),
        ({"file_name": "../../etc/passwd"}, "file_name"),
        ({"version": ""}, "version"),
        ({"file": ""}, "file"),
    ],
)
def test_bad_plain_uploads_name_the_field(vendor_a, fields, field):
    before = db_snapshot()
    response = plain_upload(vendor_a.client(), **fields)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert db_snapshot() == before


def test_plain_uploads_are_limited_in_size(vendor_a, settings):
    settings.UPLOAD_PLAIN_MAX_BYTES = 1000
    before = db_snapshot()
    response = plain_upload(vendor_a.client())
    assert response.status_code == 413
    assert db_snapshot() == before


def test_downloads_honour_ranges(vendor_a):
    artifact = make_artifact(vendor_a.user, kind="golden", data=DATA)
    client = vendor_a.client()
    url = f"/api/v1/artifacts/{artifact.pk}/download/"
    whole = client.get(url)
    assert whole.status_code == 200
    assert b"".join(whole.streaming_content) == DATA
    assert whole["Accept-Ranges"] == "bytes"
    assert whole["ETag"] == f'"{sha256(DATA)}"'

    part = client.get(url, HTTP_RANGE="bytes=100-199")
    assert part.status_code == 206
    assert part["Content-Range"] == f"bytes 100-199/{len(DATA)}"
    assert b"".join(part.streaming_content) == DATA[100:200]

    tail = client.get(url, HTTP_RANGE="bytes=-10")
    assert b"".join(tail.streaming_content) == DATA[-10:]
    assert tail["Content-Length"] == "10"

    resume = client.get(url, HTTP_RANGE=f"bytes={len(DATA) - 5}-")
    assert b"".join(resume.streaming_content) == DATA[-5:]

    outside = client.get(url, HTTP_RANGE=f"bytes={len(DATA)}-", HTTP_ACCEPT="application/octet-stream")
    assert outside.status_code == 416
    assert outside["Content-Range"] == f"bytes */{len(DATA)}"
    # An error like any other, even asked as bytes: it used to be an empty text/html body.
    assert outside["Content-Type"] == "application/json"
    assert outside.json()["errors"][0]["field"] == "Range"

    ignored = client.get(url, HTTP_RANGE="lines=1-2")
    assert ignored.status_code == 200


def test_downloads_honour_if_none_match(vendor_a):
    artifact = make_artifact(vendor_a.user, kind="golden", data=DATA)
    client = vendor_a.client()
    url = f"/api/v1/artifacts/{artifact.pk}/download/"
    etag = f'"{sha256(DATA)}"'
    for held in (etag, f'"other", W/{etag}', "*"):
        unchanged = client.get(url, HTTP_IF_NONE_MATCH=held)
        assert (unchanged.status_code, unchanged["ETag"], unchanged.content) == (304, etag, b""), held
    changed = client.get(url, HTTP_IF_NONE_MATCH=f'"{sha256(b"other bytes")}"')
    assert changed.status_code == 200
    assert b"".join(changed.streaming_content) == DATA


@pytest.mark.parametrize("negotiated", [{"format": "bin"}, {"HTTP_ACCEPT": "application/octet-stream"}])
def test_a_download_error_is_served_as_json_whatever_was_negotiated(vendor_a, negotiated):
    query = {"format": negotiated["format"]} if "format" in negotiated else {}
    headers = {key: value for key, value in negotiated.items() if key != "format"}
    response = vendor_a.client().get("/api/v1/artifacts/999999/download/", query, **headers)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"][0]["code"] == "not_found"


@pytest.mark.parametrize("value", ["xml", "BIN", "", "html"])
def test_a_format_no_renderer_has_is_a_400_naming_it_not_a_404(vendor_a, value):
    """`?format=xml` on one's own artifact used to answer DRF's 404 "Not found.", as if the artifact were missing."""
    artifact = make_artifact(vendor_a.user, kind="golden", data=DATA)
    response = vendor_a.client().get(f"/api/v1/artifacts/{artifact.pk}/download/", {"format": value})
    if value == "":  # DRF reads an empty format as none given
        assert response.status_code == 200
        return
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"] == [{"field": "format", "code": "invalid", "message": "One of json, bin."}]


def test_a_format_on_an_operation_that_takes_none_is_an_unknown_parameter(vendor_a):
    for value in ("json", "xml"):
        response = vendor_a.client().get("/api/v1/artifacts/", {"format": value})
        assert response.status_code == 400, value
        assert response.json()["errors"] == [
            {"field": "format", "code": "invalid", "message": "Unknown query parameter."}
        ], value


def test_a_rejected_artifact_has_nothing_to_download(vendor_a):
    plain_upload(vendor_a.client(), sha256=sha256(b"other"))
    rejected = Artifact.objects.get()
    assert vendor_a.client().get(f"/api/v1/artifacts/{rejected.pk}/download/").status_code == 404


def test_artifact_lists_are_scoped_and_filterable(pm, vendor_a, vendor_b, artifacts_a, artifacts_b):
    mine = vendor_a.client().get("/api/v1/artifacts/").json()
    assert {a["organisation"] for a in mine["results"]} == {"acme"}
    assert mine["count"] == 3
    everyone = pm.client().get("/api/v1/artifacts/?kind=golden&ordering=file_name").json()
    assert [a["file_name"] for a in everyone["results"]] == ["bolt-golden.npz", "golden-b8.npz"]


def test_pm_may_download_any_vendors_artifact(pm, artifacts_b):
    response = pm.client().get(f"/api/v1/artifacts/{artifacts_b['golden'].pk}/download/")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"golden-2.0-bolt-golden.npz"


@pytest.mark.parametrize("asked", [{"format": "bin"}, {"HTTP_ACCEPT": "application/octet-stream"}])
def test_a_download_asked_as_bytes_that_fails_answers_json_and_says_so(vendor_a, asked):
    query = {"format": asked["format"]} if "format" in asked else {}
    headers = {key: value for key, value in asked.items() if key != "format"}
    response = vendor_a.client().get("/api/v1/artifacts/999999/download/", query, **headers)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"][0]["code"] == "not_found"


@pytest.fixture
def default_worker(workers):
    """A real Celery worker on the default queue, where archive checks go; killed with its group afterwards."""
    worker = workers.celery("default", "default")
    deadline = time.monotonic() + 60
    while " ready." not in worker.log_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    return worker


def test_a_decompression_bomb_costs_the_request_nothing_and_is_rejected_naming_the_budget(
    vendor_a, default_worker, monkeypatch
):
    # The request (in this process) opens no decompressing stream: the worker's check alone reads the archive.
    opened_here = []
    open_archive = artifacts._archive_open
    monkeypatch.setattr(artifacts, "_archive_open", lambda path: opened_here.append(path) or open_archive(path))
    bomb = zero_bomb("bz2")  # 8 GiB of zeros in about 10 KB
    client = vendor_a.client()
    response = plain_upload(client, bomb, kind="runner_bundle", file_name="runner.tar.bz2", sha256=sha256(bomb))
    assert response.status_code == 201, response.json()
    assert response.json()["state"] in ("verifying", "rejected")  # the worker may already have decided
    assert opened_here == []
    artifact = Artifact.objects.get(pk=response.json()["id"])
    deadline = time.monotonic() + 120
    while artifact.state == Artifact.VERIFYING and time.monotonic() < deadline:
        time.sleep(0.1)
        artifact.refresh_from_db()
    assert artifact.state == Artifact.REJECTED, default_worker.log_text()[-3000:]
    assert "ARCHIVE_MAX_RATIO allows 100 times its" in artifact.rejection_reason
    body = vendor_a.client().get(f"/api/v1/artifacts/{artifact.pk}/").json()
    assert (body["state"], body["rejection_reason"], body["download_url"]) == (
        "rejected",
        artifact.rejection_reason,
        None,
    )
    assert not Blob.objects.exists()
