"""Starting and moving acceptance chains, creating runs, and re-running a stage."""

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_noop

from acceptance import stages
from acceptance.models import AnswerClaim, Chain, Run, Target
from acceptance.selectors import chain_stages
from acceptance.services.dispatch import run_send
from acceptance.services.inputs import (
    AnswerInputs,
    answer_inputs,
    chain_probes,
    run_inputs_snapshot,
    runner_stage_params,
    stage_digests,
)
from acceptance.services.locking import question_lock
from acceptance.services.runs.state import run_state_move
from acceptance.services.targets import target_accepts_runs, target_ensure_simulator, target_health_check_start
from calculet.actors import SYSTEM, Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, ForbiddenError
from calculet.sentences import Labelled
from evidence.models import Capability, EvidenceItem
from evidence.services import evidence_lapse
from vendor import events
from vendor import states as question_states
from vendor.access import may_act_as_pm
from vendor.models import Answer, Deliverable, Question
from vendor.services.deliverables import deliverable_accept
from vendor.services.notifications import notify_on_commit
from vendor.services.questions import question_state_move


def answer_capability(answer: Answer) -> Capability | None:
    """The capability the answer's chains may move: the one it claims, else the question's only one, else
    None (the claim stage then fails and says why)."""
    claim = AnswerClaim.objects.select_related("capability").filter(answer=answer).first()
    if claim is not None:
        return claim.capability
    linked = list(answer.question.capabilities.all()[:2])
    return linked[0] if len(linked) == 1 else None


def chain_start_for_answer(answer_id: int) -> None:
    """Start the acceptance chain of a stored answer on every target, or move an existing chain of the same
    question and capability onto this answer's artifact versions.

    Called after the answer's transaction commits. An answer older than the one a chain already checks
    changes nothing on that chain. Idempotent: calling it again for the same answer starts nothing new.
    """
    answer = Answer.objects.select_related("question").get(pk=answer_id)
    capability = answer_capability(answer)
    target_ensure_simulator()
    for target in Target.objects.order_by("pk"):
        chain_start(answer=answer, capability=capability, target=target)


def _newer(answer: Answer, than: Answer) -> bool:
    return (answer.created_at, answer.pk) > (than.created_at, than.pk)


def chain_start(*, answer: Answer, capability, target: Target, actor: Actor = SYSTEM) -> Chain:
    """The chain of (answer's question, capability, target), now checking `answer`.

    Stages whose inputs changed become stale; runs still waiting or running on the old inputs are marked
    stale and their workers stop them; the chain then runs its first stage that has not passed. Locks the
    question, the chain and its waiting and running runs, in that order, before it writes an audit row.
    """
    inputs = answer_inputs(answer)
    digests = stage_digests(
        inputs, capability.pk if capability else None, target, capability.slug if capability else None
    )
    with transaction.atomic():
        question = question_lock(answer.question_id)
        chain = (
            lock_rows(Chain.objects)
            .filter(question=question, capability=capability, target=target)
            .select_related("target")
            .first()
        )
        created = chain is None
        if chain is None:  # no other transaction can create it: they wait for the question's lock
            chain = Chain.objects.create(
                question=question, capability=capability, answer=answer, target=target, stage_digests=digests
            )
        chain.question = question
        active = _lock_active_runs([chain])
        if created:
            audit_record(
                actor=actor,
                action="chain.start",
                obj=chain,
                after={"answer": answer.pk, "target": target.slug, "capability": capability and capability.slug},
            )
        elif chain.answer_id != answer.pk:
            if not _newer(answer, chain.answer):
                return chain
            before = {"answer": chain.answer_id}
            evidence_lapse(
                EvidenceItem.objects.filter(run__chain=chain, run__answer_id=chain.answer_id),
                actor=actor,
                reason=f"answer {answer.pk} supersedes the artifacts of answer {chain.answer_id}",
            )
            chain.answer = answer
            chain.stage_digests = digests
            chain.save(update_fields=["answer", "stage_digests", "updated_at"])
            audit_record(actor=actor, action="chain.answer", obj=chain, before=before, after={"answer": answer.pk})
        elif chain.stage_digests != digests:
            chain.stage_digests = digests
            chain.save(update_fields=["stage_digests", "updated_at"])
        _stale_outdated_runs(chain, active)
        _question_move(chain, question_states.VERIFYING, f"acceptance chain on {target.slug}")
        chain_advance(chain, actor=actor)
    return chain


def chains_lock_for_target(target: Target) -> tuple[list[Chain], list[Run]]:
    """Lock the target's chains for `chains_refresh`, in the lock order: their questions, the chains, then
    their waiting and running runs (returned with them). Precondition: runs in the caller's transaction,
    before it writes an audit row."""
    chain_ids = list(Chain.objects.filter(target=target).order_by("pk").values_list("pk", flat=True))
    question_ids = sorted(set(Chain.objects.filter(pk__in=chain_ids).values_list("question_id", flat=True)))
    list(lock_rows(Question.objects).filter(pk__in=question_ids).order_by("pk").values_list("pk", flat=True))
    list(lock_rows(Chain.objects).filter(pk__in=chain_ids).order_by("pk").values_list("pk", flat=True))
    chains = list(Chain.objects.filter(pk__in=chain_ids).select_related("answer", "capability", "question"))
    return chains, _lock_active_runs(chains)


def chains_refresh(chains: list[Chain], active: list[Run], target: Target, *, actor: Actor = SYSTEM) -> None:
    """Recompute the current inputs of the target's chains and of their `active` runs (all locked by
    `chains_lock_for_target`) after its versions changed, and move them on. The people of each question whose
    proof must now be run again on the new versions are told."""
    registered = target.registered_versions()
    measured = EvidenceItem.objects.filter(run__target=target, current=True)
    evidence_lapse(
        measured.filter(pk__in=[item.pk for item in measured if item.versions != registered]),
        actor=actor,
        reason=f"{target.slug} is now {_versions(target)}",
    )
    told: set[int] = set()
    for chain in chains:
        chain.target = target
        chain.stage_digests = stage_digests(
            answer_inputs(chain.answer),
            chain.capability_id,
            target,
            chain.capability.slug if chain.capability else None,
        )
        chain.save(update_fields=["stage_digests", "updated_at"])
        _stale_outdated_runs(chain, active)
        chain_advance(chain, actor=actor)
        if chain.question_id not in told:
            told.add(chain.question_id)
            notify_on_commit(
                events.REVERIFICATION_DUE,
                actor=actor,
                organisation_id=chain.answer.organisation_id,
                question_id=chain.question_id,
                data={"target": target.name, "detail": _versions(target)},
            )


def _versions(target: Target) -> str:
    return (
        f"CalRT {target.calrt_version}, driver {target.driver_version}, firmware {target.firmware_version}, "
        f"chip {target.chip}"
    )


def _lock_active_runs(chains: list[Chain]) -> list[Run]:
    return list(lock_rows(Run.objects).filter(chain__in=chains, state__in=stages.ACTIVE_STATES).order_by("pk"))


def _stale_outdated_runs(chain: Chain, active: list[Run]) -> None:
    """Mark stale the chain's waiting and running runs (among `active`, locked) whose inputs changed."""
    for run in active:
        if run.chain_id == chain.pk and run.inputs_digest != chain.stage_digests.get(run.stage):
            run_state_move(run, stages.STALE, reason="the chain's inputs changed before this run finished")


def _question_move(chain: Chain, state: str, reason: str) -> None:
    question = chain.question
    if question.state != state and question_states.can_transition(question.state, state):
        question_state_move(actor=SYSTEM, question=question, state=state, reason=reason)


def chain_advance(chain: Chain, *, actor: Actor = SYSTEM, inputs: AnswerInputs | None = None) -> Run | None:
    """Queue the chain's next stage when the one before it has passed on the current inputs.

    A chain that has passed every stage does not close its question: the question closes when every one of
    its deliverables is accepted (vendor.services.deliverables).

    Precondition: runs inside a transaction holding the row locks of the chain and its question (the lock
    order, `acceptance.services.locking`); `inputs`, when given, are those of the chain's current answer.
    Returns the run it created, if any.
    """
    rows = chain_stages(chain)
    action, stage = stages.chain_next(rows)
    if action == stages.RUN and stage is not None:
        return run_create(chain=chain, stage=stage, actor=actor, inputs=inputs)
    if action == stages.DONE:
        _deliverable_accept_on_proof(chain)
    return None


def _deliverable_accept_on_proof(chain: Chain) -> None:
    """A calbin deliverable is accepted when, for every capability it proves, a chain of an answer that delivers
    it has passed every stage on its current inputs: each capability's probes ran through runner, golden,
    failure, integration and soak. One capability proven of two leaves it owed; one pinned at C4 is not asked.
    Only answers of the organisation the question is put to decide it: a chain of an earlier one's answer that
    finishes after the question was moved on accepts nothing."""
    answer = chain.answer
    deliverable, capability = answer.deliverable, chain.capability
    if (
        deliverable is None
        or capability is None
        or deliverable.kind != Deliverable.CALBIN
        or deliverable.state == Deliverable.ACCEPTED
        or answer.organisation_id != chain.question.organisation_id
        or not deliverable.capabilities.filter(pk=capability.pk).exists()
    ):
        return
    # A capability pinned at C4 is never promoted (V36's CalRT 0.7.6 refuses the second board by design): it is
    # not something the deliverable must prove.
    needed = set(deliverable.capabilities.exclude(pinned=True, pinned_status="C4").values_list("slug", flat=True))
    proven: dict[str, Chain] = {}
    candidates = Chain.objects.filter(
        answer__deliverable=deliverable,
        answer__organisation_id=chain.question.organisation_id,
        capability__slug__in=needed,
    ).select_related("capability", "target", "answer")
    for other in candidates.order_by("pk"):
        assert other.capability is not None  # filtered on its slug
        slug = other.capability.slug
        if slug not in proven and stages.chain_position(chain_stages(other)) == stages.DONE:
            proven[slug] = other
    if set(proven) != needed:
        return
    deliverable_accept(
        deliverable,
        actor=SYSTEM,
        reason="every stage passed for each capability it proves: "
        + "; ".join(
            f"{slug} on {c.target.slug} with answer {c.answer_id} (revision {c.answer.revision})"
            for slug, c in sorted(proven.items())
        ),
        answer=answer,
    )


def run_create(
    *,
    chain: Chain,
    stage: str,
    actor: Actor = SYSTEM,
    rerun_of: Run | None = None,
    inputs: AnswerInputs | None = None,
    priority: int = stages.PRIORITY_BACKLOG,
    retry: int = 0,
) -> Run:
    """A run of `stage` on the chain's current inputs: `queued` and sent after commit when the target accepts
    runs, otherwise `pending` until it does. `priority` orders it among its target's waiting runs
    (stages.PRIORITY_*). Precondition: the chain's row is locked by this transaction."""
    answer = chain.answer
    inputs = inputs or answer_inputs(answer)
    accepts = target_accepts_runs(chain.target)
    probes, recipe_version = (
        chain_probes(chain.capability.slug if chain.capability else None, answer)
        if stage in stages.RUNNER_STAGES
        else ([], None)
    )
    run = Run(
        chain=chain,
        stage=stage,
        target=chain.target,
        answer=answer,
        inputs_digest=chain.stage_digests[stage],
        params=runner_stage_params(stage, answer) if stage in stages.RUNNER_STAGES else {},
        probes=probes,
        recipe_version=recipe_version,
        inputs=run_inputs_snapshot(inputs, chain.target),
        requested_by=actor_user(actor),
        rerun_of=rerun_of,
        priority=priority,
        retry=retry,
    )
    run_state_move(run, stages.QUEUED if accepts else stages.PENDING)
    Run.artifacts.through.objects.bulk_create(
        [Run.artifacts.through(run=run, artifact=artifact) for artifact in inputs.artifacts]
    )
    audit_record(
        actor=actor,
        action="run.create",
        obj=run,
        after={"chain": chain.pk, "stage": stage, "state": run.state, "rerun_of": rerun_of and rerun_of.pk},
    )
    if accepts:
        run_send(run)
    return run


def run_rerun(*, actor: Actor, run: Run) -> Run:
    """Run the same stage again on the chain's current inputs (or the target's health job again).

    Preconditions: the actor is a PM (ForbiddenError otherwise); the run has finished (ConflictError while it
    is waiting or running); for a chain stage, the stage before it has passed on the current inputs and no run
    of the stage is waiting or running (ConflictError otherwise).
    """
    if not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM may re-run a stage."))
    if run.state in stages.ACTIVE_STATES:
        raise ConflictError(
            gettext_noop("Run %(run)s is still %(state)s."),
            field="run",
            params={"run": run.pk, "state": Labelled("run_state_word", run.state)},
        )
    if run.chain_id is None:
        new = target_health_check_start(run.target, actor=actor, why=f"a PM re-ran health check run {run.pk}")
        if new is None:
            raise ConflictError(
                gettext_noop("A health check of %(target)s is already waiting or running."),
                field="run",
                params={"target": run.target.slug},
            )
        return new
    with transaction.atomic():
        chain = lock_rows(Chain.objects).select_related("target").get(pk=run.chain_id)
        rows = {stage: (state, latest) for stage, state, latest in chain_stages(chain)}
        previous = stages.stage_before(run.stage)
        if previous is not None and rows[previous][0] != stages.PASSED:
            raise ConflictError(
                gettext_noop(
                    "%(previous)s has not passed on the current inputs (%(state)s): %(stage)s runs only after it."
                ),
                field="run",
                params={
                    "previous": Labelled("stage", previous),
                    "state": Labelled("run_state_word", rows[previous][0]),
                    "stage": Labelled("stage", run.stage),
                },
            )
        latest = rows[run.stage][1]
        if latest is not None and latest.state in stages.ACTIVE_STATES:
            raise ConflictError(
                gettext_noop("Run %(run)s of this stage is already %(state)s."),
                field="run",
                params={"run": latest.pk, "state": Labelled("run_state_word", latest.state)},
            )
        # A PM's re-run goes before the target's backlog.
        return run_create(chain=chain, stage=run.stage, actor=actor, rerun_of=run, priority=stages.PRIORITY_RERUN)


def run_retry_after_error(run: Run, chain: Chain) -> bool:
    """Run a chain's runner stage again after `run` ended in an infrastructure error: a new run, one more
    `retry`, before the target's backlog, while ACCEPTANCE_RUN_ERROR_RETRIES allow. True when it was queued;
    False when the retries are used up or the chain moved on (another answer, other inputs for the stage, or a
    newer run of it), and then the error stands and is told.

    Precondition: this transaction holds the chain's row lock (`run_lock` takes it before the run's).
    """
    if run.retry >= settings.ACCEPTANCE_RUN_ERROR_RETRIES:
        return False
    if chain.answer_id != run.answer_id or chain.stage_digests.get(run.stage) != run.inputs_digest:
        return False
    if Run.objects.filter(chain=chain, stage=run.stage, pk__gt=run.pk).exists():
        return False
    new = run_create(chain=chain, stage=run.stage, rerun_of=run, priority=stages.PRIORITY_RERUN, retry=run.retry + 1)
    audit_record(
        actor=SYSTEM,
        action="run.retry",
        obj=new,
        after={
            "errored_run": run.pk,
            "retry": new.retry,
            "retries": settings.ACCEPTANCE_RUN_ERROR_RETRIES,
            "reason": run.reason[:500],
        },
    )
    return True
