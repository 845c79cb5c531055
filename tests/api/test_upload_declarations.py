"""What an uploader declares of a file is parsed where it arrives, by the tus header parser and by the artifacts
API's view, into one `ArtifactDeclaration`: a bad one is refused naming its field, and nothing changes."""

import base64
import io

import pytest

from tests.factories import db_snapshot, sha256

DATA = b"golden bytes"
GOOD = {"kind": "golden", "version": "1.0", "filename": "g.npz", "sha256": sha256(DATA)}
FILE_NAME_RULE = "A file name is a plain name of at most 255 characters: no path, no '..', no control characters."


def upload_metadata(values: dict) -> str:
    return ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in values.items())


def tus_create(account, values: dict, length: int = len(DATA)):
    return account.client().post(
        "/api/v1/uploads/",
        HTTP_TUS_RESUMABLE="1.0.0",
        HTTP_UPLOAD_LENGTH=str(length),
        HTTP_UPLOAD_METADATA=upload_metadata(values),
    )


def single_request(account, **fields):
    upload = io.BytesIO(DATA)
    upload.name = "g.npz"
    body = {"kind": "golden", "version": "1.0", "sha256": sha256(DATA), "file": upload, **fields}
    return account.client().post("/api/v1/artifacts/", body, format="multipart")


def without(key: str) -> dict:
    return {name: value for name, value in GOOD.items() if name != key}


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        (without("kind"), "Upload-Metadata.kind", "Upload-Metadata lacks kind."),
        (without("sha256"), "Upload-Metadata.sha256", "Upload-Metadata lacks sha256."),
        ({**GOOD, "version": "-1"}, "Upload-Metadata.version", None),
        ({**GOOD, "filename": " g.npz"}, "Upload-Metadata.filename", FILE_NAME_RULE),
        ({**GOOD, "filename": ""}, "Upload-Metadata.filename", "Give the file name."),
        ({**GOOD, "sha256": "ABC"}, "Upload-Metadata.sha256", "The SHA-256 is 64 lowercase hexadecimal digits."),
    ],
)
def test_a_tus_declaration_lacking_a_key_or_holding_a_bad_value_is_refused_naming_the_key(
    vendor_a, values, field, message
):
    before = db_snapshot()
    response = tus_create(vendor_a, values)
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == field
    assert message is None or error["message"] == message
    assert db_snapshot() == before


def test_a_tus_length_past_the_limit_is_refused_once_the_declaration_holds(vendor_a, settings):
    settings.UPLOAD_MAX_BYTES = len(DATA) - 1
    before = db_snapshot()
    too_long = tus_create(vendor_a, GOOD)
    assert too_long.status_code == 413
    assert too_long.json()["errors"][0]["field"] == "Upload-Length"
    # The declaration is read first, as before the length's limit moved to the header parser.
    assert tus_create(vendor_a, {**GOOD, "kind": "firmware"}).json()["errors"][0]["field"] == "Upload-Metadata.kind"
    assert db_snapshot() == before
    settings.UPLOAD_MAX_BYTES = len(DATA)
    assert tus_create(vendor_a, GOOD).status_code == 201


def test_a_bad_version_or_file_name_in_a_single_request_is_refused_naming_the_field(vendor_a):
    before = db_snapshot()
    version = single_request(vendor_a, version="-1")
    assert (version.status_code, version.json()["errors"][0]["field"]) == (400, "version")
    file_name = single_request(vendor_a, file_name="..")
    assert file_name.json()["errors"] == [{"field": "file_name", "code": "invalid", "message": FILE_NAME_RULE}]
    assert db_snapshot() == before
    assert single_request(vendor_a).status_code == 201


def test_one_who_may_not_upload_is_told_so_whatever_they_declare(pm):
    """The edges parse the declaration, but ask first whether the sender may upload at all, as the service did
    when it parsed: a PM's bad declaration is a 403, not a 400 about its fields."""
    before = db_snapshot()
    for response in (
        tus_create(pm, without("kind")),
        tus_create(pm, {**GOOD, "kind": "firmware"}),
        single_request(pm, version="-1"),
    ):
        assert response.status_code == 403
        assert response.json()["errors"][0]["message"] == "Only a vendor engineer uploads artifacts."
    assert db_snapshot() == before
