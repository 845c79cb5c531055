"""`ops_status` lists what an operator must look at: stuck runs and targets that take no runs."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, Run, Target
from acceptance.services import chain_start_for_answer


@pytest.fixture
def chain(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer, target=simulator_online)


def test_all_quiet_when_runs_move_and_targets_are_healthy(chain, capsys):
    call_command("ops_status")
    assert "no stuck runs; every target healthy" in capsys.readouterr().out


def make_run(chain, stage: str, state: str, **fields) -> Run:
    return Run.objects.create(
        chain=chain,
        stage=stage,
        target=chain.target,
        answer=chain.answer,
        state=state,
        inputs_digest=chain.stage_digests[stage],
        **fields,
    )


def test_lists_stuck_runs_and_unhealthy_targets_and_exits_non_zero(chain, capsys):
    now = timezone.now()
    stuck_queued = make_run(chain, stages.RUNNER, stages.QUEUED)
    Run.objects.filter(pk=stuck_queued.pk).update(created_at=now - timedelta(minutes=10))
    lost_lease = make_run(chain, stages.GOLDEN, stages.RUNNING, attempt=1, lease_expires_at=now - timedelta(minutes=1))
    moving = make_run(chain, stages.FAILURE, stages.RUNNING, attempt=1, lease_expires_at=now + timedelta(minutes=1))
    Target.objects.filter(pk=chain.target_id).update(maintenance=True)

    with pytest.raises(CommandError, match="2 stuck run"):
        call_command("ops_status")

    out = capsys.readouterr().out
    assert f"stuck run {stuck_queued.pk}: V18 runner on simulator, queued" in out
    assert f"stuck run {lost_lease.pk}: V18 golden on simulator, running" in out
    assert f"stuck run {moving.pk}:" not in out
    assert "target simulator (simulator, queue simulator): maintenance" in out
