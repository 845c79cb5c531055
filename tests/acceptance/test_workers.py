"""The chain on real processes, real Redis and the real test database: promotion to C1 on the simulator and never
to C0 on a board double, each served by calculet-agent against calculet served by gunicorn; and on a target
served by Celery (`manage.py serve_target`, a target with no token), workers killed mid-run, Redis flushed while
runs wait, and misbehaving vendor examples on a board host. This process plays Celery beat by calling the
sweeper."""

import os
import signal
import sys
import uuid

import pytest

from acceptance import selectors, stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain, Run, RunResult, Target
from acceptance.services import (
    answer_submit,
    capability_promote,
    chain_start_for_answer,
    runs_sweep,
    target_ensure_simulator,
    target_register,
    target_registration_approve,
)
from acceptance.services.agents import target_token_create
from acceptance.services.dispatch import queue_length
from acceptance.services.runs.running import run_dir_prefix
from acceptance.services.targets import target_heartbeat
from calculet.actors import SYSTEM
from tests.acceptance.workers import BOARD_DOUBLE, broker_flush, processes_with, wait_until
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_artifact,
    make_capability,
    make_question,
    runner_bundle_bytes,
    sdk_checked,
)

pytestmark = pytest.mark.django_db(transaction=True)

HARDWARE_VERSIONS = ["--calrt", "0.7.6", "--driver", "2.3.0", "--firmware", "1.8.0", "--chip", "calculet-2c"]


def chain_on(answer, slug: str) -> Chain | None:
    return Chain.objects.filter(answer=answer, target__slug=slug).first()


def all_passed(chain: Chain | None) -> bool:
    if chain is None:
        return False
    chain.refresh_from_db()
    return all(state == stages.PASSED for _, state, _ in selectors.chain_stages(chain))


def submit(vendor_user, question, capability, calbin, golden, **overrides):
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    data.update(overrides)
    return answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))


def test_a_tiny_batch8_answer_reaches_c1_on_the_simulator_and_a_board_double_never_makes_it_c0(
    workers, gunicorn_server, vendor_user, pm_user, question, capability, calbin, golden, tmp_path
):
    """Each target served as a board is, by calculet-agent holding only the server's URL and its target's token:
    the simulator with the simulator as its runner, the board double with the double."""
    _, simulator_key = target_token_create(actor=SYSTEM, target=target_ensure_simulator(), name="this host")
    board_runner = f"{sys.executable} {BOARD_DOUBLE}"
    board_target = target_register(
        actor=SYSTEM, slug="board-double", kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c", runner_command=board_runner,
    )  # fmt: skip
    _, board_key = target_token_create(actor=SYSTEM, target=board_target, name="board host")
    with gunicorn_server() as (url, _):
        server_checks = workers.celery("default", "default")
        simulator = workers.agent(url, simulator_key, name="simulator-agent")
        answer = submit(vendor_user, question, capability, calbin, golden)
        wait_until(
            lambda: all_passed(chain_on(answer, "simulator")),
            timeout=180,
            what="the simulator chain",
            workers=[simulator, server_checks],
        )

        promoted = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C2"))
        assert promoted.allowed, promoted.reasons
        assert promoted.runs.count() == 7 and promoted.artifacts.filter(pk=calbin.pk).exists()
        sdk_checked(capability)
        assert capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C1")).allowed
        blocked = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C0"))
        assert not blocked.allowed
        assert [r["code"] for r in blocked.reasons] == ["no_hardware_runs"]
        assert "No E0 runs" in blocked.reasons[0]["message"]

        # The board double's agent stands for a second host: its own state directory and run directories.
        board = workers.agent(url, board_key, name="board", runner=board_runner, options=HARDWARE_VERSIONS)
        wait_until(
            lambda: Target.objects.get(pk=board_target.pk).registration_pending,
            timeout=60,
            what="the board's first registration",
            workers=[board],
        )
        target_registration_approve(actor=pm_user, target=board_target)
        wait_until(
            lambda: Target.objects.filter(slug="board-double", health=Target.OK).exists(),
            timeout=60,
            what="the board agent's polls",
            workers=[board],
        )
        chain_start_for_answer(answer.pk)
        hardware = chain_on(answer, "board-double")
        wait_until(lambda: all_passed(hardware), timeout=180, what="the hardware chain", workers=[board, server_checks])
    board_runs = tmp_path / "board-state" / "runs"
    assert "board double" in hardware.runs.get(stage=stages.SOAK).log
    assert all(str(board_runs) in run.log for run in hardware.runs.filter(stage__in=stages.RUNNER_STAGES))
    assert not any(str(board_runs) in run.log for run in chain_on(answer, "simulator").runs.all())
    for chain, agent_host in ((chain_on(answer, "simulator"), "simulator"), (hardware, "board-double")):
        for run in chain.runs.filter(stage__in=stages.RUNNER_STAGES):
            assert run.worker.startswith("agent ") and run.result["agent"]["host"], (agent_host, run.worker)
    assert (
        not Run.objects.filter(target__slug="simulator", stage=stages.RUNNER)
        .exclude(chain=chain_on(answer, "simulator"))
        .exists()
    )

    # The double says what it is: every stage passed on it, and all of it is E4, so C0 stays blocked.
    assert all(run.result["device"]["double"] for run in hardware.runs.filter(stage__in=stages.RUNNER_STAGES))
    c0 = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C0"))
    assert [r["code"] for r in c0.reasons] == ["no_hardware_runs"]
    capability.refresh_from_db()
    assert capability.status == "C1"
    grades = set(capability.evidence.filter(origin="run").values_list("grades__grade", flat=True))
    assert grades == {"E4"}
    assert RunResult.objects.count() == Run.objects.exclude(state__in=stages.ACTIVE_STATES).count()


def soak_running(answer) -> Run | None:
    return Run.objects.filter(answer=answer, stage=stages.SOAK, state=stages.RUNNING, progress__gt=5).first()


def runner_processes(run: Run) -> list[int]:
    """Live processes whose command line points into this run's working directory."""
    return processes_with(f"{run_dir_prefix()}{run.pk}-")


def runner_gone(run: Run, worker) -> None:
    """Wait for the run's runner processes to end: they are killed with their worker, however long a loaded
    machine takes to reap them."""
    wait_until(lambda: runner_processes(run) == [], timeout=60, what="the runner to die", workers=[worker], sweep=False)


# Long enough (about 10 s here; 64 requests took 2 s and were once missed) that the test sees the soak at work
# between two heartbeats, however slow its own polling and sweeping are on a loaded machine.
LONG_SOAK = {"thresholds": {"soak_requests": 384, "soak_concurrency": 4}}


def test_killing_the_pool_child_mid_run_ends_with_one_verdict(
    workers, settings, vendor_user, question, capability, calbin, golden, tmp_path
):
    """The simulator with no token, served by a Celery worker as a target is the older way (docs/deploy.md); an
    agent killed mid-run is test_agent.py's."""
    simulator = workers.celery("simulator", "sim")
    answer = submit(vendor_user, question, capability, calbin, golden, **LONG_SOAK)
    run = wait_until(lambda: soak_running(answer), timeout=180, what="the soak to start", workers=[simulator])
    assert "stage soak started" in run.log_tail  # output and progress stream in while the runner works
    os.kill(simulator.wait_for_pool_child(), signal.SIGKILL)
    runner_gone(run, simulator)  # the runner dies with its parent
    settings.ACCEPTANCE_RUN_DIR = tmp_path / "worker-data" / "runs"  # the worker's, swept from here
    wait_until(
        lambda: Run.objects.get(pk=run.pk).state == stages.PASSED, timeout=120, what="the soak", workers=[simulator]
    )
    runs_sweep()
    assert list(settings.ACCEPTANCE_RUN_DIR.glob(f"{run_dir_prefix()}{run.pk}-*")) == []
    run.refresh_from_db()
    assert run.attempt == 2
    assert list(RunResult.objects.filter(run=run).values_list("attempt", "verdict")) == [(2, stages.PASS)]
    assert "attempt 2" in run.log
    assert simulator.alive()


def test_killing_the_whole_worker_mid_run_and_starting_another_ends_with_one_verdict(
    workers, vendor_user, question, capability, calbin, golden, tmp_path
):
    """As above, on the Celery path: the whole worker killed -9, another started."""
    first = workers.celery("simulator", "sim-1")
    answer = submit(vendor_user, question, capability, calbin, golden, **LONG_SOAK)
    run = wait_until(lambda: soak_running(answer), timeout=180, what="the soak to start", workers=[first])
    first_worker = run.worker
    first.kill()
    runner_gone(run, first)
    run_dir = tmp_path / "worker-data" / "runs"
    assert len(list(run_dir.glob(f"{run_dir_prefix()}{run.pk}-*"))) == 1  # the killed attempt's
    second = workers.celery("simulator", "sim-2")
    wait_until(
        lambda: Run.objects.get(pk=run.pk).state == stages.PASSED, timeout=120, what="the soak", workers=[second]
    )
    run.refresh_from_db()
    assert run.attempt == 2
    assert run.worker != first_worker
    assert RunResult.objects.filter(run=run).count() == 1
    # The new worker's heartbeat removes what the killed one left on this host.
    wait_until(
        lambda: not list(run_dir.glob(f"{run_dir_prefix()}{run.pk}-*")),
        timeout=30,
        what="the killed attempt's directory to go",
        workers=[second],
        sweep=False,
    )


def test_runs_queued_when_redis_is_flushed_are_resent_by_the_sweeper(
    workers, gunicorn_server, settings, vendor_user, organisation, capability, calbin, golden
):
    """The simulator served by its agent: the chains' claim checks wait in Redis for the server's worker, Redis is
    flushed, and the sweeper sends them again; the runner stages that follow are pulled by the agent."""
    settings.ACCEPTANCE_QUEUED_RESEND_AFTER = 2  # the sweeper here stands in for beat; 30 s in production
    simulator_target = target_ensure_simulator()
    _, key = target_token_create(actor=SYSTEM, target=simulator_target, name="this host")
    target_heartbeat(queues=[simulator_target.queue], worker="about-to-start")
    answers = []
    for number in (31, 32, 33):
        question = make_question(f"V{number}", organisation=organisation, state="asked")
        capability.questions.add(question)
        answers.append(
            submit(
                vendor_user,
                question,
                capability,
                calbin,
                golden,
                thresholds={"soak_requests": 16, "soak_concurrency": 4},
            )
        )
    queued = list(Run.objects.filter(state=stages.QUEUED))
    assert len(queued) == 3 and {run.stage for run in queued} == {stages.CLAIM}
    assert queue_length("default") == 3 and queue_length("simulator") == 0
    broker_flush()
    with gunicorn_server() as (url, _):
        server_checks = workers.celery("default", "default")
        agent = workers.agent(url, key)

        def flushed_runs_done_and_chains_moved_on():
            return all(
                Run.objects.filter(pk=run.pk, state=stages.PASSED).exists()
                and Run.objects.filter(chain=run.chain, stage=stages.RUNNER, state=stages.PASSED).exists()
                for run in queued
            )

        wait_until(
            flushed_runs_done_and_chains_moved_on, timeout=180, what="the flushed runs", workers=[server_checks, agent]
        )
    for run in queued:
        run.refresh_from_db()
        assert run.send_count >= 2
        assert Run.objects.get(chain=run.chain, stage=stages.RUNNER).worker.startswith("agent ")
    assert RunResult.objects.filter(run__in=queued).count() == 3


# The board's wall-time limit: well above what the well-behaved runners below take at load 8 (a few seconds
# quiet), so only the sleeper meets it.
BOARD_WALL_SECONDS = 60
HOSTILE = {
    "sleeps": ("import time\ntime.sleep(600)\n", f"wall-time limit of {BOARD_WALL_SECONDS} s exceeded"),
    "allocates": ("b = bytearray(3 * 1024**3)\n", "memory limit of 512 MiB exceeded"),
    "floods": (
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
        "output limit of 1048576 bytes exceeded",
    ),
    "phones home": (
        "import socket\nsocket.create_connection(('192.0.2.10', 443), timeout=5)\n",
        "network access denied in the sandbox",
    ),
    # Four children of 200 MiB: each is under the limit, together they are not.
    "forks a memory hog": (
        "import os, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        block = b'x' * (200 * 1024**2)\n"
        "        time.sleep(60)\n"
        "time.sleep(60)\n",
        "memory limit of 512 MiB exceeded",
    ),
}


WELL_BEHAVED = "print('the example ran')\n"
# Leaves two daemons behind (each out of the example's session and orphaned), then ends well.
DAEMON_TOKEN = uuid.uuid4().hex
DAEMONISES = (
    "import os, subprocess, sys, time\n"
    "daemon = 'import os, time\\nos.setsid()\\nif os.fork(): os._exit(0)\\ntime.sleep(300)'\n"
    f"for _ in range(2): subprocess.Popen([sys.executable, '-c', daemon, '{DAEMON_TOKEN}']).wait()\n"
    "print('the example ran')\n"
)


def test_misbehaving_vendor_code_on_a_board_host_fails_its_run_and_the_worker_takes_the_next_one(
    workers, vendor_user, organisation, capability, calbin, golden, tmp_path
):
    """A vendor's own code runs on a board only as its minimal example (the registered runner measures), in a
    sandbox of its own with the board's limits: each hostile example fails its run naming the limit."""
    board = workers.serve_target(
        "hostile-board",
        HARDWARE_VERSIONS,
        ACCEPTANCE_RUNNER_COMMAND=f"{sys.executable} {BOARD_DOUBLE}",
        ACCEPTANCE_RUNNER_WALL_SECONDS=BOARD_WALL_SECONDS,
        ACCEPTANCE_RUNNER_MEMORY_MB=512,
        ACCEPTANCE_RUNNER_OUTPUT_BYTES=1024**2,
    )
    wait_until(
        lambda: Target.objects.filter(slug="hostile-board", health=Target.OK).exists(),
        timeout=60,
        what="board",
        workers=[board],
    )
    bundles = {
        **{name: script for name, (script, _) in HOSTILE.items()},
        "behaves": WELL_BEHAVED,
        "daemonises": DAEMONISES,
    }
    answers = {}
    for number, (name, script) in enumerate(bundles.items(), start=40):
        question = make_question(f"V{number}", organisation=organisation, state="asked")
        chain_capability = make_capability(f"capability-{number}", questions=[question])
        example = make_artifact(
            vendor_user,
            runner_bundle_bytes(script),
            kind="runner_bundle",
            version=f"{number}.0",
            file_name="example.tar",
        )
        answers[name] = submit(
            vendor_user,
            question,
            chain_capability,
            calbin,
            golden,
            minimal_example={"artifact": example.pk, "command": "python3 run.py"},
        )

    def runner_run(name):
        return (
            Run.objects.filter(answer=answers[name], target__slug="hostile-board", stage=stages.RUNNER)
            .exclude(state__in=stages.ACTIVE_STATES)
            .first()
        )

    for name, (_, reason) in HOSTILE.items():
        run = wait_until(
            lambda name=name: runner_run(name), timeout=300, what=f"the example that {name}", workers=[board]
        )
        assert (run.state, run.verdict) == (stages.FAILED, stages.FAIL), (name, run.reason)
        assert "the minimal example (python3 run.py) ended with" in run.reason, (name, run.reason)
        assert reason in run.reason, (name, run.reason)
        assert run.attempt == 1
    good = wait_until(lambda: runner_run("behaves"), timeout=300, what="the well-behaved example", workers=[board])
    assert good.verdict == stages.PASS, good.reason
    assert "the example ran" in good.result["minimal_example"]["output"]
    daemonised = wait_until(lambda: runner_run("daemonises"), timeout=300, what="the daemonising example")
    assert daemonised.verdict == stages.PASS, daemonised.reason
    assert daemonised.result["minimal_example"]["passed"] is True
    assert processes_with(DAEMON_TOKEN) == []
    assert board.alive()
    assert Run.objects.filter(target__slug="simulator").exclude(state=stages.PENDING).count() == 0
