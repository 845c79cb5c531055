"""Targets: heartbeats and health, and the commands operators run."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, Run, Target
from acceptance.services import chain_start_for_answer, runs_sweep, target_register
from acceptance.services.targets import target_heartbeat, targets_health_check
from calculet.errors import DomainError
from calculet.models import AuditEntry


def test_a_silent_worker_takes_its_target_offline_and_a_heartbeat_brings_it_back(simulator_online):
    assert simulator_online.health == Target.OK
    Target.objects.filter(pk=simulator_online.pk).update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    runs_sweep()
    simulator_online.refresh_from_db()
    assert simulator_online.health == Target.OFFLINE
    assert "no worker heartbeat" in simulator_online.health_reason
    target_heartbeat(queues=["simulator", "default"], worker="sim@host")
    simulator_online.refresh_from_db()
    assert (simulator_online.health, simulator_online.last_heartbeat_worker) == (Target.OK, "sim@host")
    assert AuditEntry.objects.filter(action="target.health").count() >= 2


def test_the_periodic_health_job_queues_one_health_run_per_served_target(simulator_online):
    target_register(
        actor="ops", slug="board-off", kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c",
    )  # fmt: skip
    started = targets_health_check()
    assert [run.target.slug for run in started] == ["simulator"]  # no worker serves board-off
    assert targets_health_check() == []  # one is already waiting


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"slug": "Bad Slug"}, "slug"),
        ({"kind": "fpga"}, "kind"),
        ({"chip": " "}, "chip"),
        ({"slug": "default"}, "slug"),
    ],
)
def test_target_registration_refuses_bad_input(db, changes, field):
    values = {
        "slug": "board-2", "kind": Target.HARDWARE, "calrt_version": "0.7.6", "driver_version": "2.3.0",
        "firmware_version": "1.8.0", "chip": "calculet-2c",
    }  # fmt: skip
    values.update(changes)
    with pytest.raises(DomainError) as error:
        target_register(actor="ops", **values)
    assert error.value.field == field
    assert not Target.objects.exists()


def test_serve_target_registers_the_host_and_names_its_worker_command(db, capsys):
    call_command(
        "serve_target", "board-7", "--kind", "hardware", "--calrt", "0.7.6", "--driver", "2.3.0", "--firmware", "1.8.0",
        "--chip", "calculet-2c", "--dry-run",
    )  # fmt: skip
    out = capsys.readouterr().out
    target = Target.objects.get(slug="board-7")
    assert (target.kind, target.queue, target.health) == (Target.HARDWARE, "board-7", Target.OFFLINE)
    assert "celery -A calculet worker --queues board-7 --pool prefork --concurrency 1" in out
    call_command("serve_target", "board-7", "--firmware", "1.9.0", "--dry-run")
    target.refresh_from_db()
    assert (target.firmware_version, target.calrt_version) == ("1.9.0", "0.7.6")


def test_sweep_runs_and_start_chains_commands(answer, simulator_online, capsys):
    chain_start_for_answer(answer.pk)
    target_register(
        actor="ops", slug="board-3", kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c",
    )  # fmt: skip
    call_command("start_chains")
    assert sorted(Chain.objects.values_list("target__slug", flat=True)) == ["board-3", "simulator"]
    assert Run.objects.get(target__slug="board-3").state == stages.PENDING
    call_command("sweep_runs", "--resend-after", "3600")
    assert "requeued 0" in capsys.readouterr().out
