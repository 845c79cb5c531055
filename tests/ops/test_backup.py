import json
import shutil

import pytest
from django.core.management import call_command

from acceptance.models import Run
from calculet.audit import audit_verify
from calculet.backup import artifacts_verify, backup_create, backup_restore, row_counts
from calculet.models import AuditEntry
from tests.factories import make_artifact, make_user
from vendor.models import Answer, Artifact
from vendor.storage import artifact_storage


@pytest.mark.django_db(transaction=True)
def test_backup_wipe_restore_finds_every_row_and_verifies_digests(tmp_path, settings, chain_in_process, checklist):
    settings.DATA_DIR = tmp_path / "data"
    call_command("seed_demo")  # questions, answers, verified artifacts, a whole chain of runs, audit rows
    before = row_counts()
    assert all(before[label] > 0 for label in ["vendor.Answer", "vendor.Artifact", "acceptance.Run"])
    answers = list(Answer.objects.order_by("pk").values_list("pk", "complete", "missing"))
    runs = list(Run.objects.order_by("pk").values_list("pk", "stage", "state", "verdict"))
    last_audit_hash = AuditEntry.objects.order_by("-id").values_list("hash", flat=True).first()

    backup_create(tmp_path / "backup")
    call_command("flush", "--no-input")
    shutil.rmtree(artifact_storage().path(""))
    assert AuditEntry.objects.count() == 0 and Artifact.objects.count() == 0

    problems = backup_restore(tmp_path / "backup")

    assert problems == []  # every artifact's bytes re-hashed against its digest
    assert row_counts() == before
    assert list(Answer.objects.order_by("pk").values_list("pk", "complete", "missing")) == answers
    assert list(Run.objects.order_by("pk").values_list("pk", "stage", "state", "verdict")) == runs
    assert AuditEntry.objects.order_by("-id").values_list("hash", flat=True).first() == last_audit_hash
    assert audit_verify() == []


@pytest.mark.django_db(transaction=True)
def test_restore_reports_an_artifact_whose_bytes_changed(tmp_path):
    engineer = make_user("ann", "acme", "vendor", organisation_name="Acme NPU")
    artifact = make_artifact(engineer, b"calbin bytes", kind=Artifact.DOCUMENT, version="1.0", file_name="notes.txt")
    backup_create(tmp_path / "backup")
    stored = tmp_path / "backup" / "artifacts" / artifact.blob.storage_name
    stored.write_bytes(b"tampered")

    problems = backup_restore(tmp_path / "backup")

    assert len(problems) == 1 and artifact.declared_sha256 in problems[0]
    assert artifacts_verify() == problems


@pytest.mark.django_db(transaction=True)
def test_the_manifest_counts_the_rows_of_the_dump_and_restore_checks_them(tmp_path):
    engineer = make_user("ann", "acme", "vendor", organisation_name="Acme NPU")
    make_artifact(engineer, b"one", kind=Artifact.DOCUMENT, version="1.0", file_name="a.txt")
    manifest = backup_create(tmp_path / "backup")
    assert manifest["counts"]["vendor.Artifact"] == 1
    # A backup whose manifest disagrees with its dump is caught on restore, not trusted.
    manifest_path = tmp_path / "backup" / "manifest.json"
    recorded = json.loads(manifest_path.read_text())
    recorded["counts"]["vendor.Artifact"] = 2
    manifest_path.write_text(json.dumps(recorded))

    problems = backup_restore(tmp_path / "backup")

    assert problems == ["vendor.Artifact: 1 rows restored, the backup recorded 2"]
