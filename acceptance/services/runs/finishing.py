"""Finishing a run: the one verdict of the attempt that holds it, the evidence a runner stage's verdict is,
and what follows — the chain's next stage after a pass, or the target's health after a health job."""

import functools
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, Run
from acceptance.protocol import VERSION_KEYS, StageOutcome, device_attested
from acceptance.services.chains import chain_advance, run_retry_after_error
from acceptance.services.inputs import AnswerInputs
from acceptance.services.locking import run_lock
from acceptance.services.promotion import capability_reverify
from acceptance.services.runs.reporting import RunReporter
from acceptance.services.runs.state import run_state_move
from acceptance.services.targets import target_after_run, target_health_record
from calculet.actors import SYSTEM
from evidence.grades import status_rank
from evidence.models import EvidenceItem
from evidence.services import evidence_record
from vendor import events
from vendor.models import Artifact
from vendor.services.notifications import notify_on_commit

# A verdict transaction that fails on a database error (a deadlock, a serialization failure, a dropped
# connection, a database that is down) is tried again here for as long as the attempt holds the run's lease,
# pausing a little longer each time up to a heartbeat: given up earlier, the message would go back to the
# broker and the stage would run again.
VERDICT_RETRY_PAUSE_SECONDS = 0.5

logger = logging.getLogger(__name__)

# An error these findings, or this refusal, name is the job's or the target's registration's: it would end the
# same way on every try, so it is told at once rather than retried.
SAME_ON_EVERY_TRY_FINDINGS = frozenset({"no_hardware_runner", "version_mismatch", "device_unreported"})
RUNNER_REFUSED_THE_JOB = "the runner refused the job (exit 2)"


def infrastructure_error(outcome: StageOutcome) -> bool:
    """Whether an outcome is an infrastructure error, worth another try: an `error` because the runner, the
    board or the agent broke (a crash, a limit, a broken result, inputs that could not be fetched, the worker's
    own failure) — not the runner's refusal of the job (exit 2) nor a target that is not as registered or has
    no runner."""
    if outcome.verdict != stages.ERROR or outcome.reason.startswith(RUNNER_REFUSED_THE_JOB):
        return False
    return not any(finding.get("code") in SAME_ON_EVERY_TRY_FINDINGS for finding in outcome.findings)


def run_finish(
    claimed: Run, *, worker: str, outcome: StageOutcome, reporter: RunReporter, inputs: AnswerInputs | None = None
) -> bool:
    """Write the verdict of the attempt that claimed the run; False (and nothing written) when the run is no
    longer that attempt's: it was made stale, or another attempt took it over after this one lost its lease.

    A pass moves the chain on in the same transaction: the next stage is written `queued` with the verdict.
    A database error rolls the transaction back and it is tried again until the attempt's lease (as last
    renewed) expires, the error raised after the last try; called inside an outer transaction, it is tried
    once.
    """
    finish = functools.partial(
        _finish_in_transaction, claimed, worker=worker, outcome=outcome, reporter=reporter, inputs=inputs
    )
    if connection.in_atomic_block:
        return finish()
    lease_expires_at = reporter.lease_expires_at if reporter is not None else claimed.lease_expires_at
    tries = 0
    while True:
        tries += 1
        try:
            return finish()
        except (OperationalError, InterfaceError) as error:
            pause = min(VERDICT_RETRY_PAUSE_SECONDS * tries, settings.ACCEPTANCE_RUN_HEARTBEAT_SECONDS)
            if lease_expires_at is None or timezone.now() + timedelta(seconds=pause) >= lease_expires_at:
                logger.error("run %s: the verdict transaction failed %s times, until its lease", claimed.pk, tries)
                raise
            logger.warning("run %s: the verdict transaction failed (%s); trying again", claimed.pk, error)
            connection.close_if_unusable_or_obsolete()
            time.sleep(pause)


def _finish_in_transaction(
    claimed: Run, *, worker: str, outcome: StageOutcome, reporter: RunReporter, inputs: AnswerInputs | None
) -> bool:
    with transaction.atomic():
        run = run_lock(claimed.pk)  # the lock order: question and chain, or target, before the run
        if run is None or run.state != stages.RUNNING or run.attempt != claimed.attempt:
            return False
        chain = None
        if run.chain_id:
            chain = Chain.objects.select_related("question", "target", "capability").get(pk=run.chain_id)
        _finish_locked(run, outcome, worker, reporter=reporter, chain=chain, inputs=inputs)
    return True


def run_give_up(run: Run, worker: str) -> None:
    """End a run whose attempts are used up as an infrastructure error rather than loop on a poison run.

    Precondition: this transaction holds the run's row lock, taken by `run_lock`; it is queued, or running
    with an expired lease.
    """
    outcome = StageOutcome(
        stages.ERROR,
        f"infrastructure error: the run was started {run.attempt} times and each time its worker was lost "
        "before a verdict; it is not retried again",
    )
    _finish_locked(run, outcome, worker, retry=False)


def run_time_out(run: Run, why: str) -> None:
    """End a chain run that waited longer than ACCEPTANCE_RUN_QUEUE_TIMEOUT for a target that cannot take it,
    as an error saying `why` (a sentence); it is not retried and the team is told.

    Precondition: this transaction holds the run's row lock, taken by `run_lock`; it is pending or queued.
    """
    _finish_locked(run, StageOutcome(stages.ERROR, why), "sweeper", retry=False, check_target=False)


def _finish_locked(
    run: Run,
    outcome: StageOutcome,
    worker: str,
    *,
    reporter: RunReporter | None = None,
    chain: Chain | None = None,
    inputs: AnswerInputs | None = None,
    retry: bool = True,
    check_target: bool = True,
) -> None:
    """The verdict and what follows it. A chain's runner stage that ended in an infrastructure error
    (`infrastructure_error`) is, with `retry`, run again as a new run while ACCEPTANCE_RUN_ERROR_RETRIES allow
    (`run_retry_after_error`): only an error that is not retried is told to the team. With `check_target`,
    the target's health check is started after commit, after any runner-stage run: at once when it ended in
    error, otherwise when the check is due."""
    fields = reporter.final_fields(run) if reporter is not None else []
    if run.stage in stages.RUNNER_STAGES and outcome.verdict in (stages.PASS, stages.FAIL) and chain is not None:
        run.evidence = _evidence_for_run(run, chain, outcome)
        fields.append("evidence")
    run_state_move(run, stages.VERDICT_STATES[outcome.verdict], worker=worker, outcome=outcome, fields=fields)
    runner_stage = run.stage in stages.RUNNER_STAGES and run.chain_id is not None
    if run.stage == stages.HEALTH:
        target_health_record(run.target, run)
    elif chain is not None and outcome.verdict == stages.PASS:
        chain_advance(chain, inputs=inputs if chain.answer_id == run.answer_id else None)
    elif outcome.verdict != stages.PASS and run.chain is not None and run.answer is not None:
        retried = retry and runner_stage and infrastructure_error(outcome) and run_retry_after_error(run, run.chain)
        if not retried:
            _tell_failure(run, run.chain, run.answer, outcome)
            _reverify_on_commit(run, run.chain, outcome)
    if runner_stage and check_target:
        target_id, errored = run.target_id, run.pk if outcome.verdict == stages.ERROR else None
        transaction.on_commit(lambda: target_after_run(target_id, errored_run=errored))


def _reverify_on_commit(run: Run, chain: Chain, outcome: StageOutcome) -> None:
    """A chain's stage failed or could not run: if its capability stands above C3, the system checks that the
    current evidence still supports it, and demotes it if not (`capability_reverify`)."""
    capability = chain.capability
    if capability is None or status_rank(capability.status) >= status_rank("C3"):
        return
    cause = f"run {run.pk} ({run.stage} on {run.target.slug}) ended {outcome.verdict}: {outcome.reason[:300]}"
    transaction.on_commit(lambda: capability_reverify(capability, cause=cause))


def _tell_failure(run: Run, chain: Chain, answer, outcome: StageOutcome) -> None:
    """A chain's run failed or erred: its question's people and the vendor whose answer ran are told."""
    notify_on_commit(
        events.RUN_FAILED,
        actor=SYSTEM,
        organisation_id=answer.organisation_id,
        question_id=chain.question_id,
        data={
            "run": run.pk,
            # Codes: the e-mail, the notifications page and the webhook show them in their reader's language.
            "stage": run.stage,
            "verdict": outcome.verdict,
            "target": run.target.name,
            "detail": outcome.reason[:500],
        },
    )


def _evidence_for_run(run: Run, chain: Chain, outcome: StageOutcome) -> EvidenceItem | None:
    """A runner stage's pass or fail is evidence about the chain's capability, graded by what was checked: E0
    only when measured on a board that reported itself (identity and versions matching the target's
    registration, not a test double); E4 otherwise — the simulator, or a double of a board, is a model of
    the device."""
    capability = chain.capability
    if capability is None:
        return None
    grade = "E0" if device_attested(outcome.result, run.target.kind) else "E4"
    passed_or_failed = "passed" if outcome.verdict == stages.PASS else "failed"
    calbin = next((a for a in run.inputs.get("artifacts", []) if a["kind"] == Artifact.CALBIN), None)
    calbin_note = f" with {calbin['file_name']} {calbin['version']}" if calbin else ""
    # An agent's result names the host it registered: the physical machine the evidence came from.
    host = (outcome.result.get("agent") or {}).get("host", "")
    host_note = f" (host {host})" if host else ""
    return evidence_record(
        origin=EvidenceItem.RUN,
        grade=grade,
        conclusion=(
            f"{stages.STAGE_LABELS[run.stage]} {passed_or_failed} on {run.target.name} ({run.target.kind})"
            f"{host_note}{calbin_note}."
        ),
        organisation=run.answer.organisation if run.answer else None,
        capabilities=[capability],
        versions=_run_versions(run, outcome),
        deliverable=run.answer.deliverable if run.answer else None,
        code_prefix=f"RUN-{run.pk}",
        source_text=f"acceptance run {run.pk}, answer {run.answer_id}, target {run.target.slug}{host_note}",
        explanation=outcome.reason,
    )


def _run_versions(run: Run, outcome: StageOutcome) -> dict[str, str]:
    """The versions the device reported (checked against the target's registration before a verdict stands),
    else the target's as the run was sent with them."""
    reported = outcome.result.get("device") or run.inputs.get("target", {})
    return {key: str(reported[key]) for key in VERSION_KEYS if reported.get(key)}
