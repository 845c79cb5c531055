"""Fixtures for the acceptance tests: a vendor, a PM, a question with its capability, and a complete answer
whose calbin the simulator built."""

import hashlib
import io
import re
import tarfile

import pytest

from acceptance.services import answer_submit
from acceptance.services.targets import target_heartbeat
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_artifact,
    make_capability,
    make_question,
    make_user,
    tar_bytes,
    tiny_calbin_bytes,
    tiny_golden_bytes,
)


@pytest.fixture
def vendor_user(db):
    return make_user("val", "acme", "vendor")


@pytest.fixture
def pm_user(db):
    return make_user("pam", "team", "pm")


@pytest.fixture
def organisation(vendor_user):
    return vendor_user.membership.organisation


@pytest.fixture
def question(organisation):
    return make_question("V18", organisation=organisation, state="asked")


@pytest.fixture
def capability(question):
    """decode-batch-8, proven by V18's package deliverable as the seed links them."""
    capability = make_capability("decode-batch-8", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    return capability


@pytest.fixture
def calbin_bytes(tmp_path_factory):
    return tiny_calbin_bytes(tmp_path_factory.mktemp("calbin"))


@pytest.fixture
def calbin(vendor_user, calbin_bytes):
    return make_artifact(vendor_user, calbin_bytes, kind="calbin", version="1.0.0", file_name="tiny-b8.tar")


@pytest.fixture
def golden(vendor_user, tmp_path_factory):
    golden_bytes = tiny_golden_bytes(tmp_path_factory.mktemp("calbin"))
    return make_artifact(vendor_user, golden_bytes, kind="golden", version="1.0.0", file_name="golden.npz")


@pytest.fixture
def answer(vendor_user, question, capability, calbin, golden):
    return answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=calbin, golden=golden)),
    )


@pytest.fixture
def simulator_online(db, settings):
    """The simulator target with a fresh worker heartbeat, so runs are sent to it, for as long as the test
    takes on a loaded machine (a worker would report again every few seconds; the test reports once)."""
    from acceptance.services import target_ensure_simulator

    settings.ACCEPTANCE_TARGET_OFFLINE_AFTER = 3600
    target = target_ensure_simulator()
    target_heartbeat(queues=[target.queue], worker="test-worker")
    target.refresh_from_db()
    return target


def edit_calbin(data: bytes, file: str, key: str, value: str) -> bytes:
    """The same package with `key: value` set in one of its text files and SHA256SUMS rewritten to match,
    as a toolchain that wrote it so would have (docs/calbin-format.md)."""
    members = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            if member.isfile():
                members[member.name] = archive.extractfile(member).read()
    lines = members[file].decode().splitlines()
    at_key = re.compile(rf"^{re.escape(key)}[:\s]")
    members[file] = "".join(f"{key}: {value}\n" if at_key.match(line) else f"{line}\n" for line in lines).encode()
    members["SHA256SUMS"] = "".join(
        f"{hashlib.sha256(members[name]).hexdigest()}  {name}\n" for name in sorted(members) if name != "SHA256SUMS"
    ).encode()
    return tar_bytes(members)


def vendor_form_calbin(data: bytes, edits: dict[str, dict[str, str]]) -> bytes:
    """The package as the vendor's toolchain writes it: without package_info.txt, param_table.txt, the goldens
    and SHA256SUMS (docs/calbin-format.md, "The vendor's own package"), with `{file: {key: value}}` set."""
    members = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            if member.isfile() and member.name not in SIMULATOR_ONLY and not member.name.startswith("golden/"):
                members[member.name] = archive.extractfile(member).read()
    for file, values in edits.items():
        lines = members[file].decode().splitlines()
        for key, value in values.items():
            at_key = re.compile(rf"^{re.escape(key)}[:\s]")
            lines = [f"{key}: {value}" if at_key.match(line) else line for line in lines]
        members[file] = "".join(f"{line}\n" for line in lines).encode()
    return tar_bytes(members)


SIMULATOR_ONLY = ("package_info.txt", "param_table.txt", "SHA256SUMS")
