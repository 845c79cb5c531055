"""The one writer of `Run.state`. Every move of a run (its creation included) goes through `run_state_move`,
which checks it against `acceptance.run_states` and writes the fields that go with it."""

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from acceptance import stages
from acceptance.models import Run, RunResult
from acceptance.protocol import StageOutcome
from acceptance.run_states import RUN_MOVES_AFTER_LEASE, run_can_move
from calculet.actors import SYSTEM
from calculet.audit import audit_record
from calculet.errors import ConflictError


class RunStateError(ConflictError):
    """A move of a run's state that `acceptance.run_states` does not allow. Nothing was written."""


def _check(run: Run, current: str | None, state: str, outcome: StageOutcome | None, now: datetime) -> None:
    if not run_can_move(current, state):
        where = f"run {run.pk} from {current}" if current else "a new run"
        raise RunStateError(
            gettext_noop("The run state table has no move for %(where)s to %(state)s."),
            field="state",
            params={"where": where, "state": state},
        )
    if (current, state) in RUN_MOVES_AFTER_LEASE and run.lease_expires_at and run.lease_expires_at > now:
        raise RunStateError(
            gettext_noop("Run %(run)s is held by attempt %(attempt)s until its lease expires."),
            field="state",
            params={"run": run.pk, "attempt": run.attempt},
        )
    verdict_state = stages.VERDICT_STATES[outcome.verdict] if outcome is not None else None
    if (state in stages.VERDICT_STATES.values() or outcome is not None) and verdict_state != state:
        raise RunStateError(
            gettext_noop("Run %(run)s ends %(state)s only with a verdict that says so."),
            field="state",
            params={"run": run.pk, "state": state},
        )


def run_state_move(
    run: Run,
    state: str,
    *,
    worker: str = "",
    reason: str = "",
    outcome: StageOutcome | None = None,
    fields: Iterable[str] = (),
) -> Run:
    """Move `run` to `state` and save it, with the fields that go with the move, in one write.

    Preconditions: `run` is new (not saved yet), or was read under the row lock this transaction holds; the
    move is in `acceptance.run_states.RUN_TRANSITIONS`; a move that takes a running run from its attempt comes
    after that attempt's lease expired (RunStateError otherwise, and nothing is written). With each move:

    - queued or pending from anything else: waiting since now (`waiting_since`; coming from running, since the
      lost attempt's lease lapsed)
    - queued: sent now (`sent_at`, `send_count` + 1); coming from running, the expired lease is logged
    - pending: no lease
    - running: a new attempt by `worker`, with a fresh lease, `started_at` now, its progress reset and its
      time split begun with how long it waited to be claimed
    - stale: finished now, for `reason`
    - passed, failed, error: the `outcome` the attempt holding the run reached on `worker`: its RunResult
      (one per attempt, so a verdict is written once), the verdict's fields, and the `run.finish` audit row

    `fields` names fields the caller set on `run` to be saved in the same write (the last output, evidence).
    """
    previous = None if run._state.adding else run.state
    now = timezone.now()
    _check(run, previous, state, outcome, now)
    changed = ["state", *fields]
    if state in stages.WAITING_STATES and previous not in stages.WAITING_STATES:
        # Sent back from an attempt that lost its lease: it has been free to claim since the lease lapsed.
        run.waiting_since = (run.lease_expires_at if previous == stages.RUNNING else None) or now
        changed.append("waiting_since")
    if state == stages.QUEUED:
        if previous == stages.RUNNING:
            run.log += f"\n[calculet] the lease of attempt {run.attempt} on {run.worker} expired; sent again\n"
            changed.append("log")
        run.sent_at, run.send_count, run.lease_expires_at = now, run.send_count + 1, None
        changed += ["sent_at", "send_count", "lease_expires_at"]
    elif state == stages.PENDING:
        run.lease_expires_at = None
        changed.append("lease_expires_at")
    elif state == stages.RUNNING:
        # Free to claim since it began to wait, or (taken straight from the attempt that lost it) since that
        # attempt's lease lapsed.
        free_since = (run.lease_expires_at if previous == stages.RUNNING else run.waiting_since) or run.created_at
        run.timing = {"queue_wait": round(max(0.0, (now - free_since).total_seconds()), 3)}
        changed.append("timing")
        run.attempt += 1
        run.worker = worker[:200]
        run.started_at = now
        run.lease_expires_at = now + timedelta(seconds=settings.ACCEPTANCE_RUN_LEASE_SECONDS)
        run.progress, run.progress_text = 0, ""
        changed += ["attempt", "worker", "started_at", "lease_expires_at", "progress", "progress_text"]
        if run.attempt > 1:
            run.log += f"\n[calculet] attempt {run.attempt} on {worker}: the previous attempt's worker was lost\n"
            changed.append("log")
    elif state == stages.STALE:
        run.lease_expires_at, run.finished_at, run.reason = None, now, reason
        changed += ["lease_expires_at", "finished_at", "reason"]
    elif outcome is not None:  # a verdict state; _check made sure the outcome is the one that gives it
        RunResult.objects.create(run=run, attempt=run.attempt, verdict=outcome.verdict, worker=worker[:200])
        run.verdict, run.reason, run.findings = outcome.verdict, outcome.reason, outcome.findings
        run.metrics, run.result = outcome.metrics, outcome.result
        run.finished_at, run.lease_expires_at = now, None
        changed += ["verdict", "reason", "findings", "metrics", "result", "finished_at", "lease_expires_at"]
        if outcome.verdict == stages.PASS:
            run.progress = 100
            changed.append("progress")
    run.state = state
    if previous is None:
        run.save()
    else:
        run.save(update_fields=list(dict.fromkeys(changed)))
    if outcome is not None:
        audit_record(
            actor=SYSTEM,
            action="run.finish",
            obj=run,
            after={"stage": run.stage, "verdict": run.verdict, "reason": run.reason[:500], "attempt": run.attempt},
        )
    return run
