"""Chains and runs through the services: order of stages, staleness, the claim protocol, the sweeper,
targets' health and maintenance, and evidence from verdicts."""

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation

from acceptance import selectors, stages
from acceptance.models import Chain, Run, RunResult, Target
from acceptance.protocol import StageOutcome
from acceptance.services import (
    answer_submit,
    chain_advance,
    chain_start_for_answer,
    run_rerun,
    runs_sweep,
    target_register,
    target_set_maintenance,
)
from acceptance.services.runs.claiming import CLAIMED, GONE, HELD, run_claim
from acceptance.services.runs.finishing import run_finish
from acceptance.services.runs.reporting import RunReporter
from acceptance.services.runs.running import run_dir_prefix
from acceptance.services.targets import target_health_check_start, target_heartbeat
from calculet.actors import SYSTEM
from calculet.db import lock_rows
from calculet.errors import ConflictError, ForbiddenError
from tests.acceptance.workers import broker_flush
from tests.factories import answer_draft, complete_answer_data, make_artifact, pass_stage, pass_stages


def states(chain) -> dict:
    chain.refresh_from_db()
    return {stage: state for stage, state, _ in selectors.chain_stages(chain)}


def only_chain(answer) -> Chain:
    return Chain.objects.get(answer=answer)


def finish(run, verdict=stages.PASS, reason="ok", result=None):
    status, claimed = run_claim(run.pk, "test-worker")
    assert status == CLAIMED
    assert run_finish(
        claimed,
        worker="test-worker",
        outcome=StageOutcome(verdict, reason, result=result or {}),
        reporter=RunReporter(claimed),
    )
    return Run.objects.get(pk=run.pk)


def test_a_complete_answer_starts_its_chain_with_the_claim_queued(
    answer, simulator_online, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as sends:
        chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    assert chain.capability.slug == "decode-batch-8"
    runs = list(chain.runs.all())
    assert [(r.stage, r.state, r.send_count) for r in runs] == [(stages.CLAIM, stages.QUEUED, 1)]
    assert len(sends) == 1
    assert states(chain) == {
        stage: (stages.QUEUED if stage == stages.CLAIM else stages.PENDING) for stage in stages.CHAIN_STAGES
    }
    answer.question.refresh_from_db()
    assert answer.question.state == "verifying"


def test_starting_twice_starts_nothing_new(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    chain_start_for_answer(answer.pk)
    assert Run.objects.count() == 1
    assert Chain.objects.count() == 1


def test_a_target_without_a_live_worker_keeps_runs_pending(answer):
    chain_start_for_answer(answer.pk)
    run = Run.objects.get()
    assert run.state == stages.PENDING
    assert run.send_count == 0
    target_heartbeat(queues=["simulator"], worker="w1")
    run.refresh_from_db()
    assert run.state == stages.QUEUED


def test_a_pass_queues_the_next_stage_and_only_then(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    claim_run = chain.runs.get()
    assert not chain.runs.filter(stage=stages.ARTIFACT).exists()
    finish(claim_run)
    assert chain.runs.get(stage=stages.ARTIFACT).state == stages.QUEUED
    finish(chain.runs.get(stage=stages.ARTIFACT), verdict=stages.FAIL, reason="digest mismatch")
    assert not chain.runs.filter(stage=stages.RUNNER).exists()
    assert states(chain)[stages.ARTIFACT] == stages.FAILED


def test_a_stage_cannot_be_rerun_before_the_one_before_passed(answer, simulator_online, pm_user):
    chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    finish(chain.runs.get())
    failed = finish(chain.runs.get(stage=stages.ARTIFACT), verdict=stages.FAIL)
    golden = Run.objects.create(
        chain=chain,
        stage=stages.GOLDEN,
        target=chain.target,
        answer=answer,
        state=stages.ERROR,
        verdict=stages.ERROR,
        inputs_digest=chain.stage_digests[stages.GOLDEN],
    )
    with pytest.raises(ConflictError, match=r"Isolated runner has not passed on the current inputs \(pending\)"):
        run_rerun(actor=pm_user, run=golden)
    rerun = run_rerun(actor=pm_user, run=failed)
    assert rerun.rerun_of == failed
    assert rerun.requested_by == pm_user
    with pytest.raises(ConflictError, match="already queued"):
        run_rerun(actor=pm_user, run=failed)


def test_only_a_pm_reruns(answer, simulator_online, vendor_user):
    chain_start_for_answer(answer.pk)
    run = finish(only_chain(answer).runs.get(), verdict=stages.FAIL)
    with pytest.raises(ForbiddenError):
        run_rerun(actor=vendor_user, run=run)


def test_a_new_calbin_version_makes_artifact_and_later_stages_stale(
    answer, simulator_online, vendor_user, question, capability, golden, calbin_bytes, organisation, tmp_path
):
    chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    pass_stages(chain, stages.SOAK)
    assert set(states(chain).values()) == {stages.PASSED}
    calbin_v2 = make_artifact(vendor_user, calbin_bytes, kind="calbin", version="1.0.1", file_name="tiny-b8.tar")
    newer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=calbin_v2, golden=golden)),
    )
    chain_start_for_answer(newer.pk)
    chain.refresh_from_db()
    assert chain.answer == newer
    now = states(chain)
    assert now[stages.CLAIM] == stages.PASSED
    assert [now[s] for s in stages.CHAIN_STAGES[1:]] == [stages.QUEUED] + [stages.STALE] * 5
    # An older answer arriving late changes nothing.
    chain_start_for_answer(answer.pk)
    chain.refresh_from_db()
    assert chain.answer == newer


def test_a_new_soak_threshold_makes_only_soak_stale(
    answer, simulator_online, vendor_user, question, capability, calbin, golden
):
    chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    pass_stages(chain, stages.SOAK)
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    data["thresholds"] = {**data["thresholds"], "min_decode_tokens_per_s": 60}
    newer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    chain_start_for_answer(newer.pk)
    now = states(chain)
    assert [now[s] for s in stages.CHAIN_STAGES[:-1]] == [stages.PASSED] * 6
    assert now[stages.SOAK] == stages.QUEUED


def test_runs_waiting_on_old_inputs_become_stale_and_are_not_executed(
    answer, simulator_online, vendor_user, question, capability, calbin, golden
):
    chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    pass_stages(chain, stages.INTEGRATION)
    with transaction.atomic():
        soak = chain_advance(lock_rows(Chain.objects).get(pk=chain.pk))
    assert (soak.stage, soak.state) == (stages.SOAK, stages.QUEUED)
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    data["thresholds"] = {"soak_requests": 32}
    chain_start_for_answer(answer_submit(actor=vendor_user, question=question, draft=answer_draft(data)).pk)
    soak.refresh_from_db()
    assert soak.state == stages.STALE
    assert run_claim(soak.pk, "w")[0] == GONE


def test_target_version_change_makes_the_artifact_stage_stale(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    chain = only_chain(answer)
    pass_stages(chain, stages.GOLDEN)
    target_register(
        actor=SYSTEM,
        slug="simulator",
        kind=Target.SIMULATOR,
        calrt_version="0.7.7",
        driver_version=simulator_online.driver_version,
        firmware_version=simulator_online.firmware_version,
        chip=simulator_online.chip,
    )
    now = states(chain)
    assert now[stages.CLAIM] == stages.PASSED
    assert now[stages.ARTIFACT] == stages.QUEUED
    assert now[stages.GOLDEN] == stages.STALE


def test_one_attempt_at_a_time_and_one_verdict(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    run = Run.objects.get()
    status, first = run_claim(run.pk, "w1")
    assert (status, first.attempt) == (CLAIMED, 1)
    assert run_claim(run.pk, "w2")[0] == HELD
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    status, second = run_claim(run.pk, "w2")
    assert (status, second.attempt) == (CLAIMED, 2)
    lost = run_finish(first, worker="w1", outcome=StageOutcome(stages.FAIL, "late"), reporter=RunReporter(first))
    assert lost is False
    assert run_finish(second, worker="w2", outcome=StageOutcome(stages.PASS, "ok"), reporter=RunReporter(second))
    run.refresh_from_db()
    assert (run.state, run.verdict, run.attempt) == (stages.PASSED, stages.PASS, 2)
    assert list(RunResult.objects.filter(run=run).values_list("attempt", "verdict")) == [(2, stages.PASS)]
    assert run_claim(run.pk, "w3")[0] == GONE


def test_the_sweeper_resends_expired_leases_and_gives_up_after_three_attempts(
    answer, simulator_online, django_capture_on_commit_callbacks
):
    chain_start_for_answer(answer.pk)
    run = Run.objects.get()
    for attempt in (1, 2, 3):
        status, claimed = run_claim(run.pk, f"w{attempt}")
        assert (status, claimed.attempt) == (CLAIMED, attempt)
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        with django_capture_on_commit_callbacks() as sends:
            report = runs_sweep()
        if attempt < 3:
            assert (report.requeued, report.gave_up, len(sends)) == (1, 0, 1)
            run.refresh_from_db()
            assert run.state == stages.QUEUED
    assert (report.requeued, report.gave_up) == (0, 1)
    run.refresh_from_db()
    assert (run.state, run.verdict) == (stages.ERROR, stages.ERROR)
    assert run.reason.startswith("infrastructure error: the run was started 3 times")
    assert RunResult.objects.filter(run=run).count() == 1


def test_the_sweeper_removes_the_working_directories_of_lost_attempts(answer, simulator_online, settings, tmp_path):
    run_dir = settings.ACCEPTANCE_RUN_DIR = tmp_path / "runs"
    run_dir.mkdir()
    chain_start_for_answer(answer.pk)
    lost = Run.objects.get()
    finished = pass_stage(Chain.objects.get(), stages.RUNNER)
    assert run_claim(lost.pk, "w1")[0] == CLAIMED
    # As the worker makes them (running.py): calculet-run-<database>-<id>-<random>, with the run's inputs inside,
    # and the minimal example's beside it: calculet-run-<database>-<id>-example-<random>.
    directories = {
        run.pk: tempfile.mkdtemp(prefix=f"{run_dir_prefix()}{run.pk}-", dir=run_dir) for run in (lost, finished)
    }
    example = Path(tempfile.mkdtemp(prefix=f"{run_dir_prefix()}{finished.pk}-example-", dir=run_dir))
    for directory in directories.values():
        (Path(directory) / "inputs").mkdir()
        (Path(directory) / "inputs" / "calbin.tar").write_bytes(b"a copy of the calbin")
    unrelated = run_dir / "calculet-run-notes"
    unrelated.mkdir()
    # Another setup's run with the finished run's id, sharing the folder with another database.
    other_setup = Path(tempfile.mkdtemp(prefix=f"calculet-run-0123456789ab-{finished.pk}-", dir=run_dir))

    assert runs_sweep().removed_dirs == 2
    assert not example.exists()
    assert sorted(run_dir.iterdir()) == sorted([Path(directories[lost.pk]), unrelated, other_setup])  # running: kept

    Run.objects.filter(pk=lost.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    report = runs_sweep()
    assert (report.requeued, report.removed_dirs) == (1, 1)
    assert sorted(run_dir.iterdir()) == sorted([unrelated, other_setup])


def test_the_sweeper_resends_queued_runs_whose_queue_is_empty(
    answer, simulator_online, django_capture_on_commit_callbacks
):
    broker_flush()
    chain_start_for_answer(answer.pk)  # its send is never executed: as if the broker lost it
    run = Run.objects.get()
    assert runs_sweep().resent == 0  # sent just now: not yet
    with django_capture_on_commit_callbacks() as sends:
        report = runs_sweep(queued_resend_after=0)
    assert report.resent == 1 and len(sends) == 1
    run.refresh_from_db()
    assert run.send_count == 2


def test_maintenance_holds_runs_and_leaving_it_starts_a_health_check(answer, simulator_online, pm_user):
    target_set_maintenance(actor=pm_user, target=simulator_online, maintenance=True, reason="board swap")
    chain_start_for_answer(answer.pk)
    run = Run.objects.get(stage=stages.CLAIM)
    assert run.state == stages.PENDING
    target_set_maintenance(actor=pm_user, target=simulator_online, maintenance=False)
    assert Run.objects.filter(stage=stages.HEALTH, state=stages.QUEUED).count() == 1


def test_a_failed_health_check_degrades_the_target_until_one_passes(answer, simulator_online):
    health = target_health_check_start(simulator_online)
    finish(health, verdict=stages.FAIL, reason="golden mismatch on the known-good package")
    simulator_online.refresh_from_db()
    assert (simulator_online.health, simulator_online.last_health_check_passed) == (Target.DEGRADED, False)
    chain_start_for_answer(answer.pk)
    run = Run.objects.get(stage=stages.CLAIM)
    assert run.state == stages.PENDING
    finish(target_health_check_start(simulator_online))
    simulator_online.refresh_from_db()
    assert simulator_online.health == Target.OK
    runs_sweep()
    run.refresh_from_db()
    assert run.state == stages.QUEUED


@pytest.mark.parametrize(
    ("device", "hardware_grade"),
    [
        ({"kind": "hardware", "identity": "calculet board SN 0042"}, "E0"),
        ({"kind": "simulator", "double": True, "identity": "board test double (no board)"}, "E4"),
        ({"kind": "hardware", "double": True, "identity": "board test double (no board)"}, "E4"),
    ],
)
def test_runner_stage_verdicts_are_graded_by_the_device_that_reported_them(
    answer, simulator_online, device, hardware_grade
):
    """E0 only from a hardware target whose runner reported a board (not a double); the simulator is E4."""
    target_register(
        actor=SYSTEM,
        slug="board-1",
        kind=Target.HARDWARE,
        runner_command="board-runner --device 0",
        calrt_version="0.7.6",
        driver_version="2.3.0",
        firmware_version="1.8.0",
        chip="calculet-2c",
    )
    target_heartbeat(queues=["board-1"], worker="board-host")
    chain_start_for_answer(answer.pk)
    grades = {}
    for chain in Chain.objects.all():
        pass_stages(chain, stages.ARTIFACT)
        chain_advance(chain)
        reported = device if chain.target.kind == Target.HARDWARE else {"kind": "simulator"}
        runner = finish(chain.runs.get(stage=stages.RUNNER), result={"device": reported})
        grades[chain.target.kind] = list(runner.evidence.grades.values_list("grade", flat=True))
        assert runner.evidence in chain.capability.evidence.all()
    assert grades == {"simulator": ["E4"], "hardware": [hardware_grade]}


def test_stage_reads_cost_the_same_queries_whatever_the_number_of_runs(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.select_related("capability").get(answer=answer)

    def count():
        with CaptureQueriesContext(connection) as captured:
            selectors.chain_stages(chain)
            selectors.capability_gate_facts(chain.capability)
            list(selectors.runs_in_progress())
        return len(captured)

    for stage in stages.CHAIN_STAGES:
        pass_stage(chain, stage)
    few = count()
    for _ in range(30):
        for stage in stages.CHAIN_STAGES:
            pass_stage(chain, stage)
    assert count() == few


def test_an_incomplete_revision_does_not_move_a_question_being_verified(answer, simulator_online, vendor_user):
    chain_start_for_answer(answer.pk)
    answer.question.refresh_from_db()
    assert answer.question.state == "verifying"
    incomplete = answer_submit(
        actor=vendor_user, question=answer.question, draft=answer_draft({"summary": "batch 4 next month"})
    )
    assert not incomplete.complete
    answer.question.refresh_from_db()
    assert answer.question.state == "verifying"


def test_a_refused_rerun_reads_in_the_readers_language_and_the_api_keeps_english(answer, simulator_online, pm_user):
    chain_start_for_answer(answer.pk)
    queued = only_chain(answer).runs.get()
    with pytest.raises(ConflictError) as refused:
        run_rerun(actor=pm_user, run=queued)
    assert refused.value.english == f"Run {queued.pk} is still queued."
    with translation.override("zh-hans"):
        assert refused.value.message == f"运行 {queued.pk} 仍在排队中。"
