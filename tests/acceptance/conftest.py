"""Fixtures for the acceptance tests: a vendor, a PM, a question with its capability, and a complete answer
whose calbin the simulator built."""

import hashlib
import io
import re
import tarfile

import pytest

from acceptance import stages
from acceptance.models import Run, RunResult
from acceptance.services import answer_submit
from acceptance.services.inputs import chain_probes
from acceptance.services.targets import target_heartbeat
from tests.factories import (
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
    return make_question("V18", organisation=organisation)


@pytest.fixture
def capability(question):
    return make_capability("decode-batch-8", status="C3", questions=[question])


@pytest.fixture
def calbin_bytes(tmp_path_factory):
    return tiny_calbin_bytes(tmp_path_factory.mktemp("calbin"))


@pytest.fixture
def calbin(organisation, vendor_user, calbin_bytes, tmp_path):
    return make_artifact(
        organisation, calbin_bytes, kind="calbin", version="1.0.0", file_name="tiny-b8.tar", tmp_dir=tmp_path
    )


@pytest.fixture
def golden(organisation, tmp_path_factory, tmp_path):
    golden_bytes = tiny_golden_bytes(tmp_path_factory.mktemp("calbin"))
    return make_artifact(
        organisation, golden_bytes, kind="golden", version="1.0.0", file_name="golden.npz", tmp_dir=tmp_path
    )


@pytest.fixture
def answer(vendor_user, question, capability, calbin, golden):
    return answer_submit(
        actor=vendor_user,
        question=question,
        data=complete_answer_data(capability=capability, calbin=calbin, golden=golden),
    )


@pytest.fixture
def simulator_online(db):
    """The simulator target with a fresh worker heartbeat, so runs are sent to it."""
    from acceptance.services import target_ensure_simulator

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


def pass_stage(chain, stage: str, *, device: dict | None = None) -> Run:
    """Record a passed run of `stage` on the chain's current inputs, as a worker would have: a runner stage
    with the capability's recipe probes, each passed, on the device the target is registered as (a hardware
    target's device reports itself as a board unless `device` says otherwise)."""
    probes, recipe_version, result = [], None, {}
    if stage in stages.RUNNER_STAGES:
        probes, recipe_version = chain_probes(chain.capability.slug if chain.capability else None, chain.answer)
        registered = chain.target.as_job_target()
        result = {
            "probes": [{**probe, "verdict": stages.PASS, "findings": []} for probe in probes],
            "device": device
            or {"kind": chain.target.kind, **{key: registered[key] for key in ("calrt", "driver", "firmware", "chip")}},
        }
    run = Run.objects.create(
        chain=chain,
        stage=stage,
        target=chain.target,
        answer=chain.answer,
        state=stages.PASSED,
        verdict=stages.PASS,
        attempt=1,
        inputs_digest=chain.stage_digests[stage],
        progress=100,
        probes=probes,
        recipe_version=recipe_version,
        result=result,
    )
    RunResult.objects.create(run=run, attempt=1, verdict=stages.PASS)
    return run


def pass_stages(chain, upto: str, *, device: dict | None = None) -> list[Run]:
    return [
        pass_stage(chain, stage, device=device) for stage in stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(upto) + 1]
    ]


def sdk_checked(capability, *, calrt: str = "0.7.6"):
    """E2 evidence for the capability, as a passing SDK check records it: its entry points found in the
    delivered headers and as defined dynamic symbols of the same-version library, and its sdk deliverable
    accepted."""
    from evidence.models import EvidenceItem
    from evidence.services import evidence_record
    from vendor.models import Deliverable
    from vendor.services.deliverables import deliverable_accept

    question = capability.questions.order_by("pk").first()
    deliverable = Deliverable.objects.create(
        question=question, key=f"sdk-{capability.slug}-{calrt.replace('.', '-')}-{question.deliverables.count()}",
        kind=Deliverable.SDK, title="SDK", position=9,
    )  # fmt: skip
    capability.deliverables.add(deliverable)
    item = evidence_record(
        origin=EvidenceItem.CHECK,
        grade="E2",
        conclusion=f"SDK entry points of {capability.slug} present in CalRT {calrt}",
        organisation=question.organisation,
        capabilities=[capability],
        versions={"calrt": calrt},
        deliverable=deliverable,
        code_prefix="CHK-SDK",
    )
    deliverable_accept(deliverable, actor="system", reason="static check passed")
    return item


def drive(chain, limit: int = 20) -> None:
    """Execute queued runs of the chain in this process, in order, through the service a worker task calls,
    until none is left."""
    from acceptance.services.runs.execute import run_execute

    for _ in range(limit):
        run = chain.runs.filter(state=stages.QUEUED).order_by("id").first()
        if run is None:
            return
        run_execute(run.pk, worker="in-process")
    raise AssertionError("the chain did not settle")
