"""`ops_status` lists what an operator must look at: stuck runs and targets that take no runs."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, Target
from acceptance.services import chain_start_for_answer, runs_sweep
from calculet.models import JobRun
from tests.factories import make_run


@pytest.fixture
def chain(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer, target=simulator_online)


@pytest.fixture
def swept(db):
    runs_sweep()


def test_all_quiet_when_runs_move_and_targets_are_healthy(chain, swept, capsys):
    JobRun.objects.filter(name="sweeper").update(finished_at=timezone.now() - timedelta(seconds=30))
    call_command("ops_status")
    out = capsys.readouterr().out
    assert "no stuck runs; every target healthy; the sweeper runs (last finished 30 s ago, at " in out


def test_a_sweeper_that_stopped_is_reported_and_exits_non_zero(chain, swept, capsys, settings):
    settings.ACCEPTANCE_SWEEP_STALE_AFTER = 60
    JobRun.objects.filter(name="sweeper").update(finished_at=timezone.now() - timedelta(minutes=5))
    with pytest.raises(CommandError, match=r"0 stuck run\(s\), 0 unhealthy target\(s\), the sweeper stopped"):
        call_command("ops_status")
    assert "sweeper: the sweeper last finished 300 s ago" in capsys.readouterr().out


def test_lists_stuck_runs_and_unhealthy_targets_and_exits_non_zero(chain, capsys):
    now = timezone.now()
    lost_message = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=now - timedelta(minutes=10))
    lost_lease = make_run(chain, stages.GOLDEN, stages.RUNNING, attempt=1, lease_expires_at=now - timedelta(minutes=1))
    Target.objects.filter(pk=chain.target_id).update(maintenance=True)

    with pytest.raises(CommandError, match="2 stuck run"):
        call_command("ops_status")

    out = capsys.readouterr().out
    sent = lost_message.sent_at
    assert f"stuck run {lost_message.pk}: V18 runner on simulator, queued since {sent:%Y-%m-%d %H:%M:%S}" in out
    lease = lost_lease.lease_expires_at
    assert (
        f"stuck run {lost_lease.pk}: V18 golden on simulator, running, its lease expired at {lease:%Y-%m-%d %H:%M:%S}"
    ) in out
    assert "target simulator (simulator, queue simulator): maintenance" in out


def test_a_backlog_behind_a_busy_worker_is_not_stuck(chain, swept, capsys):
    now = timezone.now()
    make_run(chain, stages.FAILURE, stages.RUNNING, attempt=1, lease_expires_at=now + timedelta(minutes=1))
    waiting = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=now - timedelta(minutes=10))

    call_command("ops_status")

    assert f"stuck run {waiting.pk}" not in capsys.readouterr().out


def test_a_silent_worker_is_seen_at_read_time_whatever_health_was_stored(chain, capsys):
    """The stored health is refreshed only by the sweeper; with beat down too it would read ok for ever."""
    now = timezone.now()
    silent_since = now - timedelta(seconds=settings.ACCEPTANCE_TARGET_OFFLINE_AFTER + 5)
    Target.objects.filter(pk=chain.target_id).update(health=Target.OK, last_heartbeat_at=silent_since)
    make_run(chain, stages.FAILURE, stages.RUNNING, attempt=1, lease_expires_at=now + timedelta(minutes=1))
    waiting = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=now - timedelta(minutes=10))

    with pytest.raises(CommandError, match="1 stuck run.*1 unhealthy target"):
        call_command("ops_status")

    out = capsys.readouterr().out
    assert f"stuck run {waiting.pk}" in out
    assert "target simulator (simulator, queue simulator): offline" in out
