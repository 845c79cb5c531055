"""The run state table and its one writer: every move the table allows works and writes what goes with it;
every other move is refused and changes nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from acceptance import stages
from acceptance.models import Run, RunResult
from acceptance.protocol import StageOutcome
from acceptance.run_states import RUN_INITIAL_STATES, RUN_MOVES_AFTER_LEASE, RUN_TRANSITIONS
from acceptance.services.runs.state import RunStateError, run_state_move
from acceptance.services.targets import target_ensure_simulator
from calculet.db import lock_rows
from calculet.models import AuditEntry

VERDICT_OF_STATE = {state: verdict for verdict, state in stages.VERDICT_STATES.items()}
LEGAL = [(None, state) for state in sorted(RUN_INITIAL_STATES)] + [
    (current, state) for current, targets in RUN_TRANSITIONS.items() for state in sorted(targets)
]
ILLEGAL = [
    (current, state) for current in [None, *stages.STATES] for state in stages.STATES if (current, state) not in LEGAL
]


def test_the_table_is_the_one_docs_acceptance_md_draws():
    pending, queued, running = stages.PENDING, stages.QUEUED, stages.RUNNING
    assert set(LEGAL) == {
        (None, queued),
        (None, pending),
        (pending, queued),
        (pending, stages.ERROR),
        (pending, stages.STALE),
        *[(queued, state) for state in (running, pending, stages.ERROR, stages.STALE)],
        *[(running, state) for state in (*stages.VERDICT_STATES.values(), stages.STALE, running, queued, pending)],
    }
    assert set(RUN_TRANSITIONS) == set(stages.STATES)
    assert {(running, running), (running, queued), (running, pending)} == RUN_MOVES_AFTER_LEASE


def new_run(target) -> Run:
    return Run(stage=stages.HEALTH, target=target, inputs_digest="")


def stored_run(target, state: str, *, lease_live: bool = False) -> Run:
    """A health run (it needs no chain) stored in `state`; a running one holds attempt 1 on worker w1, with its
    lease expired unless `lease_live`."""
    verdict = VERDICT_OF_STATE.get(state, "")
    now = timezone.now()
    running = state == stages.RUNNING
    lease = now + timedelta(minutes=5) if lease_live else now - timedelta(seconds=1)
    run = Run.objects.create(
        stage=stages.HEALTH,
        target=target,
        inputs_digest="",
        state=state,
        verdict=verdict,
        attempt=1 if running or verdict else 0,
        worker="w1" if running else "",
        lease_expires_at=lease if running else None,
        send_count=1,
    )
    return lock_rows(Run.objects).get(pk=run.pk)


def move_arguments(state: str) -> dict:
    if state in VERDICT_OF_STATE:
        return {"outcome": StageOutcome(VERDICT_OF_STATE[state], f"ended {state}"), "worker": "w1"}
    return {"worker": "w2", "reason": "the chain's inputs changed"}


def row(run_id: int) -> dict:
    return Run.objects.filter(pk=run_id).values().get()


@pytest.mark.parametrize(("current", "state"), LEGAL)
def test_every_move_in_the_table_works_and_writes_what_goes_with_it(db, current, state):
    target = target_ensure_simulator()
    run = new_run(target) if current is None else stored_run(target, current)
    before = {"attempt": run.attempt, "send_count": run.send_count}
    audit_rows = AuditEntry.objects.count()

    run_state_move(run, state, **move_arguments(state))

    stored = Run.objects.get(pk=run.pk)
    assert stored.state == state
    if state == stages.QUEUED:
        assert stored.sent_at is not None and stored.lease_expires_at is None
        assert stored.send_count == before["send_count"] + 1
        assert ("expired; sent again" in stored.log) == (current == stages.RUNNING)
    elif state == stages.PENDING:
        assert stored.lease_expires_at is None and stored.send_count == before["send_count"]
    elif state == stages.RUNNING:
        assert (stored.attempt, stored.worker, stored.progress) == (before["attempt"] + 1, "w2", 0)
        assert stored.lease_expires_at > timezone.now() and stored.started_at is not None
    elif state == stages.STALE:
        assert stored.finished_at is not None and stored.lease_expires_at is None
        assert stored.reason == "the chain's inputs changed"
    else:
        verdict = VERDICT_OF_STATE[state]
        assert (stored.verdict, stored.reason, stored.lease_expires_at) == (verdict, f"ended {state}", None)
        assert stored.finished_at is not None
        assert list(RunResult.objects.filter(run=run).values_list("attempt", "verdict")) == [(run.attempt, verdict)]
        assert AuditEntry.objects.filter(action="run.finish", object_id=str(run.pk)).count() == 1
        assert (stored.progress == 100) == (verdict == stages.PASS)
    if state not in VERDICT_OF_STATE:
        assert AuditEntry.objects.count() == audit_rows
        assert not RunResult.objects.filter(run=run).exists()


@pytest.mark.parametrize(("current", "state"), ILLEGAL)
def test_every_other_move_is_refused_and_changes_nothing(db, current, state):
    target = target_ensure_simulator()
    runs, audit_rows = Run.objects.count(), AuditEntry.objects.count()
    if current is None:
        with pytest.raises(RunStateError, match=f"no move for a new run to {state}"):
            run_state_move(new_run(target), state, **move_arguments(state))
        assert Run.objects.count() == runs
        return
    run = stored_run(target, current)
    runs, before = Run.objects.count(), row(run.pk)

    with pytest.raises(RunStateError, match=f"no move for run {run.pk} from {current} to {state}"):
        run_state_move(run, state, **move_arguments(state))

    assert row(run.pk) == before
    assert (Run.objects.count(), AuditEntry.objects.count()) == (runs, audit_rows)
    assert not RunResult.objects.filter(run=run).exists()


@pytest.mark.parametrize(("current", "state"), sorted(RUN_MOVES_AFTER_LEASE))
def test_a_live_lease_keeps_a_running_run_with_its_attempt(db, current, state):
    run = stored_run(target_ensure_simulator(), current, lease_live=True)
    before = row(run.pk)
    with pytest.raises(RunStateError, match="held by attempt 1 until its lease expires"):
        run_state_move(run, state, worker="w2")
    assert row(run.pk) == before


@pytest.mark.parametrize("state", [stages.PASSED, stages.STALE])
def test_the_holder_s_verdict_and_staleness_need_no_expired_lease(db, state):
    run = stored_run(target_ensure_simulator(), stages.RUNNING, lease_live=True)
    run_state_move(run, state, **move_arguments(state))
    assert Run.objects.get(pk=run.pk).state == state


@pytest.mark.parametrize(
    ("state", "outcome"),
    [
        (stages.PASSED, None),
        (stages.PASSED, StageOutcome(stages.FAIL, "golden mismatch")),
        (stages.ERROR, StageOutcome(stages.PASS, "ok")),
        (stages.STALE, StageOutcome(stages.PASS, "ok")),
    ],
)
def test_a_verdict_state_needs_the_outcome_that_gives_it(db, state, outcome):
    run = stored_run(target_ensure_simulator(), stages.RUNNING)
    before = row(run.pk)
    with pytest.raises(RunStateError, match="only with a verdict that says so"):
        run_state_move(run, state, outcome=outcome, worker="w1")
    assert row(run.pk) == before
    assert not RunResult.objects.filter(run=run).exists()
