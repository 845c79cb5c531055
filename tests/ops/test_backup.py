import hashlib
import shutil

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction

from acceptance.audit import audit_record, audit_verify
from acceptance.models import AuditEntry
from calculet.backup import artifacts_verify, backup_create, backup_restore, row_counts
from vendor.models import Artifact, Organisation
from vendor.storage import artifact_storage, blob_store_file


def _store_artifact(tmp_path, organisation, payload: bytes) -> Artifact:
    path = tmp_path / "payload.bin"
    path.write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    blob = blob_store_file(path, sha256=digest, size=len(payload))
    return Artifact.objects.create(
        organisation=organisation,
        kind=Artifact.DOCUMENT,
        version="1.0",
        file_name="notes.txt",
        declared_size=len(payload),
        declared_sha256=digest,
        blob=blob,
        state=Artifact.VERIFIED,
        verified_at=blob.created_at,
    )


@pytest.mark.django_db(transaction=True)
def test_backup_wipe_restore_finds_every_row_and_verifies_digests(tmp_path):
    organisation = Organisation.objects.create(slug="acme", name="Acme NPU", kind=Organisation.VENDOR)
    user = get_user_model().objects.create_user("pm1")
    artifact = _store_artifact(tmp_path, organisation, b"golden tensors" * 1000)
    with transaction.atomic():
        audit_record(actor=user, action="artifact.verify", obj=artifact, after={"state": "verified"})
    before = row_counts()
    assert before["vendor.Artifact"] == 1 and before["acceptance.AuditEntry"] == 1

    backup_create(tmp_path / "backup")
    call_command("flush", "--no-input")
    shutil.rmtree(artifact_storage().path(""))
    assert AuditEntry.objects.count() == 0 and Artifact.objects.count() == 0

    problems = backup_restore(tmp_path / "backup")

    assert problems == []
    assert row_counts() == before
    restored = Artifact.objects.get(pk=artifact.pk)
    assert restored.blob.sha256 == artifact.declared_sha256
    assert audit_verify() == []


@pytest.mark.django_db(transaction=True)
def test_restore_reports_an_artifact_whose_bytes_changed(tmp_path):
    organisation = Organisation.objects.create(slug="acme", name="Acme NPU", kind=Organisation.VENDOR)
    artifact = _store_artifact(tmp_path, organisation, b"calbin bytes")
    backup_create(tmp_path / "backup")
    stored = tmp_path / "backup" / "artifacts" / artifact.blob.storage_name
    stored.write_bytes(b"tampered")

    problems = backup_restore(tmp_path / "backup")

    assert len(problems) == 1 and artifact.declared_sha256 in problems[0]
    assert artifacts_verify() == problems
