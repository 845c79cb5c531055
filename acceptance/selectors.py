"""Reads of chains, runs, targets and promotion attempts, for the pages, the API and the services alike. The
query count of each is independent of how many runs are stored: the newest run of each (chain, stage) is
found by one index probe."""

import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import CharField, Exists, F, Max, OuterRef, Prefetch, Q, QuerySet, Subquery, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Concat
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from acceptance import proof_labels, stages, summaries
from acceptance.models import AnswerClaim, Chain, PromotionAttempt, Run, Target, TargetAgent
from acceptance.policy import AnswerFacts, ChainFacts, GateSubject
from acceptance.protocol import VERSION_KEYS, device_attested
from acceptance.recipes import RECIPES
from calculet import labels, sentences
from evidence.exporter import checklist_export
from evidence.models import Capability, EvidenceItem
from vendor import states as question_states
from vendor.access import objects_for_user
from vendor.claim import MISSING, element_states
from vendor.models import Answer, Artifact, Deliverable, DocumentReview, Question, Section
from vendor.selectors import answer_list, artifact_list, question_list, questions_by_due, questions_owing

# What a list or a progress bar needs; the full log and result stay in the database until asked for. A list
# that says its runs' reasons in the reader's language loads their findings too (RUN_DETAIL_DEFER only).
RUN_DETAIL_DEFER = ["log", "result", "inputs", "params"]
RUN_SUMMARY_DEFER = [*RUN_DETAIL_DEFER, "findings"]
RUN_HISTORY_LIMIT = 200
RUNS_PER_STAGE = 5
VENDOR_ARTIFACT_LIMIT = 100
VENDOR_RUN_LIMIT = 50

StageRow = tuple[str, str, Run | None]


@dataclass
class ChainView:
    """A chain as its page shows it: per stage its state, latest run, whether that run is still moving, and
    the runs before it."""

    chain: Chain
    rows: list[dict]


@dataclass
class SectionProgress:
    """A section's questions counted by state (in the order of the question states) and by chain position
    (in `stages.POSITIONS` order)."""

    section: Section
    state_counts: list[int]
    position_counts: list[int]
    total: int


# What a chain's position needs of each run: no metrics, reasons or progress, which the lists do not show.
RUN_STATE_FIELDS = ["id", "chain_id", "stage", "state", "inputs_digest"]


def latest_runs(chain_ids: list[int], *, states_only: bool = False) -> dict[tuple[int | None, str], Run]:
    """The newest run of each (chain, stage), in one query: the highest id of each (chain, stage) group, read
    from the index `run_chain_stage_latest`. With `states_only`, each run carries only `RUN_STATE_FIELDS`.

    (Seven correlated subqueries, one per stage, took Django longer to build and compile than the database took
    to run them, twice on the question page.)"""
    if not chain_ids:
        return {}
    newest = (
        Run.objects.filter(chain_id__in=chain_ids, stage__in=stages.CHAIN_STAGES)
        .order_by()
        .values("chain_id", "stage")
        .annotate(newest=Max("id"))
        .values("newest")
    )
    runs = Run.objects.filter(pk__in=newest)
    if states_only:
        runs = runs.only(*RUN_STATE_FIELDS)
    else:
        # Of the deferred result, the probes' verdicts and the device that reported them, in the same query. The
        # params (a few hundred bytes) stay: a soak chart draws the rate they require; so do the findings, whose
        # judged sentences the page says in the reader's language.
        runs = runs.defer(*(name for name in RUN_SUMMARY_DEFER if name not in ("params", "findings"))).annotate(
            result_probes=KeyTransform("probes", "result"), result_device=KeyTransform("device", "result")
        )
    return {(run.chain_id, run.stage): run for run in runs}


def _stage_rows(chain: Chain, latest: dict[tuple[int | None, str], Run]) -> list[StageRow]:
    rows = []
    for stage in stages.CHAIN_STAGES:
        run = latest.get((chain.pk, stage))
        state = stages.stage_state(
            run.state if run else None, run.inputs_digest if run else None, chain.stage_digests.get(stage, "")
        )
        rows.append((stage, state, run))
    return rows


def chain_stages(chain: Chain) -> list[StageRow]:
    """The seven stages in order, each with its state on the chain's current inputs and its latest run."""
    return _stage_rows(chain, latest_runs([chain.pk]))


def chains_stages(chains: list[Chain], *, states_only: bool = False) -> dict[int, list[StageRow]]:
    """`chain_stages` for many chains at once, in two queries."""
    latest = latest_runs([chain.pk for chain in chains], states_only=states_only)
    return {chain.pk: _stage_rows(chain, latest) for chain in chains}


@functools.cache
def _positions_query(database_vendor: str) -> tuple[str, tuple]:
    """The SQL of `chain_state_rows`, compiled once per process and database: Django takes longer to compile
    its seven subqueries than the database takes to run them."""
    newest = {
        f"newest_{stage}": Subquery(
            Run.objects.filter(chain=OuterRef("pk"), stage=stage)
            .order_by("-id")
            .annotate(state_digest=Concat("state", Value(" "), "inputs_digest", output_field=CharField()))
            .values("state_digest")[:1]
        )
        for stage in stages.CHAIN_STAGES
    }
    # Only chains of answers from the organisation the question is put to: after a reassignment the previous
    # one's chains say nothing of where the question stands (as `deliverables_progress`).
    own = Chain.objects.filter(answer__organisation_id=F("question__organisation_id"))
    return own.annotate(**newest).values_list("question_id", "stage_digests", *newest).query.sql_with_params()


def chain_state_rows() -> list[tuple[int, list[StageRow]]]:
    """Every chain's question and the state of each of its stages on its current inputs (no run attached), for
    the chains of answers from the organisation each question is put to.

    One query: per chain and stage, the newest run's state and inputs digest come back as one "state digest"
    text from an index probe, so no run row is loaded (the lists and the dashboard ask for this on every view).
    """
    sql, params = _positions_query(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        chains = cursor.fetchall()
    found = []
    for question_id, stored_digests, *latest in chains:
        digests = json.loads(stored_digests) if isinstance(stored_digests, str) else stored_digests
        rows: list[StageRow] = []
        for stage, state_digest in zip(stages.CHAIN_STAGES, latest, strict=True):
            state, _, digest = (state_digest or "").partition(" ")
            rows.append((stage, stages.stage_state(state or None, digest, digests.get(stage, "")), None))
        found.append((question_id, rows))
    return found


def question_positions(standings: dict[int, list[tuple[str, str]]] | None = None) -> dict[int, str]:
    """For each question with a chain, the furthest position (`stages.POSITIONS`) any of its chains reached;
    from `standings` (`question_standings`) when the caller has read them."""
    standings = question_standings() if standings is None else standings
    return {
        question_id: max((position for position, _state in chains), key=stages.POSITIONS.index)
        for question_id, chains in standings.items()
    }


def question_standings() -> dict[int, list[tuple[str, str]]]:
    """For each question with a chain, every chain's (position, state) (`stages.chain_standing`), in one query."""
    standings: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for question_id, rows in chain_state_rows():
        standings[question_id].append(stages.chain_standing(rows))
    return dict(standings)


def question_worst_standings(standings: dict[int, list[tuple[str, str]]] | None = None) -> dict[int, tuple[str, str]]:
    """For each question with a chain, the chain the lists show: worst state first, then furthest
    (`stages.worst_standing`)."""
    standings = question_standings() if standings is None else standings
    return {question_id: stages.worst_standing(chains) for question_id, chains in standings.items()}


def question_chains(*, user, questions) -> dict[int, list[dict]]:
    """Per question id, its acceptance chains the user may see, with each stage's state and latest run.
    Three queries whatever the number of questions, chains or runs."""
    chains = list(
        objects_for_user(user, Chain.objects.filter(question__in=[question.pk for question in questions]))
        .select_related("target", "capability")
        .order_by("capability__position", "capability__slug", "target__kind", "target__slug")
    )
    stages_by_chain = chains_stages(chains, states_only=True)
    result: dict[int, list[dict]] = defaultdict(list)
    for chain in chains:
        result[chain.question_id].append(
            {
                "capability": chain.capability.slug if chain.capability_id else None,
                "target": chain.target.slug,
                "answer": chain.answer_id,
                "stages": [
                    {"stage": stage, "state": state, "run": run.pk if run else None}
                    for stage, state, run in stages_by_chain[chain.pk]
                ],
            }
        )
    return result


def question_chain_rows(*, user, question: Question) -> list[ChainView]:
    """The question's chains the user may see, each with its stages as the page shows them."""
    chains = list(
        objects_for_user(user, Chain.objects.filter(question=question))
        .select_related("target", "capability", "answer")
        .order_by("capability_id", "target__kind", "target__slug")
    )
    stage_rows = chains_stages(chains)
    history: dict[tuple[int | None, str], list[Run]] = {}
    recent = (
        Run.objects.filter(chain__in=chains)
        .only("id", "chain_id", "stage", "state", "verdict", "created_at", "finished_at", "attempt")
        .order_by("-id")[:RUN_HISTORY_LIMIT]
    )
    for earlier_run in recent:
        history.setdefault((earlier_run.chain_id, earlier_run.stage), []).append(earlier_run)
    views = []
    for chain in chains:
        rows = []
        for stage, state, run in stage_rows[chain.pk]:
            earlier = [r for r in history.get((chain.pk, stage), []) if run is None or r.pk != run.pk]
            rows.append(
                {
                    "stage": stage,
                    "state": state,
                    "run": run,
                    "active": run is not None and run.state in stages.ACTIVE_STATES,
                    "earlier": earlier[:RUNS_PER_STAGE],
                    "probes": _probe_rows(getattr(run, "result_probes", None) or []) if run else [],
                    **_judged_reason(run),
                }
            )
        views.append(ChainView(chain=chain, rows=rows))
    return views


def _judged_reason(run: Run | None) -> dict:
    """A run's reason and calculet's own judging findings (those stored with their template,
    `acceptance.judging.Said`) in the reader's language: the reason said whole when its findings compose it
    (`summaries.judged_reason`), the findings it says then left out of the list below it; otherwise the stored
    reason as `run_summary` shows it and every templated finding. The runner's findings are in its probes."""
    if run is None:
        return {"reason": "", "judged": []}
    reason, judged = run_reason(run)
    return {
        "reason": reason,
        "judged": [{"code": item.get("code", ""), "text": sentences.text(item)} for item in judged],
    }


def run_reason(run: Run) -> tuple[str, list[dict]]:
    """A run's reason in the reader's language, and the templated findings it does not say: composed again
    from its findings when they compose it exactly (`summaries.judged_reason`), otherwise as `run_summary`
    shows the stored reason, with every templated finding but the claim of a pass (which repeats the findings
    after it). The run must carry its `findings`."""
    findings = run.findings if isinstance(run.findings, list) else []
    composed = summaries.judged_reason(run.reason, findings) if run.reason else None
    if composed is not None:
        return composed
    templated = [
        item
        for item in findings
        if isinstance(item, dict) and "template" in item and item.get("code") != "claim_unsupported"
    ]
    return summaries.run_summary(run.reason), templated


def _probe_rows(probes: list[dict]) -> list[dict]:
    """Each probe of a run as the page shows it: its verdict, findings, and its plain-number metrics."""
    return [
        {
            "name": probe.get("name", "?"),
            "verdict": probe.get("verdict", ""),
            "findings": probe.get("findings", []),
            "metrics": {
                key: value
                for key, value in (probe.get("metrics") or {}).items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            },
        }
        for probe in probes
    ]


def questions_with_proof(*, user) -> QuerySet[Question]:
    """The questions the user may see, with the capabilities each can move and what each must deliver."""
    return question_list(user=user).prefetch_related(
        Prefetch("capabilities", queryset=Capability.objects.order_by("position", "slug")),
        Prefetch("deliverables", queryset=Deliverable.objects.order_by("position", "key")),
    )


def run_list(*, user) -> QuerySet[Run]:
    return (
        objects_for_user(user, Run.objects)
        .select_related("target", "chain__question", "chain__capability")
        .prefetch_related(Prefetch("artifacts", queryset=Artifact.objects.only("id")))
        .defer(*RUN_SUMMARY_DEFER)
    )


def section_progress() -> list[SectionProgress]:
    """Each section with its questions counted by state and by chain position."""
    positions = question_positions()
    by_state: dict[int, dict[str, int]] = {}
    by_position: dict[int, dict[str, int]] = {}
    for question_id, section_id, state in Question.objects.values_list("id", "section_id", "state"):
        states_here = by_state.setdefault(section_id, {})
        states_here[state] = states_here.get(state, 0) + 1
        if question_id in positions:
            positions_here = by_position.setdefault(section_id, {})
            positions_here[positions[question_id]] = positions_here.get(positions[question_id], 0) + 1
    return [
        SectionProgress(
            section=section,
            state_counts=[
                by_state.get(section.pk, {}).get(state, 0) for state, _label in question_states.QUESTION_STATES
            ],
            position_counts=[by_position.get(section.pk, {}).get(position, 0) for position in stages.POSITIONS],
            total=sum(by_state.get(section.pk, {}).values()),
        )
        for section in Section.objects.all()
    ]


def vendor_overview(*, user) -> dict:
    """A vendor's own questions, each with its latest answer; their newest artifacts and newest runs."""
    questions = list(question_list(user=user).order_by("number"))
    latest: dict[int, Answer] = {}
    for answer in answer_list(user=user).filter(question__in=questions).order_by("question_id", "-revision"):
        latest.setdefault(answer.question_id, answer)
    open_ids = [question.pk for question in questions if question.state not in question_states.SETTLED_STATES]
    return {
        "questions": [(question, latest.get(question.pk)) for question in questions],
        "owed": deliverables_owed_views(open_ids),
        "artifacts": artifact_list(user=user).order_by("-created_at")[:VENDOR_ARTIFACT_LIMIT],
        # With their findings, which the reason is said from in the reader's language (`run_reason`).
        "runs": run_list(user=user).defer(None).defer(*RUN_DETAIL_DEFER).order_by("-id")[:VENDOR_RUN_LIMIT],
    }


def target_list() -> QuerySet[Target]:
    """Every target, with its agents (each one's last poll, current run and cache size)."""
    return Target.objects.prefetch_related(Prefetch("agents", TargetAgent.objects.order_by("host", "pk")))


def runs_in_progress() -> QuerySet[Run]:
    """Runs waiting for their target, queued or running, oldest first, with what a progress bar shows."""
    return (
        Run.objects.filter(state__in=stages.ACTIVE_STATES)
        .select_related("target", "chain__question", "chain__capability")
        .defer(*RUN_SUMMARY_DEFER)
        .order_by("id")
    )


def runs_stuck(now: datetime) -> QuerySet[Run]:
    """Runs that should be moving and are not, judged at `now` from leases and heartbeats: running with an
    expired lease (its worker is gone and the sweeper has not re-sent it yet), or queued since twice the
    sweeper's re-send delay on a target that no live worker serves or whose worker runs nothing. A run
    waiting behind a busy target's backlog is not stuck."""
    waited = now - timedelta(seconds=2 * settings.ACCEPTANCE_QUEUED_RESEND_AFTER)
    silent = now - timedelta(seconds=settings.ACCEPTANCE_TARGET_OFFLINE_AFTER)
    target_busy = Run.objects.filter(target=OuterRef("target"), state=stages.RUNNING, lease_expires_at__gte=now)
    unserved = (
        Q(target__last_heartbeat_at__isnull=True) | Q(target__last_heartbeat_at__lt=silent) | ~Exists(target_busy)
    )
    return (
        Run.objects.filter(
            Q(state=stages.RUNNING, lease_expires_at__lt=now) | (Q(state=stages.QUEUED, sent_at__lt=waited) & unserved)
        )
        .select_related("target", "chain__question")
        .defer(*RUN_SUMMARY_DEFER)
        .order_by("id")
    )


def target_health_state(target: Target, now: datetime) -> tuple[str, str]:
    """A target's health at `now`, from its worker's last heartbeat and its last health check."""
    if target.kind == Target.HARDWARE and not target.runner_command:
        return Target.DEGRADED, "no hardware runner command is registered: the target runs nothing"
    if target.last_heartbeat_at is None:
        return Target.OFFLINE, "no worker has reported for this target yet"
    silent = (now - target.last_heartbeat_at).total_seconds()
    if silent > settings.ACCEPTANCE_TARGET_OFFLINE_AFTER:
        return Target.OFFLINE, f"no worker heartbeat for {int(silent)} s"
    if target.registration_pending:
        return Target.DEGRADED, target.registration_pending["reason"]
    if target.last_health_check_passed is False:
        return (
            Target.DEGRADED,
            f"out of rotation until a health check passes: health check run {target.last_health_run_id} failed: "
            f"{target.last_health_check_reason}",
        )
    return Target.OK, ""


def targets_unhealthy(now: datetime) -> list[tuple[Target, str, str]]:
    """Targets that will not take runs now, each with its health and why, judged at `now` from heartbeat
    ages (not the stored health, which only the sweeper refreshes): degraded, offline or in maintenance."""
    found = []
    for target in Target.objects.order_by("slug"):
        health, reason = target_health_state(target, now)
        if health != Target.OK or target.maintenance:
            found.append((target, health, reason))
    return found


def promotion_history(capability) -> QuerySet[PromotionAttempt]:
    return PromotionAttempt.objects.filter(capability=capability).order_by("-id")


def promotions_blocked_since(dt: datetime) -> QuerySet[PromotionAttempt]:
    """The latest blocked attempt of each capability since `dt`, newest first: what each is still missing,
    not every click."""
    latest = (
        PromotionAttempt.objects.filter(capability=OuterRef("capability"), allowed=False, created_at__gte=dt)
        .order_by("-id")
        .values("id")[:1]
    )
    return (
        PromotionAttempt.objects.filter(allowed=False, created_at__gte=dt, pk=Subquery(latest))
        .select_related("capability", "actor")
        .order_by("-id")
    )


@dataclass
class StatusBasis:
    """What a capability's status rests on: the versions its evidence was measured on (above C3), and the
    chains whose proof must run again on the current versions before it holds."""

    versions: dict
    since_attempt: PromotionAttempt | None
    reverification_due: list[dict]
    lapsed_evidence: int


def capability_status_basis(capability) -> StatusBasis:
    """The versions of the attempt that set the current status, and, while the status is above C3, each chain
    of the capability whose runner stages are not passed on the current versions (stale, waiting, failed)."""
    attempt = (
        PromotionAttempt.objects.filter(capability=capability, allowed=True, to_status=capability.status)
        .order_by("-id")
        .first()
    )
    due = []
    if capability.status in ("C0", "C1", "C2"):
        chains = list(Chain.objects.filter(capability=capability).select_related("target"))
        for chain_id, rows in chains_stages(chains).items():
            chain = next(c for c in chains if c.pk == chain_id)
            waiting = [(stage, state) for stage, state, _ in rows if state != stages.PASSED]
            if waiting:
                due.append({"chain": chain, "target": chain.target, "stages": waiting})
    lapsed = capability.evidence.filter(current=False).exclude(origin=EvidenceItem.SEED).count()
    return StatusBasis(
        versions=attempt.versions if attempt else {},
        since_attempt=attempt,
        reverification_due=due,
        lapsed_evidence=lapsed,
    )


def _sdk_checked_at(capability) -> set[tuple[int | None, str]]:
    """(organisation, CalRT version) of the current E2 evidence from an SDK check that passed (its sdk
    deliverable accepted) linked to the capability. A failed check is recorded as E2 evidence too, and rejects
    its deliverable; the seed's own snapshot is not a check of anything the vendor delivered; lapsed evidence
    counts as E3."""
    rows = capability.evidence.filter(
        grades__grade="E2",
        origin=EvidenceItem.CHECK,
        current=True,
        deliverable__kind=Deliverable.SDK,
        deliverable__state=Deliverable.ACCEPTED,
    ).values_list("organisation_id", "versions")
    # A row without a CalRT version is no evidence at any version.
    return {(organisation, versions["calrt"]) for organisation, versions in rows if (versions or {}).get("calrt")}


def _sdk_rejected(capability) -> list[tuple[int | None, str | None, str, str, str]]:
    """The SDK deliverables linked to the capability by current E2 check evidence that were rejected, as
    (organisation, calrt version, question code, key, reason): named by the gate rather than just missing."""
    return list(
        capability.evidence.filter(
            grades__grade="E2",
            origin=EvidenceItem.CHECK,
            current=True,
            deliverable__kind=Deliverable.SDK,
            deliverable__state=Deliverable.REJECTED,
        )
        .annotate(calrt=KeyTransform("calrt", "versions"))
        .values_list(
            "organisation_id", "calrt", "deliverable__question__code", "deliverable__key", "deliverable__reason"
        )
        .distinct()
    )


def capability_gate_facts(capability) -> list[AnswerFacts]:
    """What the promotion gate needs about a capability: for each answer its chains currently check (newest
    answer first), every chain's stage states on its current inputs and what its runner stages proved (the
    probes that passed, whether a board attested them, the versions the device reported), and whether an SDK
    its own organisation delivered was checked to carry the capability at a CalRT version its chains run on.
    A fixed number of queries whatever the run count."""
    chains = list(
        Chain.objects.filter(capability=capability)
        .select_related("target", "answer__deliverable", "question")
        .order_by("-answer__created_at", "-answer_id", "id")
    )
    own_deliverables = set(capability.deliverables.values_list("pk", flat=True))
    # A deliverable that names no capability is judged by its runs alone, as its answers' claims are.
    proving = set(
        Capability.deliverables.through.objects.filter(
            deliverable_id__in={chain.answer.deliverable_id for chain in chains}
        ).values_list("deliverable_id", flat=True)
    )
    latest = latest_runs([chain.pk for chain in chains])
    sdk_checked_at = _sdk_checked_at(capability)
    sdk_rejected = _sdk_rejected(capability)
    static = _static_check_grades(capability)
    # The CalRT versions an answer is proven at: those of the targets its chains run on.
    calrt_of_answer: dict[int, set[str]] = {}
    for chain in chains:
        calrt_of_answer.setdefault(chain.answer_id, set()).add(chain.target.calrt_version)
    by_answer: dict[int, AnswerFacts] = {}

    def answer_facts(answer: Answer) -> AnswerFacts:
        return by_answer.setdefault(
            answer.pk,
            AnswerFacts(
                answer_id=answer.pk,
                chains=[],
                complete=answer.complete,
                version=answer.version,
                # An answer from before questions had deliverables proves what its runs' probes covered.
                on_own_deliverable=answer.deliverable_id not in proving or answer.deliverable_id in own_deliverables,
                deliverable=answer.deliverable.key if answer.deliverable else "",
                question=answer.question.code,
                deliverable_state=_deliverable_state_for(answer, answer.question),
                deliverable_reason=answer.deliverable.reason if answer.deliverable else "",
                # E2 from the answer's own organisation's SDK, at a version the answer runs on; an SDK answer's
                # own passed check was held to its version.
                sdk_checked="E2" in static.get(answer.pk, set())
                or any(
                    (answer.organisation_id, calrt) in sdk_checked_at for calrt in calrt_of_answer.get(answer.pk, ())
                ),
                sdk_rejected=[
                    f"{question} {key} ({why})"
                    for organisation, calrt, question, key, why in sdk_rejected
                    if organisation == answer.organisation_id
                    and (calrt is None or calrt in calrt_of_answer.get(answer.pk, ()))
                ],
                checked_grades=static.get(answer.pk, set()),
            ),
        )

    for chain in chains:
        facts = answer_facts(chain.answer)
        rows = _stage_rows(chain, latest)
        current = {stage: run for stage, state, run in rows if run is not None and state != stages.STALE}
        probes_passed: dict[str, set[str]] = {}
        probes_failed: dict[str, dict[str, str]] = {}
        attested: dict[str, bool] = {}
        versions: dict[str, str] = {}
        for stage in stages.RUNNER_STAGES:
            run = current.get(stage)
            if run is None:
                continue
            # Annotated by latest_runs.
            device = getattr(run, "result_device", None) or {}
            probes = getattr(run, "result_probes", None) or []
            probes_passed[stage] = {p.get("name") for p in probes if p.get("verdict") == stages.PASS}
            probes_failed[stage] = {
                str(p.get("name", "?")): _first_finding_code(p) for p in probes if p.get("verdict") != stages.PASS
            }
            attested[stage] = device_attested({"device": device}, chain.target.kind)
            if device:
                versions = {key: str(device.get(key, "")) for key in VERSION_KEYS}
        facts.chains.append(
            ChainFacts(
                chain_id=chain.pk,
                target_name=chain.target.slug,
                target_kind=chain.target.kind,
                stage_states={stage: state for stage, state, _ in rows},
                stage_run_ids={stage: run.pk for stage, _, run in rows if run is not None},
                probes_passed=probes_passed,
                probes_failed=probes_failed,
                attested=attested,
                versions=versions,
            )
        )
    # An SDK, image or schema answer starts no chain: its static check is what it proves.
    checked_only = Answer.objects.filter(pk__in=set(static) - set(by_answer)).select_related("deliverable", "question")
    for answer in checked_only.order_by("-created_at", "-pk"):
        answer_facts(answer)
    return list(by_answer.values())


def _deliverable_state_for(answer: Answer, question: Question) -> str:
    """The state of the answer's deliverable as it stands for the answer's organisation: its own while the
    question is put to that organisation; owed once the question is put to another, whose decisions are not
    about this answer. "" for an answer that names no deliverable."""
    if answer.deliverable is None:
        return ""
    if answer.organisation_id != question.organisation_id:
        return Deliverable.OWED
    return answer.deliverable.state


def _static_check_grades(capability) -> dict[int, set[str]]:
    """Per answer, the grades of its static checks that passed (its deliverable, one of the capability's own,
    accepted) and are current, linked to the capability."""
    rows = capability.evidence.filter(
        origin=EvidenceItem.CHECK,
        current=True,
        answer__isnull=False,
        deliverable__state=Deliverable.ACCEPTED,
        deliverable__capabilities=capability,
    ).values_list("answer_id", "grades__grade")
    grades: dict[int, set[str]] = defaultdict(set)
    for answer_id, grade in rows:
        if grade:
            grades[answer_id].add(grade)
    return dict(grades)


def _first_finding_code(probe: dict) -> str:
    """What a probe that did not pass found first (its verdict when it reports no finding)."""
    findings = probe.get("findings")
    first = findings[0] if isinstance(findings, list) and findings else None
    code = first.get("code") if isinstance(first, dict) else None
    return str(code or probe.get("verdict") or "failed")


def capability_gate_subject(capability) -> GateSubject:
    """What the gate needs of the capability itself: its slug, its pin, its recipe's probe names (none when it
    has no recipe) and whether that recipe names SDK entry points (the policy's `sdk` applies only then)."""
    recipe = RECIPES.get(capability.slug)
    return GateSubject(
        capability=capability.slug,
        pinned_status=capability.pinned_status if capability.pinned else "",
        recipe_probes=tuple(probe.name for probe in recipe.probes) if recipe else (),
        sdk_calls=bool(recipe and recipe.names_sdk_calls),
    )


# What a calbin deliverable's chains on one kind of target have shown.
PROGRESS_PASSED = "passed"  # a chain has passed every stage
PROGRESS_FAILED = "failed"  # a chain stopped at a failed or erred stage, and none passed
PROGRESS_RUNNING = "running"  # a chain is still under way, and none passed or stopped
PROGRESS_NONE = "none"  # no chain on this kind of target yet
PROGRESS_LABELS = {
    PROGRESS_PASSED: _("passed"),
    PROGRESS_FAILED: _("failed"),
    PROGRESS_RUNNING: _("running"),
    PROGRESS_NONE: _("not run"),
}
_PROGRESS_ORDER = [PROGRESS_PASSED, PROGRESS_FAILED, PROGRESS_RUNNING, PROGRESS_NONE]


def deliverables_progress(deliverables) -> dict[int, dict[str, str]]:
    """For each deliverable id, its state per target kind (simulator, hardware): whether a chain of an answer
    naming that deliverable, from the organisation the question is put to, has passed every stage there (an
    earlier organisation's chains are not what the present one owes). Three queries whatever the number of
    deliverables."""
    ids = [deliverable.pk for deliverable in deliverables]
    chains = list(
        Chain.objects.filter(
            answer__deliverable_id__in=ids, answer__organisation_id=F("question__organisation_id")
        ).select_related("target", "answer")
    )
    # Where a chain stands needs only each stage's state: not the runs' metrics, which a soak's are large.
    rows_by_chain = chains_stages(chains, states_only=True)
    progress: dict[int, dict[str, str]] = {pk: {kind: PROGRESS_NONE for kind, _label in Target.KINDS} for pk in ids}
    for chain in chains:
        action, _stage = stages.chain_next(rows_by_chain[chain.pk])
        state = {stages.DONE: PROGRESS_PASSED, stages.STOPPED: PROGRESS_FAILED}.get(action, PROGRESS_RUNNING)
        deliverable_id = chain.answer.deliverable_id
        if deliverable_id is None:  # typing only: the chains were selected by their answer's deliverable
            continue
        per_kind = progress[deliverable_id]
        known = per_kind[chain.target.kind]
        if _PROGRESS_ORDER.index(state) < _PROGRESS_ORDER.index(known):
            per_kind[chain.target.kind] = state
    return progress


def deliverable_progress(deliverable: Deliverable) -> dict[str, str]:
    """A deliverable's state per target kind: `{"simulator": "passed", "hardware": "none"}`."""
    return deliverables_progress([deliverable])[deliverable.pk]


@dataclass
class DeliverableView:
    """A deliverable as the pages and reports show it: its state, and what is still owed."""

    deliverable: Deliverable
    progress: dict[str, str]  # calbin only: target kind -> PROGRESS_*
    reviews: list[DocumentReview]
    answered: bool
    found: list[tuple[str, str]] = field(default_factory=list)  # what its latest static check looked at, found
    # The keys of its alternatives (the question's other deliverables of the same `either`): it or one of them.
    alternatives: list[str] = field(default_factory=list)
    alternative_accepted: bool = False

    @property
    def owed(self) -> bool:
        return self.deliverable.state != Deliverable.ACCEPTED and not self.alternative_accepted

    @property
    def owed_as(self) -> tuple[str, str]:
        """What it is owed as: one thing with its alternatives (their `either`), or itself."""
        return ("either", self.deliverable.either) if self.deliverable.either else ("key", self.deliverable.key)

    # Cached: a page asks whether there are rows, then for them; a view lives for one request (one language).
    @functools.cached_property
    def progress_rows(self) -> list[tuple[str, str, str]]:
        """(target kind, state, label) in the order of Target.KINDS."""
        return [(kind, self.progress[kind], str(PROGRESS_LABELS[self.progress[kind]])) for kind in self.progress]

    @functools.cached_property
    def proof_rows(self) -> list[tuple[str, str, str, str]]:
        """What a calbin deliverable's runs prove on each kind of target: (kind, where, code, what), in the
        reader's language; none for the other kinds, which no runner runs."""
        return deliverable_runs_prove(self.deliverable)


def deliverables_runs_prove() -> dict[int, list[tuple[str, str, str, str]]]:
    """For every calbin deliverable's id, what its runs prove (`deliverable_runs_prove`); two queries."""
    calbins = Deliverable.objects.filter(kind=Deliverable.CALBIN).prefetch_related("capabilities")
    return {deliverable.pk: deliverable_runs_prove(deliverable) for deliverable in calbins}


def checklist_download(fmt: str) -> str:
    """The checklist export with what only acceptance knows: where each calbin deliverable's chains stand per
    target kind and what its runs prove (the reports page's downloads and `manage.py export_checklist` alike)."""
    progress = deliverables_progress(Deliverable.objects.filter(kind=Deliverable.CALBIN).only("id"))
    return checklist_export(fmt, progress, deliverables_runs_prove())


def deliverable_runs_prove(deliverable: Deliverable) -> list[tuple[str, str, str, str]]:
    """(target kind, where, code, what) for a calbin deliverable's runs (its capabilities prefetched, or one
    query); empty for another kind."""
    if deliverable.kind != Deliverable.CALBIN:
        return []
    return proof_labels.labelled(proof_labels.runs_prove(c.slug for c in deliverable.capabilities.all()))


def deliverable_views(deliverables) -> list[DeliverableView]:
    """Views of the given deliverables in a fixed number of queries whatever their number."""
    deliverables = list(deliverables)
    ids = [deliverable.pk for deliverable in deliverables]
    calbins = [deliverable for deliverable in deliverables if deliverable.kind == Deliverable.CALBIN]
    progress = deliverables_progress(calbins)
    # Only the answers and reviews of the organisation each question is put to: what it owes is its own.
    answered = set(
        Answer.objects.filter(deliverable_id__in=ids, organisation_id=F("question__organisation_id")).values_list(
            "deliverable_id", flat=True
        )
    )
    reviews: dict[int, list[DocumentReview]] = defaultdict(list)
    own_reviews = DocumentReview.objects.filter(
        deliverable_id__in=ids, answer__organisation_id=F("deliverable__question__organisation_id")
    )
    for review in own_reviews.select_related("reviewer", "answer"):
        reviews[review.deliverable_id].append(review)
    groups = deliverable_alternatives(deliverables)
    views = []
    for deliverable in deliverables:
        others = [(key, state) for key, state in groups.get(_group(deliverable), []) if key != deliverable.key]
        views.append(
            DeliverableView(
                deliverable=deliverable,
                progress=progress.get(deliverable.pk, {}),
                reviews=reviews[deliverable.pk],
                answered=deliverable.pk in answered,
                alternatives=[key for key, _state in others],
                alternative_accepted=any(state == Deliverable.ACCEPTED for _key, state in others),
            )
        )
    return views


def _group(deliverable: Deliverable) -> tuple[int, str]:
    return (deliverable.question_id, deliverable.either)


def deliverable_alternatives(deliverables: list[Deliverable]) -> dict[tuple[int, str], list[tuple[str, str]]]:
    """(question id, either) -> [(key, state)] of every deliverable of those alternatives, in position order; one
    query, none when no deliverable given has alternatives."""
    groups = {_group(deliverable) for deliverable in deliverables if deliverable.either}
    if not groups:
        return {}
    rows = Deliverable.objects.filter(
        question_id__in={question for question, _either in groups}, either__in={either for _q, either in groups}
    ).order_by("position", "key")
    found: dict[tuple[int, str], list[tuple[str, str]]] = defaultdict(list)
    for question_id, either, key, state in rows.values_list("question_id", "either", "key", "state"):
        if (question_id, either) in groups:
            found[(question_id, either)].append((key, state))
    return found


def question_deliverables(question: Question) -> list[DeliverableView]:
    """The question's deliverables, each with what its latest static check found (`check_found`)."""
    views = deliverable_views(
        question.deliverables.select_related("decided_by").prefetch_related(
            Prefetch("capabilities", queryset=Capability.objects.order_by("position", "slug"))
        )
    )
    checks = EvidenceItem.objects.filter(
        deliverable__in=[view.deliverable for view in views], origin=EvidenceItem.CHECK
    ).order_by("deliverable_id", "-created_at", "-pk")
    latest: dict[int, dict] = {}
    for deliverable_id, detail in checks.values_list("deliverable_id", "detail"):
        latest.setdefault(deliverable_id, detail)
    for view in views:
        if view.deliverable.pk in latest:
            view.found = check_found(view.deliverable.kind, latest[view.deliverable.pk])
    return views


def _names(names) -> str:
    return labels.listed(names) or "—"


def check_found(kind: str, detail: dict) -> list[tuple[str, str]]:
    """What a static check looked at and found, as (label, what) lines, from the detail its evidence keeps: the
    SDK's calls found and missing, the image's SBOM and licence files, the schema's verdict on each sample, the
    ONNX file's hash beside the seed's, the models a checker accepts and refuses, the trace events a converter
    wrote against the sample's and the first that differs."""
    checked = (detail or {}).get("checked") or {}
    report = (checked.get("report") or {}).get("checked") or {}
    lines: list[tuple[str, str]] = []
    if kind == Deliverable.SDK and isinstance(checked.get("calls"), dict):
        # `calls` holds every call looked for (other capabilities' too); `entry_points` those this SDK must carry.
        calls = checked["calls"]
        present = {name for name, where in calls.items() if where.get("declared_in") and where.get("symbol")}
        required = report.get("entry_points") or []
        lines.append(
            (
                str(_("Calls found in the headers and the library")),
                _names(f"{name} ({calls[name]['declared_in']})" for name in calls if name in present),
            )
        )
        lines.append((str(_("Calls missing")), _names(name for name in required if name not in present)))
    elif kind == Deliverable.CONTAINER_IMAGE and "sbom" in report:
        sbom = report.get("sbom") or {}
        lines.append(
            (
                str(_("SBOM")),
                _("%(where)s (%(format)s, packages listed: %(count)s)")
                % {"where": sbom["where"], "format": sbom.get("format"), "count": sbom.get("packages")}
                if sbom.get("where")
                else "—",
            )
        )
        lines.append((str(_("Licence file")), report.get("licence") or "—"))
    elif kind == Deliverable.SCHEMA and ("accepted" in report or "rejected" in report):
        accepted = report.get("accepted") or {}
        rejected = report.get("rejected") or {}
        lines.append((str(_("Current samples the schema accepts")), _names(n for n, ok in accepted.items() if ok)))
        lines.append((str(_("Current samples it wrongly rejects")), _names(n for n, ok in accepted.items() if not ok)))
        lines.append((str(_("Defective samples it rejects")), _names(n for n, errors in rejected.items() if errors)))
        lines.append(
            (str(_("Defective samples it wrongly accepts")), _names(n for n, errors in rejected.items() if not errors))
        )
    elif kind == Deliverable.SCHEMA and "sample_events" in report:
        lines += _trace_found(report)
    elif kind == Deliverable.ONNX and "sha256" in report:
        lines.append((str(_("The file's SHA-256")), report["sha256"]))
        lines.append((str(_("The hash the seed records")), f"{report.get('expected_prefix', '')}…"))
    elif kind == Deliverable.TOOL and isinstance(report.get("runs"), list):
        runs = report["runs"]
        lines.append((str(_("Models it accepts")), _names(sorted(run["model"] for run in runs if run.get("accepted")))))
        lines.append(
            (str(_("Models it refuses")), _names(sorted(run["model"] for run in runs if not run.get("accepted"))))
        )
    return lines


def _trace_found(report: dict) -> list[tuple[str, str]]:
    """V37: the events compared on each run, where the sample's times were read, and the first difference."""
    fields = report.get("fields") or {}
    unit = fields.get("unit", "")
    if unit == "cycle":
        unit = _("cycles of the clock %(clock)s") % {"clock": fields.get("clock_hz")}
    lines = [
        (
            str(_("Times read from the sample")),
            _("%(start)s and %(duration)s, in %(unit)s, to microseconds")
            % {"start": fields.get("start"), "duration": fields.get("duration"), "unit": unit},
        ),
        (
            str(_("Events compared")),
            _("%(sample)s in the sample, %(chrome)s duration events in the converter's Chrome trace")
            % {"sample": report["sample_events"], "chrome": report.get("converted_events", "—")},
        ),
    ]
    if "varied_events" in report:
        lines.append(
            (
                str(_("On the varied sample")),
                _("%(sample)s expected, %(chrome)s written")
                % {"sample": report.get("varied_sample_events"), "chrome": report["varied_events"]},
            )
        )
    lines.append((str(_("First difference")), _trace_mismatch(report.get("first_mismatch"))))
    return lines


def _trace_mismatch(mismatch: dict | None) -> str:
    if not mismatch:
        return "—"
    if "names" in mismatch:
        said = _("events the sample does not name: %(names)s") % {"names": _names(mismatch["names"])}
    elif mismatch.get("mark") == "instants":
        said = _("instant %(event)s (thread %(thread)s): the sample says %(ts)s µs, the Chrome trace %(actual)s") % {
            "event": mismatch["event"],
            "thread": mismatch["thread"],
            "ts": mismatch["expected"]["ts"],
            "actual": _("%(ts)s µs") % {"ts": mismatch["actual"]["ts"]} if mismatch["actual"] else "—",
        }
    elif mismatch.get("mark") == "counters":
        said = _(
            "counter %(event)s: the sample says %(value)s at %(ts)s µs, the Chrome trace %(values)s at %(actual)s"
        ) % {
            "event": mismatch["event"],
            "value": mismatch["expected"]["value"],
            "ts": mismatch["expected"]["ts"],
            "values": _names(f"{value:g}" for value in mismatch["actual"]["values"]) if mismatch["actual"] else "—",
            "actual": _("%(ts)s µs") % {"ts": mismatch["actual"]["ts"]} if mismatch["actual"] else "—",
        }
    elif "relation" in mismatch:
        said = (
            _("%(event)s (thread %(thread)s) follows %(other)s in the sample and overlaps it in the Chrome trace")
            if mismatch["relation"] == "follows"
            else _("%(event)s (thread %(thread)s) is inside %(other)s in the sample, not in the Chrome trace")
        ) % {"event": mismatch["event"], "thread": mismatch["thread"], "other": mismatch["other"]}
    elif "actual" in mismatch:
        said = _(
            "%(event)s (thread %(thread)s): the sample says it starts at %(ts)s µs and lasts %(dur)s µs, the "
            "Chrome trace %(actual_ts)s µs and %(actual_dur)s µs"
        ) % {
            "event": mismatch["event"],
            "thread": mismatch["thread"],
            "ts": mismatch["expected"]["ts"],
            "dur": mismatch["expected"]["dur"],
            "actual_ts": mismatch["actual"]["ts"],
            "actual_dur": mismatch["actual"]["dur"],
        }
    else:
        said = _("no thread of the Chrome trace holds the sample's thread %(thread)s and no other: %(names)s") % {
            "thread": mismatch.get("thread"),
            "names": _names(mismatch.get("expected") or []),
        }
    if mismatch.get("varied"):
        said = _("%(difference)s (on the varied sample)") % {"difference": said}
    return str(said)


def document_answer(deliverable: Deliverable) -> Answer | None:
    """The latest answer that delivers the document from the organisation the question is put to: the one a
    review judges (another organisation's answer decides nothing about what this one owes)."""
    return (
        Answer.objects.select_related("organisation")
        .filter(
            question_id=deliverable.question_id,
            deliverable=deliverable,
            organisation_id=F("question__organisation_id"),
        )
        .order_by("-created_at", "-pk")
        .first()
    )


@dataclass
class AnswerElements:
    """Section 13's elements of one answer as the pages show them: (element, state, reason) in order."""

    states: list[tuple[str, str, str]]

    @property
    def missing(self) -> list[str]:
        return [element for element, state, _reason in self.states if state == MISSING]

    @property
    def closes(self) -> bool:
        return not self.missing


def answers_claims(answers: list[Answer]) -> dict[int, Capability]:
    """Per answer id, the capability the answer claims to prove, for those that name one; one query."""
    claims = AnswerClaim.objects.filter(answer__in=answers).select_related("capability")
    return {claim.answer_id: claim.capability for claim in claims}


def answers_elements(answers: list[Answer]) -> dict[int, AnswerElements]:
    """Each answer's elements by its id. An element the answer's latest accepted review judged not applicable
    shows so, with the reason, so an answer that closed its question is never shown lacking what did not
    apply; every other element is present or missing as the answer's structure says."""
    verdicts: dict[int, dict] = {}
    accepted = DocumentReview.objects.filter(answer__in=answers, accepted=True).order_by("created_at", "id")
    for review in accepted:
        verdicts[review.answer_id] = review.elements  # the latest accepted review wins
    return {
        answer.pk: AnswerElements(states=element_states(answer.missing, verdicts.get(answer.pk, {})))
        for answer in answers
    }


# What the dashboard counts and the question list filters on: the work still owed.
ATTENTION_OWED = "owed"  # an open question with a deliverable not accepted
ATTENTION_INCOMPLETE = "incomplete"  # an open question whose latest answer lacks section-13 elements
ATTENTION_FAILED = "chain_failed"  # a chain stopped at a failed or erred stage
ATTENTION_STALE = "chain_stale"  # a chain with a stage whose verdict is on inputs that changed
ATTENTION_LABELS = {
    ATTENTION_OWED: _("deliverables owed"),
    ATTENTION_INCOMPLETE: _("answers missing section-13 elements"),
    ATTENTION_FAILED: _("chains failed"),
    ATTENTION_STALE: _("chains stale"),
}


@dataclass
class Attention:
    questions: dict[str, set[int]]  # ATTENTION_* -> question ids
    counts: dict[str, int]  # ATTENTION_* -> deliverables owed, answers incomplete, chains failed / stale


def attention() -> Attention:
    """Where the work stands still, in a fixed number of queries: owed deliverables of open questions, latest
    answers that are incomplete, and chains that failed or went stale."""
    open_questions = Question.objects.exclude(state__in=question_states.SETTLED_STATES)
    owed_rows = Deliverable.objects.filter(question__in=open_questions).owed()
    # Alternatives still owed are one thing owed (V45: the SDK or the erratum).
    owed_things = {
        (question_id, ("either", either) if either else ("key", key))
        for question_id, either, key in owed_rows.values_list("question_id", "either", "key")
    }
    owed = [question_id for question_id, _thing in owed_things]
    # Each organisation's latest revision: no later one exists (a NOT EXISTS both PostgreSQL and SQLite run,
    # where DISTINCT ON is PostgreSQL's alone).
    later_revision = Answer.objects.filter(
        question=OuterRef("question"), organisation=OuterRef("organisation"), revision__gt=OuterRef("revision")
    )
    # Of the organisation each question is put to: a previous one's answers are not what it owes now.
    latest = (
        Answer.objects.filter(question__in=open_questions, organisation_id=F("question__organisation_id"))
        .exclude(Exists(later_revision))
        .values_list("question_id", "complete")
    )
    incomplete = [question_id for question_id, complete in latest if not complete]
    failed, stale = [], []
    for question_id, rows in chain_state_rows():
        states = {stage: state for stage, state, _run in rows}
        # Stopped: its first stage that has not passed failed or erred (`stages.chain_next`).
        if states.get(stages.chain_position(rows)) in (stages.FAILED, stages.ERROR):
            failed.append(question_id)
        if stages.STALE in states.values():
            stale.append(question_id)
    found = {ATTENTION_OWED: owed, ATTENTION_INCOMPLETE: incomplete, ATTENTION_FAILED: failed, ATTENTION_STALE: stale}
    return Attention(
        questions={kind: set(ids) for kind, ids in found.items()},
        counts={kind: len(ids) for kind, ids in found.items()},
    )


def deliverables_owed_views(question_ids) -> list[DeliverableView]:
    """The deliverables not yet accepted (nor an alternative of theirs) of the given questions, in question order."""
    owed = (
        Deliverable.objects.filter(question_id__in=list(question_ids))
        .owed()
        .select_related("question", "decided_by")
        .prefetch_related(Prefetch("capabilities", queryset=Capability.objects.order_by("position", "slug")))
        .order_by("question__number", "position", "key")
    )
    return deliverable_views(owed)


SEARCH_MAX_CHARS = 200  # the free-text filter's length, on the page and in the API
NOBODY = "none"  # the assignee filter's value for questions assigned to nobody, on the page and in the API


@dataclass(frozen=True)
class QuestionFilters:
    """Which questions a list shows, as the question page's filter form and the API's query parameters give
    them; each name means the same in both (docs/api.md). An empty field does not filter."""

    text: str = ""  # free text: code, question, acceptance, section title or theme, an answer's summary
    section: str = ""  # a section's code
    state: str = ""
    priority: str = ""
    due: str = ""  # overdue, due_soon or none (`vendor.due`)
    organisation: str = ""  # the slug of the organisation the question is put to
    assignee: str = ""  # a username, or NOBODY
    capability: str = ""  # the slug of a capability the question can move
    stage: str = ""  # the furthest chain position (`stages.POSITIONS`), or "none": no chain yet
    theme: str = ""  # what the question's section blocks
    attention: str = ""  # what the question needs (a key of `attention().questions`)
    owes: str = ""  # "true": open and still owing a deliverable (owed or rejected), whatever its state; "false": not


def questions_filter(questions: QuerySet[Question], filters: QuestionFilters, positions=None) -> QuerySet[Question]:
    """The questions the filters select, for the page and the API alike; `positions` are the chains'
    (`question_positions`), read here when a stage filter needs them and the caller has not."""
    if filters.owes:
        questions = questions_owing(questions, filters.owes == "true")
    if filters.text:
        text = filters.text
        questions = questions.filter(
            Q(code__icontains=text)
            | Q(question__icontains=text)
            | Q(acceptance__icontains=text)
            | Q(section__title__icontains=text)
            | Q(section__theme__icontains=text)
            | Q(answers__summary__icontains=text)
        ).distinct()
    if filters.section:
        questions = questions.filter(section__code=filters.section)
    if filters.state:
        questions = questions.filter(state=filters.state)
    if filters.priority:
        questions = questions.filter(priority=filters.priority)
    if filters.due:
        questions = questions_by_due(questions, filters.due, timezone.localdate())
    if filters.organisation:
        questions = questions.filter(organisation__slug=filters.organisation)
    if filters.assignee == NOBODY:
        questions = questions.filter(assignee__isnull=True)
    elif filters.assignee:
        questions = questions.filter(assignee__username=filters.assignee)
    if filters.capability:
        questions = questions.filter(capabilities__slug=filters.capability).distinct()
    if filters.stage:
        positions = question_positions() if positions is None else positions
        if filters.stage == "none":
            questions = questions.exclude(pk__in=list(positions))
        else:
            questions = questions.filter(pk__in=[pk for pk, position in positions.items() if position == filters.stage])
    if filters.theme:
        questions = questions.filter(section__blocks=filters.theme)
    if filters.attention:
        questions = questions.filter(pk__in=attention().questions[filters.attention])
    return questions
