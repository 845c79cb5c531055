"""Rows the tests build on, made the way the product makes them: users through the organisations service,
artifacts through the upload path's `artifact_ingest`, calbin packages built by the simulator, chains on the
simulator target. Plain functions: call them from a test or from a fixture."""

import bz2
import functools
import gzip
import hashlib
import io
import json
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.apps import apps
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from acceptance import stages
from acceptance.api.answers import AnswerInputSerializer
from acceptance.models import Chain, Run, RunResult
from acceptance.services import answer_submit
from acceptance.services.chains import chain_advance
from acceptance.services.inputs import chain_probes
from acceptance.services.locking import question_lock
from acceptance.services.runs.execute import run_execute
from acceptance.services.targets import target_ensure_simulator
from calculet.actors import SYSTEM
from calculet.db import lock_rows
from evidence.models import Capability, EvidenceItem, EvidenceTable
from evidence.services import evidence_record
from npu_sim.calbin import build_calbin
from vendor.inputs import AnswerDraft, QuestionChanges, artifact_declaration, member_draft
from vendor.models import Artifact, Deliverable, Question, Section
from vendor.services.artifacts import ARCHIVE_KINDS, artifact_ingest, upload_temp_dir
from vendor.services.deliverables import deliverable_accept
from vendor.services.organisations import api_user_create
from vendor.services.questions import question_update

PASSWORD = "a-long-test-password-9"

_CALBIN_CACHE: dict[tuple[str, int, tuple[str, ...]], tuple[bytes, bytes]] = {}


# People


@dataclass
class Account:
    """A user and their API token."""

    user: object
    key: str

    def client(self) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.key}")
        return client


def make_account(username: str, organisation: str, role: str, *, organisation_name: str = "") -> Account:
    """A user with a membership and a token, created the way the command line does (the organisation too when
    it is new), who can also log in to the browser with PASSWORD."""
    user, key = api_user_create(member_draft(username, organisation, role, create_org=True, org_name=organisation_name))
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    return Account(user, key)


def make_user(username: str, organisation: str, role: str, *, organisation_name: str = ""):
    """The user of `make_account`, when the test needs no token."""
    return make_account(username, organisation, role, organisation_name=organisation_name).user


# Questions and capabilities


def make_question(code: str, *, organisation=None, state: str = "new", deliverable: str | None = "package") -> Question:
    """A question of section 12.3; `new` as every question starts, unless the test says otherwise. Every
    imported question owes at least one deliverable: by default this one owes a model package."""
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
    if deliverable is not None:
        Deliverable.objects.create(question=question, key=deliverable, kind=Deliverable.CALBIN, title="Model package")
    return question


def make_deliverable(
    question: Question,
    key: str,
    *,
    kind: str = Deliverable.CALBIN,
    capabilities=(),
    checklist=(),
    schema_of: str = "",
    position: int = 0,
    either: str = "",
    **specific,
) -> Deliverable:
    """A deliverable as the import makes it: owed, linked to the capabilities it proves."""
    if kind == Deliverable.SCHEMA and not schema_of:
        schema_of = "package-metadata"
    deliverable = Deliverable.objects.create(
        question=question,
        key=key,
        kind=kind,
        title=key.replace("-", " "),
        position=position,
        checklist=list(checklist),
        schema_of=schema_of,
        either=either,
        **specific,  # what the question's own check expects: schema_asks, image_commits, sha256_prefix...
    )
    for capability in capabilities:
        capability.deliverables.add(deliverable)
    return deliverable


def put_to(pm, organisation, *codes, ask=False):
    """Put the questions to `organisation`, and ask them when `ask` (an answer then moves them to answered)."""
    for code in codes:
        changes = {"organisation": organisation, **({"state": "asked"} if ask else {})}
        question_update(actor=pm, question=Question.objects.get(code=code), changes=QuestionChanges(**changes))


def make_capability(
    slug: str, *, title: str = "", status: str = "C3", questions=(), pinned_status: str = "", position: int = 0
) -> Capability:
    capability = Capability.objects.create(
        slug=slug,
        title=title or slug.replace("-", " "),
        status=status,
        position=position,
        pinned=bool(pinned_status),
        pinned_status=pinned_status,
    )
    capability.questions.add(*questions)
    return capability


def make_seed_evidence(code: str, *, grade: str, capabilities=()) -> EvidenceItem:
    """An item of the seed's register (no organisation: everyone reads it), in a table of its own letter."""
    table, _ = EvidenceTable.objects.get_or_create(
        prefix=code[0], defaults={"section": 90 + ord(code[0]) % 10, "title": f"table {code[0]}"}
    )
    item = EvidenceItem.objects.create(code=code, table=table, conclusion=f"seed item {code}", grade_text=grade)
    item.grades.create(grade=grade)
    for capability in capabilities:
        capability.evidence.add(item)
    return item


def make_run_evidence(run, *, grade: str, capability) -> EvidenceItem:
    """The evidence a finished runner stage records, through the one writer of it, for the run's organisation."""
    return evidence_record(
        origin=EvidenceItem.RUN,
        grade=grade,
        conclusion=f"{run.stage} passed on {run.target.name}.",
        organisation=run.answer.organisation,
        capabilities=[capability],
        code_prefix=f"RUN-{run.pk}",
        source_text=f"acceptance run {run.pk}, answer {run.answer_id}",
    )


# Bytes


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar_bytes(members: dict[str, bytes], *, modes: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = (modes or {}).get(name, 0o644)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def tiny_package_bytes(
    tmp_dir: Path, *, decode_batch: int = 8, preset: str = "tiny", features: tuple[str, ...] = ()
) -> tuple[bytes, bytes]:
    """A calbin tar built by the simulator and the golden file a vendor delivers with it (cached per process:
    the same options give the same bytes)."""
    key = (preset, decode_batch, tuple(sorted(features)))
    if key not in _CALBIN_CACHE:
        name = f"{preset}-b{decode_batch}-{'-'.join(key[2]) or 'plain'}"
        golden = Path(tmp_dir) / f"{name}-golden.npz"
        path = build_calbin(
            Path(tmp_dir) / f"{name}.tar",
            preset=preset,
            decode_batch=decode_batch,
            features=features,
            golden_out=golden,
        )
        _CALBIN_CACHE[key] = (path.read_bytes(), golden.read_bytes())
    return _CALBIN_CACHE[key]


def tiny_calbin_bytes(tmp_dir: Path, *, decode_batch: int = 8, preset: str = "tiny") -> bytes:
    """A calbin tar built by the simulator (cached per process: the same preset gives the same bytes)."""
    return tiny_package_bytes(tmp_dir, decode_batch=decode_batch, preset=preset)[0]


def tiny_golden_bytes(tmp_dir: Path, *, decode_batch: int = 8, preset: str = "tiny") -> bytes:
    """The golden file the vendor delivers with `tiny_calbin_bytes`' package."""
    return tiny_package_bytes(tmp_dir, decode_batch=decode_batch, preset=preset)[1]


def runner_bundle_bytes(script: str, *, command=("python3", "run.py")) -> bytes:
    """A vendor runner bundle: runner.json naming the command, and the script it runs."""
    manifest = json.dumps({"schema_version": 1, "command": list(command)}).encode()
    return tar_bytes({"runner.json": manifest, "run.py": script.encode()})


@functools.cache
def zero_bomb(compression: str, unpacked: int = 8 * 1024**3) -> bytes:
    """A compressed tar holding one member of `unpacked` zero bytes, made in a second: its header, then one
    compressed 64 MiB block of zeros repeated (compressed streams may follow one another). bz2: a few KB."""
    compress = {"bz2": bz2.compress, "gz": gzip.compress}[compression]
    block = 64 * 1024**2
    info = tarfile.TarInfo("zeros")
    info.size = unpacked
    return compress(info.tobuf()) + compress(bytes(block)) * (unpacked // block) + compress(bytes(1024))


# Artifacts and answers


def make_artifact(
    uploader, data: bytes | None = None, *, kind="golden", version="1.0", file_name="golden.npz"
) -> Artifact:
    """An artifact of the uploader's organisation, ingested as uploads are (`artifact_ingest`): verified, or
    rejected with ArtifactRejectedError as an upload would be. Without `data`, a few bytes (a small tar for the
    archive kinds) that name the artifact."""
    if data is None:
        content = f"{kind}-{version}-{file_name}".encode()
        data = tar_bytes({"manifest.json": content}) if kind in ARCHIVE_KINDS else content
    declaration = artifact_declaration(kind=kind, version=version, file_name=file_name, sha256=sha256(data))
    path = upload_temp_dir() / f"fixture-{uuid.uuid4()}"
    path.write_bytes(data)
    return artifact_ingest(actor=uploader, path=path, declaration=declaration, declared_size=len(data))


def answer_draft(body: dict) -> AnswerDraft:
    """The answer a vendor would post with this API body, parsed as the API parses it."""
    serializer = AnswerInputSerializer(data=body)
    serializer.is_valid(raise_exception=True)
    return serializer.draft()


def complete_answer(artifacts: dict) -> dict:
    """The payload of a complete answer from a dict of artifacts with a `calbin` and a `golden`."""
    return {
        "summary": "decode batch 8 calbin",
        "version": "0.7.6",
        "executable_assets": [artifacts["calbin"].pk],
        "minimal_example": {"command": "calrt-run --batch 8", "description": "eight lanes"},
        "error_paths": [{"scenario": "KV apply fails", "expect_code": 17}],
        "golden": {"artifacts": [artifacts["golden"].pk], "tolerances": {"max_abs": 0.02}},
        "compatibility": {"calrt": "0.7.6", "driver": "2.1", "firmware": "1.4", "chip": "calculet-2c"},
    }


def complete_answer_data(*, capability, calbin, golden, extra_assets=(), **overrides) -> dict:
    """The payload of a complete answer (all six elements of section 13) naming a capability, with the
    thresholds the acceptance chain reads."""
    data = {
        "capability": capability.slug if capability else None,
        "version": "0.7.6",
        "summary": "decode batch 8 on the tiny preset",
        "executable_assets": [calbin.pk, *[a.pk for a in extra_assets]],
        "minimal_example": {"command": "npu-run --batch 8", "description": "decode eight sequences"},
        "error_paths": [{"scenario": "kv_apply_failure", "expect_code": 15}],
        "golden": {"artifacts": [golden.pk], "tolerances": {}},
        "compatibility": {"calrt": ">=0.7.6,<0.8", "driver": ">=2.3,<3", "firmware": ">=1.8,<2", "chip": "calculet-2c"},
        "thresholds": {"soak_requests": 16, "soak_concurrency": 4},
    }
    data.update(overrides)
    return data


# Chains and runs


def make_chain(question: Question, engineer, *, capability=None) -> Chain:
    """A chain on the simulator for the engineer's (incomplete) answer, with no run yet."""
    deliverables = question.deliverables.order_by("position")
    if capability is not None and deliverables.filter(capabilities=capability).exists():
        deliverables = deliverables.filter(capabilities=capability)
    data = {"summary": "see the attached bundle", "deliverable": deliverables.first().key}
    answer = answer_submit(actor=engineer, question=question, draft=answer_draft(data))
    digests = {stage: f"{index:064x}" for index, stage in enumerate(stages.CHAIN_STAGES, start=1)}
    return Chain.objects.create(
        question=question, capability=capability, answer=answer, target=target_ensure_simulator(), stage_digests=digests
    )


def make_run(chain: Chain, stage: str, state: str, **fields) -> Run:
    """A run of `stage` on the chain's current inputs, in `state`, with the verdict a finished run has."""
    verdict = {stages.PASSED: stages.PASS, stages.FAILED: stages.FAIL, stages.ERROR: stages.ERROR}.get(state, "")
    return Run.objects.create(
        chain=chain,
        stage=stage,
        target=chain.target,
        answer=chain.answer,
        state=state,
        verdict=verdict,
        inputs_digest=chain.stage_digests[stage],
        **fields,
    )


def pass_stage(chain: Chain, stage: str, *, device: dict | None = None) -> Run:
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
    run = make_run(
        chain,
        stage,
        stages.PASSED,
        attempt=1,
        progress=100,
        finished_at=timezone.now(),
        probes=probes,
        recipe_version=recipe_version,
        result=result,
    )
    RunResult.objects.create(run=run, attempt=1, verdict=stages.PASS)
    return run


def pass_stages(chain: Chain, upto: str, *, device: dict | None = None) -> list[Run]:
    """Passed runs of every stage of the chain up to `upto`, in order. When that is every stage, the chain is
    advanced as a worker's last verdict advances it: a calbin deliverable it proves is accepted."""
    runs = [
        pass_stage(chain, stage, device=device) for stage in stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(upto) + 1]
    ]
    if upto == stages.CHAIN_STAGES[-1]:
        with transaction.atomic():
            question_lock(chain.question_id)
            chain_advance(lock_rows(Chain.objects).get(pk=chain.pk))
    return runs


def sdk_checked(capability, *, calrt: str = "0.7.6"):
    """E2 evidence for the capability, as a passing SDK check records it: its entry points found in the
    delivered headers and as defined dynamic symbols of the same-version library, and its sdk deliverable
    accepted."""
    question = capability.questions.order_by("pk").first()
    deliverable = Deliverable.objects.create(
        question=question,
        key=f"sdk-{capability.slug}-{calrt.replace('.', '-')}-{question.deliverables.count()}",
        kind=Deliverable.SDK,
        title="SDK",
        position=9,
    )
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
    deliverable_accept(deliverable, actor=SYSTEM, reason="static check passed")
    return item


def drive(chain: Chain, limit: int = 20) -> None:
    """Execute queued runs of the chain in this process, in order, through the service a worker task calls,
    until none is left."""
    for _ in range(limit):
        run = chain.runs.filter(state=stages.QUEUED).order_by("id").first()
        if run is None:
            return
        run_execute(run.pk, worker="in-process")
    raise AssertionError("the chain did not settle")


# Checking that nothing changed

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
