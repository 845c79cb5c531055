"""Boards looked after as a lab does: health checks every N runs and every H hours and after an infrastructure
error, a target out of rotation until one passes, infrastructure errors retried a bounded number of times,
runs that wait too long for a target that cannot take them, and a PM's re-run before the backlog."""

import base64
import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from acceptance import stages
from acceptance.models import Chain, Run, Target
from acceptance.protocol import StageOutcome
from acceptance.services import (
    run_execute,
    runs_sweep,
    target_ensure_simulator,
    target_health_check_start,
    target_set_health_schedule,
    target_set_maintenance,
    targets_health_check,
)
from acceptance.services.agents import target_token_create
from acceptance.services.locking import run_lock
from acceptance.services.runs.claiming import CLAIMED, run_claim
from acceptance.services.runs.finishing import run_finish
from acceptance.services.runs.state import run_state_move
from calculet.actors import SYSTEM
from calculet.errors import DomainError
from calculet.models import AuditEntry
from tests.acceptance.test_agent_api import ENDED_WITH_ERROR, Agent
from tests.factories import answer_draft, complete_answer_data, make_question, make_run, pass_stages
from vendor.models import NotificationEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def simulator(settings):
    settings.ACCEPTANCE_TARGET_OFFLINE_AFTER = 3600
    return target_ensure_simulator()


@pytest.fixture
def agent(simulator):
    """The simulator's agent, polled once: the target is served (and its runs pulled) from now on."""
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="host 1")
    agent = Agent(key)
    assert agent.register().status_code == 200
    assert agent.claim().status_code == 204
    return agent


def chain_for(answer, target: Target) -> Chain:
    """The answer's chain on `target`, its claim and artifact stages passed: its runner stage may run."""
    chain, _ = Chain.objects.get_or_create(
        question=answer.question,
        capability=answer.claim.capability,
        target=target,
        defaults={
            "answer": answer,
            "stage_digests": {stage: f"{n:064x}" for n, stage in enumerate(stages.CHAIN_STAGES, start=1)},
        },
    )
    pass_stages(chain, stages.ARTIFACT)
    return chain


@pytest.fixture
def chain(answer, agent, simulator):
    return chain_for(answer, simulator)


def second_chain(vendor_user, capability, calbin, golden, target) -> Chain:
    from acceptance.services import answer_submit

    question = make_question("V17", organisation=vendor_user.membership.organisation, state="asked")
    capability.questions.add(question)
    capability.deliverables.add(*question.deliverables.all())
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=calbin, golden=golden)),
    )
    return chain_for(answer, target)


def fail_health_check(agent: Agent, simulator: Target) -> Run:
    health = target_health_check_start(simulator)
    claimed = agent.claim().json()
    assert claimed["run"] == health.pk
    assert agent.result(claimed, ENDED_WITH_ERROR).json()["verdict"] == stages.ERROR
    health.refresh_from_db()
    return health


def pass_health_check(agent: Agent, simulator: Target, capture) -> Run:
    health = target_health_check_start(simulator)
    claimed = agent.claim().json()
    assert claimed["run"] == health.pk  # a target out of rotation still takes its health check
    result = {
        "schema_version": 2, "stage": stages.HEALTH, "verdict": "pass", "checks": [], "metrics": {},
        "device": {"kind": "simulator", **simulator.registered_versions()},
    }  # fmt: skip
    report = {**ENDED_WITH_ERROR, "exit_code": 0, "result_file": base64.b64encode(json.dumps(result).encode()).decode()}
    with capture(execute=True):
        assert agent.result(claimed, report).json()["verdict"] == stages.PASS
    health.refresh_from_db()
    return health


def end_attempt(run: Run, verdict: str, reason: str, capture, findings=()) -> Run:
    """Claim the run and end its attempt with `verdict`, as a worker or an agent's result does."""
    status, claimed = run_claim(run.pk, "test-worker")
    assert status == CLAIMED and claimed is not None
    outcome = StageOutcome(verdict, reason, findings=list(findings))
    with capture(execute=True):
        assert run_finish(claimed, worker="test-worker", outcome=outcome, reporter=None)
    run.refresh_from_db()
    return run


def target_api(user, slug="simulator") -> dict:
    http = APIClient()
    http.force_login(user)
    answer = http.get(f"/api/v1/targets/{slug}/")
    assert answer.status_code == 200
    return answer.json()


def test_a_failed_health_check_takes_the_target_out_of_rotation_and_a_pass_brings_it_back(
    agent, simulator, chain, pm_user, django_capture_on_commit_callbacks
):
    health = fail_health_check(agent, simulator)
    shown = target_api(pm_user)
    assert shown["in_rotation"] is False and shown["health"] == Target.DEGRADED
    assert shown["health_reason"] == (
        f"out of rotation until a health check passes: health check run {health.pk} failed: the runner exited with 1"
    )
    page = Client()
    page.force_login(pm_user)
    assert "out of rotation until a health check passes" in page.get("/").content.decode()
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("ops_status", stdout=out)
    assert f"health check run {health.pk} failed: the runner exited with 1" in out.getvalue()

    # Neither the agent nor a Celery worker is given a chain run while the target is out of rotation.
    runner = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=timezone.now())
    assert agent.claim().status_code == 204
    runner.refresh_from_db()
    assert (runner.state, runner.attempt) == (stages.PENDING, 0)
    golden = make_run(chain, stages.GOLDEN, stages.QUEUED, sent_at=timezone.now())
    run_execute(golden.pk, worker="celery-worker")
    golden.refresh_from_db()
    assert (golden.state, golden.attempt) == (stages.PENDING, 0)

    # The beat checks it again at each look while it is out of rotation.
    [again] = targets_health_check()
    why = AuditEntry.objects.get(action="run.create", object_id=str(again.pk)).after["why"]
    assert why == "the last health check failed: the target is out of rotation until one passes"
    again.delete()

    # A passing health check brings it back: its waiting runs are sent and taken.
    pass_health_check(agent, simulator, django_capture_on_commit_callbacks)
    shown = target_api(pm_user)
    assert shown["in_rotation"] is True and shown["health"] == Target.OK and shown["health_reason"] == ""
    runner.refresh_from_db()
    assert runner.state == stages.QUEUED
    claimed = agent.claim()
    assert claimed.status_code == 200 and claimed.json()["run"] == runner.pk
    actions = list(
        AuditEntry.objects.filter(action="target.health_check").order_by("pk").values_list("after", flat=True)
    )
    assert [after["last_health_check_passed"] for after in actions] == [False, True]


def test_an_infrastructure_error_is_retried_as_many_times_as_allowed_and_then_told(
    agent, chain, simulator, settings, django_capture_on_commit_callbacks
):
    settings.ACCEPTANCE_RUN_ERROR_RETRIES = 2
    first = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=timezone.now())
    # The agent could not fetch the inputs: it says so, and the run ends in error.
    claimed = agent.claim().json()
    assert claimed["run"] == first.pk
    fetch_failed = {**ENDED_WITH_ERROR, "exit_code": None, "reason": "the agent could not prepare or start the run"}
    with django_capture_on_commit_callbacks(execute=True):
        assert agent.result(claimed, fetch_failed).json()["verdict"] == stages.ERROR
    run = first
    for retry in (1, 2):
        run.refresh_from_db()
        assert run.verdict == stages.ERROR  # an infrastructure error is an error, never a fail
        again = Run.objects.get(rerun_of=run)
        assert (again.stage, again.retry, again.priority, again.state) == (
            stages.RUNNER, retry, stages.PRIORITY_RERUN, stages.QUEUED,
        )  # fmt: skip
        assert AuditEntry.objects.get(action="run.retry", object_id=str(again.pk)).after["errored_run"] == run.pk
        assert not NotificationEvent.objects.filter(kind="run_failed").exists()  # not yet told: it is retried
        # The board is checked at once after the first error (one check waits at a time).
        health = Run.objects.get(target=simulator, stage=stages.HEALTH, state=stages.QUEUED)
        why = AuditEntry.objects.get(action="run.create", object_id=str(health.pk)).after["why"]
        assert why == f"run {first.pk} ended in an infrastructure error"
        run = end_attempt(
            again, stages.ERROR, "the runner exited with -11: segmentation fault", django_capture_on_commit_callbacks
        )
    assert not Run.objects.filter(rerun_of=run).exists()  # the bound: no third retry
    event = NotificationEvent.objects.get(kind="run_failed")
    assert (event.data["run"], event.data["verdict"]) == (run.pk, stages.ERROR)
    assert Run.objects.filter(chain=chain, stage=stages.RUNNER).count() == 3


@pytest.mark.parametrize(
    ("reason", "findings"),
    [
        ("the runner refused the job (exit 2): unknown scenario", []),
        ("the device is not the target as registered: calrt 0.7.7", [{"code": "version_mismatch"}]),
        ("board-1 is a hardware target with no hardware runner command registered", [{"code": "no_hardware_runner"}]),
    ],
)
def test_an_error_that_would_end_the_same_way_again_is_told_at_once(
    chain, simulator, reason, findings, django_capture_on_commit_callbacks
):
    run = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=timezone.now())
    run = end_attempt(run, stages.ERROR, reason, django_capture_on_commit_callbacks, findings)
    assert run.verdict == stages.ERROR
    assert not Run.objects.filter(rerun_of=run).exists()
    assert NotificationEvent.objects.get(kind="run_failed").data["run"] == run.pk
    assert Run.objects.filter(target=simulator, stage=stages.HEALTH, state=stages.QUEUED).exists()  # checked


def test_a_failure_is_a_verdict_and_is_not_retried(chain, django_capture_on_commit_callbacks):
    run = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=timezone.now())
    run = end_attempt(run, stages.FAIL, "1 check(s) failed — tokens", django_capture_on_commit_callbacks)
    assert run.verdict == stages.FAIL
    assert not Run.objects.filter(rerun_of=run).exists()
    assert NotificationEvent.objects.filter(kind="run_failed").count() == 1


def test_a_health_check_is_due_every_n_runs_and_every_h_hours(chain, simulator, django_capture_on_commit_callbacks):
    with pytest.raises(DomainError):
        target_set_health_schedule(actor=SYSTEM, target=simulator, every_runs=0, every_hours=None)
    target_set_health_schedule(actor=SYSTEM, target=simulator, every_runs=2, every_hours=3)
    assert AuditEntry.objects.filter(action="target.health_schedule").count() == 1
    Target.objects.filter(pk=simulator.pk).update(
        last_health_check_at=timezone.now() - timedelta(hours=1), last_health_check_passed=True
    )
    assert targets_health_check() == []  # one hour of three, no run yet
    first = end_attempt(
        make_run(chain, stages.RUNNER, stages.QUEUED), stages.FAIL, "failed", django_capture_on_commit_callbacks
    )
    assert not Run.objects.filter(stage=stages.HEALTH).exists()  # one run of two
    end_attempt(
        make_run(chain, stages.RUNNER, stages.QUEUED), stages.FAIL, "failed", django_capture_on_commit_callbacks
    )
    health = Run.objects.get(stage=stages.HEALTH)
    assert health.priority == stages.PRIORITY_HEALTH
    why = AuditEntry.objects.get(action="run.create", object_id=str(health.pk)).after["why"]
    assert why == "2 runs since the last health check (one every 2 runs)"
    assert first.pk < health.pk

    health.delete()
    Target.objects.filter(pk=simulator.pk).update(last_health_check_at=timezone.now() - timedelta(hours=4))
    Run.objects.filter(chain=chain).update(finished_at=timezone.now() - timedelta(hours=5))
    [started] = targets_health_check()
    why = AuditEntry.objects.get(action="run.create", object_id=str(started.pk)).after["why"]
    assert why == "4 h since the last health check (one every 3 h)"


def test_a_run_waiting_for_a_target_that_cannot_take_it_times_out_naming_why(
    chain, simulator, settings, django_capture_on_commit_callbacks
):
    settings.ACCEPTANCE_RUN_QUEUE_TIMEOUT = 600
    now = timezone.now()
    old = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=now, waiting_since=now - timedelta(minutes=20))
    health = target_health_check_start(simulator)
    Run.objects.filter(pk=health.pk).update(waiting_since=now - timedelta(minutes=20))

    runs_sweep()  # the target is served: nothing times out however long it waited
    old.refresh_from_db()
    assert old.state == stages.QUEUED

    Target.objects.filter(pk=simulator.pk).update(last_heartbeat_at=now - timedelta(hours=2))
    recent = make_run(chain, stages.GOLDEN, stages.PENDING, waiting_since=now - timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):
        report = runs_sweep()
    assert report.timed_out == 1
    old.refresh_from_db()
    assert (old.state, old.verdict) == (stages.ERROR, stages.ERROR)
    assert old.reason.startswith(
        "the run waited 20 min for simulator, which cannot take runs: no worker heartbeat for "
    )
    assert old.reason.endswith("; it was not run")
    assert not Run.objects.filter(rerun_of=old).exists()  # waiting longer would not help: not retried
    assert NotificationEvent.objects.get(kind="run_failed").data["run"] == old.pk
    recent.refresh_from_db()
    health.refresh_from_db()
    assert recent.state == stages.PENDING  # waited less than the timeout
    assert health.state == stages.QUEUED  # a health check waits: it is the first thing the target does


def test_the_timeout_reason_reads_in_chinese():
    from django.utils import translation

    from acceptance.summaries import run_summary

    reason = (
        "the run waited 20 min for board-1, which cannot take runs: out of rotation until a health check passes: "
        "health check run 7 failed: the runner exited with 1; it was not run"
    )
    with translation.override("zh-hans"):
        shown = run_summary(reason)
    assert shown != reason and "board-1" in shown and "20" in shown


@pytest.mark.parametrize("entry", ["page", "api"])
def test_a_pms_rerun_is_claimed_before_an_older_queued_run(
    entry, agent, simulator, chain, pm_user, vendor_user, capability, calbin, golden
):
    failed = make_run(chain, stages.RUNNER, stages.FAILED, attempt=1, finished_at=timezone.now())
    backlog_chain = second_chain(vendor_user, capability, calbin, golden, simulator)
    backlog = make_run(backlog_chain, stages.RUNNER, stages.QUEUED, sent_at=timezone.now())
    if entry == "page":
        page = Client()
        page.force_login(pm_user)
        assert page.post(f"/runs/{failed.pk}/rerun").status_code in (200, 302)
    else:
        http = APIClient()
        http.force_login(pm_user)
        assert http.post(f"/api/v1/runs/{failed.pk}/rerun/").status_code == 201
    rerun = Run.objects.get(rerun_of=failed)
    assert rerun.priority == stages.PRIORITY_RERUN and backlog.priority == stages.PRIORITY_BACKLOG
    assert backlog.pk < rerun.pk
    assert agent.claim().json()["run"] == rerun.pk
    assert agent.claim().json()["run"] == backlog.pk


def test_a_health_check_goes_before_a_rerun(agent, simulator, chain):
    waiting = make_run(chain, stages.RUNNER, stages.QUEUED, priority=stages.PRIORITY_RERUN)
    health = target_health_check_start(simulator)
    assert agent.claim().json()["run"] == health.pk
    assert agent.claim().json()["run"] == waiting.pk


def test_run_send_gives_the_broker_the_runs_priority(simulator, monkeypatch, django_capture_on_commit_callbacks):
    from acceptance.services import dispatch

    sent = []
    monkeypatch.setattr(dispatch, "_send", lambda run_id, queue, *, declare, priority: sent.append((run_id, priority)))
    with django_capture_on_commit_callbacks(execute=True):
        health = target_health_check_start(simulator)
    assert sent == [(health.pk, stages.PRIORITY_HEALTH)]


def test_a_pm_sets_the_health_schedule_on_the_dashboard_and_bad_input_names_the_field(simulator, pm_user, vendor_user):
    page = Client()
    page.force_login(pm_user)
    shown = page.get("/").content.decode()
    assert f'action="/targets/{simulator.slug}/health-schedule"' in shown
    schedule = f"/targets/{simulator.slug}/health-schedule"
    answer = page.post(schedule, {"every_runs": "20", "every_hours": ""}, follow=True)
    simulator.refresh_from_db()
    assert (simulator.health_check_every_runs, simulator.health_check_every_hours) == (20, None)
    assert "The health check schedule of simulator is saved." in answer.content.decode()
    entry = AuditEntry.objects.get(action="target.health_schedule")
    assert entry.actor_label == "pam" and entry.after == {"every_runs": 20, "every_hours": None}
    for typed, field in (
        ({"every_runs": "x"}, "health_check_every_runs"),  # the form's: not a whole number
        ({"every_runs": "5.0"}, "health_check_every_runs"),
        ({"every_hours": "\u0663"}, "health_check_every_hours"),  # a digit, but not an ASCII one
        ({"every_hours": "0"}, "health_check_every_hours"),  # the service's: at least 1
    ):
        answer = page.post(schedule, typed, follow=True)
        assert f"{field}: a health check schedule is a whole number from 1, or empty." in answer.content.decode()
    simulator.refresh_from_db()
    assert (simulator.health_check_every_runs, simulator.health_check_every_hours) == (20, None)  # unchanged
    chinese = page.post(
        f"/targets/{simulator.slug}/health-schedule", {"every_runs": "-3"}, follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert "health_check_every_runs：健康检查计划是从 1 起的整数" in chinese.content.decode()
    # A vendor neither sees the form nor may post it.
    vendor = Client()
    vendor.force_login(vendor_user)
    assert vendor.post(f"/targets/{simulator.slug}/health-schedule", {"every_runs": "1"}).status_code == 404
    simulator.refresh_from_db()
    assert simulator.health_check_every_runs == 20


def test_the_health_schedule_command_sets_it_and_refuses_a_bad_value_naming_the_field(simulator):
    out = io.StringIO()
    call_command("target_health_schedule", "simulator", "--every-runs", "7", "--every-hours", "2", stdout=out)
    assert out.getvalue().strip() == "simulator: a health check every 7 runs or 2 h"
    simulator.refresh_from_db()
    assert (simulator.health_check_every_runs, simulator.health_check_every_hours) == (7, 2)
    # The option's type refuses what is not a whole number; the service refuses 0 (at least 1 is its rule).
    with pytest.raises(CommandError, match="--every-hours: health_check_every_hours: a health check schedule"):
        call_command("target_health_schedule", "simulator", "--every-hours", "two")
    with pytest.raises(CommandError, match="^health_check_every_runs: health_check_every_runs: a health check"):
        call_command("target_health_schedule", "simulator", "--every-runs", "0")
    simulator.refresh_from_db()
    assert (simulator.health_check_every_runs, simulator.health_check_every_hours) == (7, 2)  # unchanged
    call_command("target_health_schedule", "simulator", stdout=out)  # empty: back to the defaults
    simulator.refresh_from_db()
    assert (simulator.health_check_every_runs, simulator.health_check_every_hours) == (None, None)
    assert AuditEntry.objects.filter(action="target.health_schedule", actor_label__contains="manage.py").count() == 2


def test_only_a_pm_or_an_operator_looks_after_a_target_from_every_entry_point(simulator, pm_user, vendor_user):
    """Maintenance and the health check schedule: the service refuses a vendor engineer and a viewer, whichever
    way they reach it (the dashboard, the admin, the command); a PM, an operator and the shell may."""
    from django.contrib.auth.models import User

    from tests.factories import make_user

    viewer, operator = make_user("vic", "team", "viewer"), make_user("otto", "team", "operator")
    refused = "Only a PM or an operator of the integration team looks after a target"

    def schedule() -> tuple:
        simulator.refresh_from_db()
        return simulator.health_check_every_runs, simulator.health_check_every_hours

    for person in (vendor_user, viewer):
        with pytest.raises(DomainError, match=refused) as caught:
            target_set_maintenance(actor=person, target=simulator, maintenance=True)
        assert caught.value.status_code == 403
        with pytest.raises(DomainError, match=refused):
            target_set_health_schedule(actor=person, target=simulator, every_runs=5, every_hours=None)
        page = Client()
        page.force_login(person)
        assert page.post(f"/targets/{simulator.slug}/health-schedule", {"every_runs": "5"}).status_code == 404
        with pytest.raises(CommandError, match=f"^error: {refused}"):
            call_command("target_health_schedule", "simulator", "--every-runs", "5", "--user", person.username)
        # The admin, as someone who may open it but is neither a PM nor an operator.
        User.objects.filter(pk=person.pk).update(is_staff=True, is_superuser=True)
        admin = Client()
        admin.force_login(person)
        shown = admin.post(
            "/admin/acceptance/target/",
            {"action": "enter_maintenance", "_selected_action": [simulator.pk]},
            follow=True,
        ).content.decode()
        assert f"Simulator: {refused}" in shown  # the admin shows its messages capitalised
        changed = admin.post(
            f"/admin/acceptance/target/{simulator.pk}/change/",
            {"name": simulator.name, "calrt_version": simulator.calrt_version,
             "driver_version": simulator.driver_version, "firmware_version": simulator.firmware_version,
             "chip": simulator.chip, "runner_command": "", "health_check_every_runs": "5",
             "health_check_every_hours": ""},
            follow=True,
        ).content.decode()  # fmt: skip
        assert f"Not saved — {refused}" in changed
        simulator.refresh_from_db()
        assert not simulator.maintenance and schedule() == (None, None)
    assert not AuditEntry.objects.filter(action__in=["target.maintenance", "target.health_schedule"]).exists()

    page = Client()
    page.force_login(operator)
    page.post(f"/targets/{simulator.slug}/health-schedule", {"every_runs": "5"})
    assert schedule() == (5, None)
    call_command("target_health_schedule", "simulator", "--every-runs", "6", "--user", pm_user.username)
    assert schedule() == (6, None)
    assert AuditEntry.objects.filter(action="target.health_schedule").latest("pk").actor_label == "pam"
    User.objects.filter(pk=operator.pk).update(is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(operator)
    admin.post("/admin/acceptance/target/", {"action": "enter_maintenance", "_selected_action": [simulator.pk]})
    simulator.refresh_from_db()
    assert simulator.maintenance
    target_set_maintenance(actor=pm_user, target=simulator, maintenance=False)
    simulator.refresh_from_db()
    assert not simulator.maintenance
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("target_health_schedule", "simulator", "--user", "nobody")


def test_the_queue_wait_counts_from_when_the_run_began_to_wait_as_the_queue_timeout_does(agent, simulator, chain):
    """One moment for both: a run sent back to pending and queued again, or sent again after its attempt lost
    its lease, has waited since it began to (or since the lease lapsed), not since its last return to the queue."""
    began = timezone.now() - timedelta(minutes=10)
    run = make_run(chain, stages.RUNNER, stages.QUEUED, sent_at=began, waiting_since=began)
    for state in (stages.PENDING, stages.QUEUED):  # out of rotation for a while, then back in the queue
        with transaction.atomic():
            run_state_move(run_lock(run.pk), state)
    status, claimed = run_claim(run.pk, "worker-1")
    assert status == CLAIMED and claimed.waiting_since == began
    assert claimed.timing["queue_wait"] >= 600, claimed.timing

    lapsed = timezone.now() - timedelta(seconds=90)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=lapsed)
    runs_sweep()  # the attempt's worker is gone: the run is sent again
    run.refresh_from_db()
    assert run.state == stages.QUEUED and run.waiting_since == lapsed
    status, claimed = run_claim(run.pk, "worker-2")
    assert status == CLAIMED and claimed.timing["queue_wait"] >= 90, claimed.timing
