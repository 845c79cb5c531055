"""The laptop default, `scripts/dev.py run` without REDIS_URL: the web server puts tasks on the embedded broker
(files under the data folder) and the workers `dev.py` starts run them, outside the request, with the simulator
target's health coming from its worker's heartbeats."""

import json
import os
import signal
import socket
import sys
import urllib.request

import pytest

from acceptance import selectors, stages
from acceptance.models import Chain, Run, RunResult, Target
from tests.acceptance.workers import Worker, dev_script, wait_until, worker_env
from tests.factories import complete_answer_data
from vendor.inputs import member_draft
from vendor.services.organisations import api_user_create

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_to_web(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def post_answer(port: int, token: str, data: dict) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/questions/V18/answers/",
        data=json.dumps(data).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status


def test_dev_run_workers_run_a_chain_queued_by_a_request_after_it_returned(
    organisation, question, capability, calbin, golden, tmp_path
):
    _engineer, token = api_user_create(member_draft("vic", organisation.slug, "vendor"))
    data_dir = tmp_path / "data"
    env = worker_env(REDIS_URL="", CALCULET_DATA_DIR=data_dir)
    logs = tmp_path / "logs"
    logs.mkdir()
    default_worker, simulator_worker = (
        Worker(command, env, logs / f"worker-{number}.log")
        for number, command in enumerate(dev_script().worker_commands(sys.executable))
    )
    port = free_port()
    web = Worker([sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"], env, logs / "web.log")
    processes = [default_worker, simulator_worker, web]
    try:
        wait_until(
            lambda: Target.objects.filter(slug="simulator", health=Target.OK).exists(),
            timeout=120,
            what="the simulator worker's heartbeat",
            workers=processes,
            sweep=False,
        )
        wait_until(lambda: answers_to_web(port), timeout=120, what="the web server", workers=processes, sweep=False)

        # With the simulator's worker frozen, the run the request queues can only wait on the broker.
        os.killpg(simulator_worker.pid, signal.SIGSTOP)
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        assert post_answer(port, token, data) == 201
        claim = Run.objects.get(stage=stages.CLAIM)
        assert (claim.state, claim.attempt, claim.send_count) == (stages.QUEUED, 0, 1)
        assert len(list((data_dir / "broker" / "messages").glob("*.simulator.msg"))) == 1
        os.killpg(simulator_worker.pid, signal.SIGCONT)

        chain = Chain.objects.get(target__slug="simulator")
        wait_until(
            lambda: all(state == stages.PASSED for _, state, _ in selectors.chain_stages(chain)),
            timeout=300,
            what="the chain on the simulator",
            workers=processes,
            sweep=False,
        )
        runs = list(Run.objects.filter(chain=chain))
        assert len(runs) == len(stages.CHAIN_STAGES)
        pool = {f"{os.uname().nodename}:{pid}" for pid in simulator_worker.pool_children()}
        assert {run.worker for run in runs} <= pool  # each claimed (running) by the simulator's worker
        assert all(run.attempt == 1 and run.started_at is not None for run in runs)
        assert RunResult.objects.filter(run__chain=chain, verdict=stages.PASS).count() == len(runs)
        simulator = Target.objects.get(slug="simulator")
        assert (simulator.health, simulator.last_heartbeat_worker) == (Target.OK, f"simulator@{os.uname().nodename}")
    finally:
        for process in processes:
            process.stop()
