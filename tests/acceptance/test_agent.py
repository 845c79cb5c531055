"""calculet-agent in its own process against calculet served by gunicorn: the agent's environment holds only the
server's URL and the simulator target's token, and the chain still runs to its verdicts. This process plays
Celery beat by calling the sweeper; a default-queue worker does the server's own checks."""

import hashlib
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from calculet_agent.digest import runner_digest

from acceptance import selectors, stages
from acceptance.judging import EXAMPLE_NOT_RUN
from acceptance.models import Chain, Run, RunResult, RunToken, Target, TargetAgent
from acceptance.services import (
    answer_submit,
    target_ensure_simulator,
    target_health_check_start,
    target_register,
    target_registration_approve,
)
from acceptance.services.agents import target_token_create, target_token_revoke
from calculet.actors import SYSTEM
from npu_sim import device as npu_device
from tests.acceptance.workers import processes_with, wait_until
from tests.factories import answer_draft, complete_answer_data

pytestmark = pytest.mark.django_db(transaction=True)


def all_passed(chain: Chain | None) -> bool:
    if chain is None:
        return False
    chain.refresh_from_db()
    return all(state == stages.PASSED for _, state, _ in selectors.chain_stages(chain))


def environment_of(pid: int) -> set[str]:
    return {item.split(b"=", 1)[0].decode() for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if item}


def test_the_agent_with_only_the_url_and_a_target_token_runs_the_chain_to_its_verdicts(
    workers, gunicorn_server, vendor_user, question, capability, calbin, golden
):
    simulator = target_ensure_simulator()
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="this host")
    with gunicorn_server() as (url, _):
        server_checks = workers.celery("default", "default")
        agent = workers.agent(url, key)
        # Read once it runs: while the process is still being exec'ed, /proc shows no environment at all.
        wait_until(lambda: "registered as agent" in agent.log_text(), timeout=60, what="the agent to register")
        assert environment_of(agent.pid) == {"CALCULET_SERVER", "CALCULET_TARGET_TOKEN"}
        wait_until(
            lambda: Target.objects.filter(slug="simulator", health=Target.OK).exists(),
            timeout=60,
            what="the agent's first poll",
            workers=[agent],
        )
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
        chain = Chain.objects.get(answer=answer, target=simulator)
        wait_until(lambda: all_passed(chain), timeout=240, what="the chain", workers=[agent, server_checks])

        # Revoked, the token stops the agent: it says why and exits 3, polling no more.
        target_token_revoke(actor=SYSTEM, token=simulator.tokens.get())
        wait_until(lambda: not agent.alive(), timeout=30, what="the agent to stop", workers=[agent], sweep=False)
        assert agent.process.returncode == 3
        assert "refused the target token" in agent.log_text()

    runner_runs = chain.runs.filter(stage__in=stages.RUNNER_STAGES, state=stages.PASSED)
    assert runner_runs.count() == len(stages.RUNNER_STAGES)
    for run in runner_runs:
        assert run.worker.startswith("agent "), run.worker
        assert run.result["agent"]["host"] and run.result["device"]["calrt"] == simulator.calrt_version
        assert RunResult.objects.filter(run=run).count() == 1
        assert RunToken.objects.filter(run=run).count() == 1
        assert "calculet-agent" in run.log
        assert f"(host {run.result['agent']['host']})" in run.evidence.conclusion  # the machine it came from
        # The whole time split: the queue wait the server saw, the fetch and runner the agent timed, the post.
        assert set(run.timing) == {"queue_wait", "fetch", "runner", "post"}, run.timing
        assert run.timing["runner"] > 0 and all(seconds >= 0 for seconds in run.timing.values())
    # calculet judged the logits the agent sent back, as it judges a worker's run's.
    golden_run = runner_runs.get(stage=stages.GOLDEN)
    assert golden_run.result["judged"] == {
        "passed": True,
        "reason": "the measured logits are within tolerance of the golden",
    }
    soak_run = runner_runs.get(stage=stages.SOAK)
    assert soak_run.result["judged"]["passed"] is True, soak_run.result["judged"]
    # The vendor's example is not run on the agent's host, and the result says so.
    example = runner_runs.get(stage=stages.RUNNER).result["minimal_example"]
    assert example["ran"] is False and example["detail"] == EXAMPLE_NOT_RUN
    # The server's own checks ran on the default queue, never on the agent.
    for run in chain.runs.exclude(stage__in=stages.RUNNER_STAGES):
        assert not run.worker.startswith("agent "), run.worker
    assert RunResult.objects.count() == Run.objects.exclude(state__in=stages.ACTIVE_STATES).count()


CHEATING_RUNNER = Path(__file__).with_name("cheating_runner.py")


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("golden-tamper", "the runner claims a pass its measurements do not support — decode_logits:"),
        (
            "golden-no-files",
            "the runner claims a pass its measurements do not support — the runner wrote no golden-actual.npz",
        ),
    ],
)
def test_the_agent_s_runner_is_judged_by_calculet_from_what_it_measured(
    workers, gunicorn_server, vendor_user, question, capability, calbin, golden, mode, reason
):
    """A runner on the agent's host that says pass over corrupted logits, or measures nothing, fails the golden
    stage, as on a worker: the agent sends back the files it measured into, and the server judges them."""
    simulator = target_ensure_simulator()
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="this host")
    with gunicorn_server() as (url, _):
        server_checks = workers.celery("default", "default")
        agent = workers.agent(url, key, runner=f"{sys.executable} {CHEATING_RUNNER} {mode}")
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
        verdict = wait_until(
            lambda: Run.objects.filter(answer=answer, stage=stages.GOLDEN, state__in=stages.FINISHED_STATES).first(),
            timeout=240,
            what="the golden stage",
            workers=[agent, server_checks],
        )
    assert verdict.state == stages.FAILED, verdict.reason
    assert verdict.worker.startswith("agent ")
    assert verdict.reason.startswith(reason), verdict.reason
    assert verdict.result["verdict"] == "pass"  # what the runner said, beside calculet's verdict
    assert verdict.result["judged"]["passed"] is False


# Enough soak to be killed in the middle of.
LONG_SOAK = {"thresholds": {"soak_requests": 512, "soak_concurrency": 4, "soak_output_tokens": 48}}


def test_killing_the_agent_mid_run_the_lease_lapses_and_another_agent_ends_it_with_one_verdict(
    workers, gunicorn_server, vendor_user, question, capability, calbin, golden
):
    simulator = target_ensure_simulator()
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="this host")
    with gunicorn_server() as (url, _):
        server_checks = workers.celery("default", "default")
        first = workers.agent(url, key, name="agent-1")
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        data.update(LONG_SOAK)
        answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
        run = wait_until(
            lambda: Run.objects.filter(answer=answer, stage=stages.SOAK, state=stages.RUNNING, progress__gt=5).first(),
            timeout=240,
            what="the soak to start on the agent",
            workers=[first, server_checks],
        )
        first_worker = run.worker
        first.kill()
        wait_until(lambda: processes_with(f"calculet-agent-run-{run.pk}-") == [], timeout=60, what="the runner to die")
        second = workers.agent(url, key, name="agent-2")  # a new state directory: a new agent, with its own key
        wait_until(
            lambda: Run.objects.get(pk=run.pk).state == stages.PASSED, timeout=240, what="the soak", workers=[second]
        )
    run.refresh_from_db()
    assert run.attempt == 2 and run.worker != first_worker and run.worker.startswith("agent ")
    assert RunResult.objects.filter(run=run).count() == 1
    assert list(RunToken.objects.filter(run=run).values_list("attempt", flat=True).order_by("attempt")) == [1, 2]
    assert "expired; sent again" in run.log


def test_the_server_restarted_mid_run_the_agent_retries_and_the_result_lands_once(
    workers, gunicorn_server, vendor_user, question, capability, calbin, golden
):
    simulator = target_ensure_simulator()
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="this host")
    server_checks = workers.celery("default", "default")
    with gunicorn_server() as (url, _):
        agent = workers.agent(url, key)
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        data.update(LONG_SOAK)
        answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
        run = wait_until(
            lambda: Run.objects.filter(answer=answer, stage=stages.SOAK, state=stages.RUNNING, progress__gt=5).first(),
            timeout=240,
            what="the soak to start on the agent",
            workers=[agent, server_checks],
        )
    port = int(url.rsplit(":", 1)[1])
    with gunicorn_server(port=port):
        wait_until(
            lambda: Run.objects.get(pk=run.pk).state == stages.PASSED, timeout=240, what="the soak", workers=[agent]
        )
        assert agent.alive()  # it waited the restart out
    # Whether the restart outlived the lease (then the run was sent again and claimed again) or not, the run
    # has one verdict.
    assert RunResult.objects.filter(run=run).count() == 1


def test_a_board_s_agent_registering_changed_versions_is_given_no_run_until_a_pm_approves(
    workers, gunicorn_server, pm_user
):
    """The host says which firmware and runner the board has; calculet does not take its word. Through the real
    agent process: what it registers waits, its polls claim nothing (not even the health check), and once a PM
    approves, the values are the board's and its runs flow."""
    board = target_register(
        actor=SYSTEM, slug="board-1", kind=Target.HARDWARE, calrt_version=npu_device.CALRT_VERSION,
        driver_version=npu_device.DRIVER_VERSION, firmware_version="0.0.1", chip="calculet-2c",
        runner_command="/opt/board-runner/run",
    )  # fmt: skip
    _, key = target_token_create(actor=SYSTEM, target=board, name="board host")
    runner = f"{sys.executable} -m npu_sim run"
    with gunicorn_server() as (url, _):
        agent = workers.agent(url, key, runner=runner, options=("--firmware", npu_device.FIRMWARE_VERSION))
        wait_until(
            lambda: Target.objects.get(pk=board.pk).registration_pending, timeout=60, what="the registration",
            workers=[agent],
        )  # fmt: skip
        health = target_health_check_start(board)
        # Polls well after the health check was queued: none of them claimed it.
        later = health.created_at + timedelta(seconds=2)
        wait_until(
            lambda: TargetAgent.objects.filter(target=board, last_poll_at__gt=later).exists(),
            timeout=60, what="the agent's polls", workers=[agent],
        )  # fmt: skip
        health.refresh_from_db()
        assert health.state in (stages.QUEUED, stages.PENDING) and health.attempt == 0
        assert not RunToken.objects.filter(run__target=board).exists()
        board.refresh_from_db()
        assert board.firmware_version == "0.0.1" and board.runner_command == "/opt/board-runner/run"
        assert f"firmware_version 0.0.1 -> {npu_device.FIRMWARE_VERSION}" in board.health_reason

        target_registration_approve(actor=pm_user, target=board)
        finished = wait_until(
            lambda: Run.objects.filter(pk=health.pk, state__in=stages.FINISHED_STATES).first(),
            timeout=120, what="the health check", workers=[agent],
        )  # fmt: skip
    assert finished.state == stages.PASSED, finished.reason
    assert finished.worker.startswith("agent ")
    board.refresh_from_db()
    assert (board.firmware_version, board.runner_command) == (npu_device.FIRMWARE_VERSION, runner)
    # The digest covers the module the interpreter runs, not the interpreter alone.
    assert board.runner_digest == runner_digest(runner)
    assert board.runner_digest != hashlib.sha256(Path(sys.executable).read_bytes()).hexdigest()
    assert board.registration_pending == {} and board.last_health_check_passed is True
