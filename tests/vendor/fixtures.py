"""Organisations, users with tokens, questions and artifacts for the vendor and API tests."""

import bz2
import functools
import gzip
import hashlib
import io
import tarfile
import uuid
from dataclasses import dataclass

import pytest
from django.apps import apps
from rest_framework.test import APIClient

from evidence.models import Capability
from vendor.models import Artifact, Deliverable, Question, Section
from vendor.services.artifacts import ARCHIVE_KINDS, artifact_ingest, artifact_metadata_clean, upload_temp_dir
from vendor.services.organisations import api_user_create

SNAPSHOT_MODELS = [
    "vendor.Organisation",
    "vendor.Membership",
    "vendor.Question",
    "vendor.Blob",
    "vendor.Artifact",
    "vendor.Answer",
    "vendor.Answer_executable_assets",
    "vendor.Answer_golden_artifacts",
    "vendor.Upload",
    "vendor.Comment",
    "vendor.Comment_artifacts",
    "vendor.Comment_mentions",
    "vendor.CommentRevision",
    "vendor.NotificationPreference",
    "vendor.NotificationEvent",
    "vendor.Notification",
    "vendor.Webhook",
    "vendor.WebhookDelivery",
    "evidence.Capability",
    "calculet.AuditEntry",
]


def db_snapshot() -> dict:
    """Every row a request could change (token bookkeeping aside), to show that nothing did."""
    rows = {label: list(apps.get_model(label).objects.order_by("pk").values()) for label in SNAPSHOT_MODELS}
    rows["vendor.ApiToken"] = list(
        apps.get_model("vendor.ApiToken").objects.order_by("pk").values("pk", "name", "revoked_at", "expires_at")
    )
    return rows


@dataclass
class Account:
    user: object
    key: str

    def client(self) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.key}")
        return client


def make_account(username: str, organisation: str, role: str) -> Account:
    user, key = api_user_create(username, organisation, role, create_org=True)
    return Account(user, key)


@pytest.fixture
def pm(db):
    return make_account("pat", "team", "pm")


@pytest.fixture
def viewer(pm):
    return make_account("vera", "team", "viewer")


@pytest.fixture
def vendor_a(db):
    return make_account("alice", "acme", "vendor")


@pytest.fixture
def vendor_b(db):
    return make_account("bruno", "bolt", "vendor")


def make_question(code: str, *, organisation=None, state="new", deliverable: str | None = "package") -> Question:
    section, _ = Section.objects.get_or_create(
        code="12.3",
        defaults={
            "position": 3,
            "title": "Batch, concurrency and KV",
            "theme": "performance main line",
            "question_header": "问题",
            "acceptance_header": "需要的答案",
        },
    )
    question = Question.objects.create(
        code=code,
        number=int(code[1:]),
        section=section,
        question=f"Question {code}",
        acceptance="artifacts, golden, capacity and performance",
        organisation=organisation,
        state=state,
    )
    # Every imported question owes at least one deliverable; by default this one owes a model package.
    if deliverable is not None:
        Deliverable.objects.create(question=question, key=deliverable, kind=Deliverable.CALBIN, title="Model package")
    return question


@pytest.fixture
def question_a(vendor_a):
    """V18, asked of vendor A."""
    return make_question("V18", organisation=vendor_a.user.membership.organisation, state="asked")


@pytest.fixture
def question_b(vendor_b):
    """V19, asked of vendor B."""
    return make_question("V19", organisation=vendor_b.user.membership.organisation, state="asked")


@pytest.fixture
def capability(question_a):
    capability = Capability.objects.create(slug="decode-batch-8", title="Decode batch 8", status="C3", position=1)
    capability.questions.add(question_a)
    return capability


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


@functools.cache
def zero_bomb(compression: str, unpacked: int = 8 * 1024**3) -> bytes:
    """A compressed tar holding one member of `unpacked` zero bytes, made in a second: its header, then one
    compressed 64 MiB block of zeros repeated (compressed streams may follow one another). bz2: a few KB."""
    compress = {"bz2": bz2.compress, "gz": gzip.compress}[compression]
    block = 64 * 1024**2
    info = tarfile.TarInfo("zeros")
    info.size = unpacked
    return compress(info.tobuf()) + compress(bytes(block)) * (unpacked // block) + compress(bytes(1024))


def make_artifact(account: Account, *, kind="golden", version="1.0", file_name="golden.npz", data=None) -> Artifact:
    """A verified artifact, ingested the way uploads are."""
    if data is None:
        content = f"{kind}-{version}-{file_name}".encode()
        data = tar_bytes({"manifest.json": content}) if kind in ARCHIVE_KINDS else content
    metadata = artifact_metadata_clean(
        kind=kind, version=version, file_name=file_name, sha256=sha256(data), size=len(data)
    )
    path = upload_temp_dir() / f"fixture-{uuid.uuid4()}"
    path.write_bytes(data)
    return artifact_ingest(actor=account.user, path=path, metadata=metadata)


@pytest.fixture
def artifacts_a(vendor_a):
    """Vendor A's verified calbin, golden tensors and document."""
    return {
        "calbin": make_artifact(vendor_a, kind="calbin", version="0.7.6", file_name="qwen3-b8.calbin"),
        "golden": make_artifact(vendor_a, kind="golden", version="0.7.6", file_name="golden-b8.npz"),
        "document": make_artifact(vendor_a, kind="document", version="1.0", file_name="notes.pdf"),
    }


@pytest.fixture
def artifacts_b(vendor_b):
    return {
        "calbin": make_artifact(vendor_b, kind="calbin", version="2.0", file_name="bolt.calbin"),
        "golden": make_artifact(vendor_b, kind="golden", version="2.0", file_name="bolt-golden.npz"),
    }


def complete_answer(artifacts: dict) -> dict:
    return {
        "summary": "decode batch 8 calbin",
        "version": "0.7.6",
        "executable_assets": [artifacts["calbin"].pk],
        "minimal_example": {"command": "calrt-run --batch 8", "description": "eight lanes"},
        "error_paths": [{"scenario": "KV apply fails", "expect_code": 17}],
        "golden": {"artifacts": [artifacts["golden"].pk], "tolerances": {"atol": 0.02}},
        "compatibility": {"calrt": "0.7.6", "driver": "2.1", "firmware": "1.4", "chip": "calculet-2c"},
    }
