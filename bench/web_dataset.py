"""A generated dataset for the browser pages' benchmark and screenshots.

`build()` imports the checklist, then adds two vendor organisations and their users, questions put to them
in every state, verified artifacts, answers, chains on a simulator and a hardware target with runs at every
stage (golden and soak runs carry metrics in the simulator's format), blocked promotion attempts and audit
rows. Volume rows are written with `bulk_create`: the audit rows carry unique synthetic hashes, so
`verify_audit` does not hold on this dataset. Use it on a throw-away database only.
"""

import datetime
import hashlib
import io
import itertools
import random

import numpy as np
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain, Run, Target
from acceptance.services import capability_promote, target_ensure_simulator
from calculet.models import AuditEntry, AuditHead
from evidence.models import Capability
from npu_sim.golden import compare
from npu_sim.stages import SOAK_CONTEXTS
from npu_sim.timing import TimingModel, context_rows
from vendor.inputs import member_draft
from vendor.models import Answer, Artifact, Blob, Organisation, Question
from vendor.services.organisations import api_user_create

PASSWORD = "calculet-demo-password"
USERS = [
    ("ada", "team", "pm", "Integration team"),
    ("victor", "team", "viewer", "Integration team"),
    ("ann", "acme", "vendor", "Acme NPU"),
    ("bob", "bolt", "vendor", "Bolt Silicon"),
]
KINDS = [kind for kind, _ in Artifact.KINDS]
ACTIVE_STATES = [stages.RUNNING, stages.QUEUED, stages.RUNNING, stages.PENDING]


def _sha(*parts) -> str:
    return hashlib.sha256("/".join(str(part) for part in parts).encode()).hexdigest()


def _users() -> dict:
    users = {}
    for username, organisation, role, name in USERS:
        user, _key = api_user_create(member_draft(username, organisation, role, create_org=True, org_name=name))
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
        users[username] = user
    return users


def _targets() -> list[Target]:
    now = timezone.now()
    simulator = target_ensure_simulator()
    board = Target.objects.create(
        slug="board-1",
        name="Calculet board 1",
        kind=Target.HARDWARE,
        runner_command="calculet-board-runner",
        queue="board-1",
        calrt_version="0.7.6",
        driver_version="2.3.1",
        firmware_version="1.9.0",
        chip="calculet-2c",
    )
    Target.objects.filter(pk=simulator.pk).update(health=Target.OK, last_heartbeat_at=now)
    Target.objects.filter(pk=board.pk).update(
        health=Target.DEGRADED, last_heartbeat_at=now, health_reason="last health check took 3x its usual time"
    )
    return [simulator, board]


def _artifacts(organisations: list[Organisation], count: int, rng: random.Random) -> dict[int, list[Artifact]]:
    now = timezone.now()
    blobs = Blob.objects.bulk_create(
        [
            Blob(sha256=_sha("blob", i), size=rng.randint(10_000, 20 * 1024**3), storage_name=f"bench/{i}")
            for i in range(count)
        ],
        batch_size=1000,
    )
    artifacts = [
        Artifact(
            organisation=organisations[i % len(organisations)],
            kind=KINDS[i % len(KINDS)],
            version=f"0.7.{i // 50}",
            file_name=f"{KINDS[i % len(KINDS)]}-{i}.tar",
            declared_size=blob.size,
            declared_sha256=blob.sha256,
            blob=blob,
            state=Artifact.VERIFIED,
            verified_at=now,
        )
        for i, blob in enumerate(blobs)
    ]
    created = Artifact.objects.bulk_create(artifacts, batch_size=1000)
    by_organisation: dict[int, list[Artifact]] = {}
    for artifact in created:
        by_organisation.setdefault(artifact.organisation_id, []).append(artifact)
    return by_organisation


def _answers(questions, users, artifacts) -> dict[int, Answer]:
    """One complete answer for each question put to a vendor after V10, an incomplete one before it."""
    latest = {}
    for question in questions:
        author = users["ann"] if question.organisation.slug == "acme" else users["bob"]
        own = artifacts[question.organisation_id]
        complete = question.number > 10
        answer = Answer.objects.create(
            question=question,
            organisation=question.organisation,
            revision=1,
            author=author,
            summary=f"Deliverable for {question.code}: see the versioned bundle and its golden.",
            version="0.7.6" if complete else "",
            minimal_example_command="calrt-run --calbin model.calbin --prompt hello" if complete else "",
            error_paths=[{"scenario": "kv_apply_failure", "expect_code": 17}] if complete else [],
            golden_tolerances={"max_abs": 0.05} if complete else {},
            compatibility={"calrt": "0.7.6", "driver": "2.3", "firmware": "1.9", "chip": "calculet-2c"}
            if complete
            else {},
            complete=complete,
            missing=[] if complete else ["version", "minimal_example", "error_path", "golden", "compatibility_range"],
        )
        calbins = [artifact for artifact in own[question.number :: 97] if artifact.kind == Artifact.CALBIN]
        answer.executable_assets.set(calbins[:2])
        if complete:
            answer.golden_artifacts.set([artifact for artifact in own if artifact.kind == "golden"][:1])
        latest[question.pk] = answer
    return latest


def _golden_metrics(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, rows, scale in (("prefill_logits", 1, 2e-3), ("decode_logits", 8, 4e-3)):
        expected = rng.normal(size=(rows, 4096)).astype(np.float32)
        actual = expected + rng.normal(scale=scale, size=expected.shape).astype(np.float32)
        tensors[name] = compare(expected, actual)
    return {"tensors": tensors}


def _soak_metrics(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rate = rng.normal(58, 2, size=32)
    ttft = rng.gamma(4, 25, size=32)

    def percentiles(values):
        p50, p95, p99 = np.percentile(values, [50, 95, 99])
        return {
            "count": len(values),
            "mean": round(float(values.mean()), 3),
            "p50": round(float(p50), 3),
            "p95": round(float(p95), 3),
            "p99": round(float(p99), 3),
        }

    return {
        "requests": 32,
        "concurrency": 1,
        "prompt_tokens": 128,
        "output_tokens": 32,
        "ttft_ms": percentiles(ttft),
        "decode_tokens_per_s": percentiles(rate),
        "timing_scale": "qwen3-30b-a3b",
        # One request at a time: the timing model's per-request rate at batch 1 is what the rates above sit near.
        "context_rows": context_rows(TimingModel(), SOAK_CONTEXTS, 1),
    }


def _runs(chains: list[Chain], total: int, rng: random.Random) -> int:
    """`total` runs: a history of finished runs on older inputs, then each chain's latest run per stage."""
    now = timezone.now()
    positions = {chain.pk: rng.randint(0, len(stages.CHAIN_STAGES)) for chain in chains}
    latest_count = sum(min(positions[chain.pk] + 1, len(stages.CHAIN_STAGES)) for chain in chains)
    history = []
    chain_cycle = itertools.cycle(chains)
    for i in range(max(total - latest_count, 0)):
        chain = next(chain_cycle)
        stage = stages.CHAIN_STAGES[i % (positions[chain.pk] + 1 if positions[chain.pk] < 7 else 7)]
        passed = rng.random() < 0.7
        history.append(
            Run(
                chain=chain,
                stage=stage,
                target=chain.target,
                answer=chain.answer,
                state=stages.PASSED if passed else stages.FAILED,
                verdict=stages.PASS if passed else stages.FAIL,
                attempt=1,
                inputs_digest=_sha("old", chain.pk, stage, i),
                progress=100,
                reason="all checks passed" if passed else "1 check(s) failed — golden:decode_logits: top1 0.97 < 0.99",
                started_at=now - datetime.timedelta(days=30),
                finished_at=now - datetime.timedelta(days=30),
            )
        )
    Run.objects.bulk_create(history, batch_size=2000)
    latest = []
    active_budget = 8
    for chain in chains:
        position = positions[chain.pk]
        for index, stage in enumerate(stages.CHAIN_STAGES[: position + 1]):
            fields = {"state": stages.PASSED, "verdict": stages.PASS, "progress": 100, "reason": "all checks passed"}
            if index == position:
                if active_budget > 0 and rng.random() < 0.5:
                    active_budget -= 1
                    state = ACTIVE_STATES[active_budget % len(ACTIVE_STATES)]
                    progress = rng.randint(5, 95) if state == stages.RUNNING else 0
                    fields = {
                        "state": state,
                        "verdict": "",
                        "progress": progress,
                        "progress_text": f"request {progress // 3} finished" if progress else "",
                        "reason": "",
                        "log_tail": "PROGRESS lines are shown as the bar above\nloading calbin... ok\n",
                    }
                else:
                    fields = {
                        "state": stages.FAILED,
                        "verdict": stages.FAIL,
                        "progress": 100,
                        "reason": "1 check(s) failed — min_decode_tokens_per_s: p50 per-request decode rate 57.9 "
                        "token/s, required 60",
                    }
            metrics = {}
            if stage == stages.GOLDEN and fields["state"] in (stages.PASSED, stages.FAILED):
                metrics = _golden_metrics(chain.pk)
            if stage == stages.SOAK and fields["state"] in (stages.PASSED, stages.FAILED):
                metrics = _soak_metrics(chain.pk)
            latest.append(
                Run(
                    chain=chain,
                    stage=stage,
                    target=chain.target,
                    answer=chain.answer,
                    attempt=1,
                    inputs_digest=chain.stage_digests[stage],
                    metrics=metrics,
                    params={"min_decode_tokens_per_s": 50 if fields["state"] == stages.PASSED else 60}
                    if stage == stages.SOAK
                    else {},
                    started_at=now - datetime.timedelta(minutes=5),
                    finished_at=None if fields["state"] in stages.ACTIVE_STATES else now,
                    **fields,
                )
            )
    Run.objects.bulk_create(latest, batch_size=2000)
    return len(history) + len(latest)


def _audit_rows(count: int, users, questions, rng: random.Random) -> None:
    now = timezone.now()
    actions = ["question.update", "run.create", "answer.submit", "chain.start", "capability.promotion_blocked"]
    rows = []
    previous = "f" * 64
    for i in range(count):
        question = questions[i % len(questions)]
        user = users["ada"] if i % 3 else users["ann"]
        digest = _sha("audit", i)
        rows.append(
            AuditEntry(
                created_at=now - datetime.timedelta(minutes=count - i),
                actor=user,
                actor_label=user.username,
                action=actions[i % len(actions)],
                object_type="vendor.question",
                object_id=str(question.pk),
                object_repr=question.code,
                before={"priority": "p2"},
                after={"priority": rng.choice(["p0", "p1", "p3"])},
                prev_hash=previous,
                hash=digest,
            )
        )
        previous = digest
    AuditEntry.objects.bulk_create(rows, batch_size=5000)
    AuditHead.objects.update_or_create(pk=1, defaults={"last_hash": previous})


def build(*, artifacts: int = 5_000, runs: int = 50_000, audit_rows: int = 100_000, seed: int = 6) -> dict:
    """Fill an empty, migrated database. Returns the counts written."""
    rng = random.Random(seed)
    call_command("import_checklist", stdout=io.StringIO())
    users = _users()
    acme = Organisation.objects.get(slug="acme")
    bolt = Organisation.objects.get(slug="bolt")
    targets = _targets()
    with transaction.atomic():
        now = datetime.date.today()
        for question in Question.objects.all():
            question.organisation = acme if question.number <= 30 else bolt
            question.assignee = users["ada"] if question.number % 3 else users["victor"]
            question.priority = ["p0", "p1", "p2", "p3"][question.number % 4]
            question.due_date = now + datetime.timedelta(days=question.number % 20 - 5)
            question.state = "asked" if question.number <= 10 else "verifying"
            question.save(update_fields=["organisation", "assignee", "priority", "due_date", "state"])
        questions = list(Question.objects.select_related("organisation").order_by("number"))
        by_organisation = _artifacts([acme, bolt], artifacts, rng)
        answers = _answers(questions, users, by_organisation)
        chains = [
            Chain.objects.create(
                question=question,
                capability=question.capabilities.first(),
                answer=answers[question.pk],
                target=target,
                stage_digests={stage: _sha(question.pk, target.pk, stage) for stage in stages.CHAIN_STAGES},
            )
            for question in questions
            if answers[question.pk].complete
            for target in targets
        ]
        run_count = _runs(chains, runs, rng)
        _audit_rows(audit_rows, users, questions, rng)
    for capability in Capability.objects.filter(status__in=["C1", "C2", "C3"]).order_by("position")[:12]:
        capability_promote(actor=users["ada"], capability=capability, request=PromotionRequest(to="C0"))
    return {
        "questions": len(questions),
        "artifacts": Artifact.objects.count(),
        "chains": len(chains),
        "runs": run_count,
        "audit_rows": AuditEntry.objects.count(),
    }
