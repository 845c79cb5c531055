"""Targets: heartbeats and health, and the commands operators run."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, Run, Target
from acceptance.services import chain_start_for_answer, runs_sweep, target_register
from acceptance.services.targets import target_heartbeat, targets_health_check
from calculet.actors import SYSTEM
from calculet.errors import DomainError
from calculet.models import AuditEntry


def test_a_silent_worker_takes_its_target_offline_and_a_heartbeat_brings_it_back(simulator_online, settings):
    assert simulator_online.health == Target.OK
    silent_since = timezone.now() - timedelta(seconds=settings.ACCEPTANCE_TARGET_OFFLINE_AFTER + 5)
    Target.objects.filter(pk=simulator_online.pk).update(last_heartbeat_at=silent_since)
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
        actor=SYSTEM, slug="board-off", kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c", runner_command="board-runner --device 0",
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
        ({"runner_command": ""}, "runner_command"),
        ({"runner_command": " "}, "runner_command"),
        ({"kind": Target.SIMULATOR, "runner_command": "board-runner"}, "runner_command"),
    ],
)
def test_target_registration_refuses_bad_input(db, changes, field):
    values = {
        "slug": "board-2", "kind": Target.HARDWARE, "calrt_version": "0.7.6", "driver_version": "2.3.0",
        "firmware_version": "1.8.0", "chip": "calculet-2c", "runner_command": "board-runner",
    }  # fmt: skip
    values.update(changes)
    with pytest.raises(DomainError) as error:
        target_register(actor=SYSTEM, **values)
    assert error.value.field == field
    assert not Target.objects.exists()


def test_serve_target_registers_the_host_and_names_its_worker_command(db, capsys):
    call_command(
        "serve_target", "board-7", "--kind", "hardware", "--calrt", "0.7.6", "--driver", "2.3.0", "--firmware", "1.8.0",
        "--chip", "calculet-2c", "--runner-command", "board-runner --device 0", "--dry-run",
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
        actor=SYSTEM, slug="board-3", kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c", runner_command="board-runner --device 0",
    )  # fmt: skip
    call_command("start_chains")
    assert sorted(Chain.objects.values_list("target__slug", flat=True)) == ["board-3", "simulator"]
    assert Run.objects.get(target__slug="board-3").state == stages.PENDING
    call_command("sweep_runs", "--resend-after", "3600")
    assert "requeued 0" in capsys.readouterr().out


def test_a_hardware_target_without_a_runner_command_refuses_to_start_from_every_entry_point(
    db, client, settings, capsys
):
    settings.ACCEPTANCE_RUNNER_COMMAND = ""
    with pytest.raises(CommandError, match="runner_command: A hardware target needs the command of its hardware"):
        call_command(
            "serve_target", "board-8", "--calrt", "0.7.6", "--driver", "2.3.0", "--firmware", "1.8.0",
            "--chip", "calculet-2c", "--dry-run",
        )  # fmt: skip
    assert not Target.objects.filter(slug="board-8").exists()

    admin_user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin_user)
    response = client.post(
        "/admin/acceptance/target/add/",
        {
            "slug": "board-9",
            "name": "board 9",
            "kind": Target.HARDWARE,
            "queue": "board-9",
            "calrt_version": "0.7.6",
            "driver_version": "2.3.0",
            "firmware_version": "1.8.0",
            "chip": "calculet-2c",
            "runner_command": "",
        },  # fmt: skip
        follow=True,
    )
    assert "Not saved — runner_command: A hardware target needs the command" in response.content.decode()
    assert not Target.objects.filter(slug="board-9").exists()


def test_a_hardware_target_stored_without_a_runner_takes_no_runs_and_its_runs_end_in_error(answer, simulator_online):
    """A target registered before the rule (no command): it is degraded, runs wait, and a run that reaches a
    worker anyway ends in error without running the simulator in its place."""
    from acceptance.services.runs.reporting import RunReporter
    from acceptance.services.runs.running import runner_execute

    board = Target.objects.create(
        slug="old-board", name="old board", kind=Target.HARDWARE, queue="old-board", calrt_version="0.7.6",
        driver_version="2.3.0", firmware_version="1.8.0", chip="calculet-2c",
    )  # fmt: skip
    target_heartbeat(queues=["old-board"], worker="board-host")
    board.refresh_from_db()
    assert board.health == Target.DEGRADED and "no hardware runner command" in board.health_reason
    chain_start_for_answer(answer.pk)
    claim = Chain.objects.get(answer=answer, target=board).runs.get()
    assert claim.state == stages.PENDING
    run = Run.objects.create(stage=stages.HEALTH, target=board, state=stages.RUNNING, attempt=1, inputs_digest="")
    outcome = runner_execute(run, RunReporter(run))
    assert outcome.verdict == stages.ERROR
    assert [f["code"] for f in outcome.findings] == ["no_hardware_runner"]
    assert "never falls back to the bundled simulator" in outcome.reason
