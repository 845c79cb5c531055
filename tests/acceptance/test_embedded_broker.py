"""The laptop default, `scripts/dev.py run` without REDIS_URL: the web server puts the server's own tasks on the
embedded broker (files under the data folder) and the Celery worker `dev.py` starts runs them, outside the
request, while the simulator target's runner stages are pulled by the calculet-agent it starts, whose polls are
the target's health."""

import json
import os
import signal
import socket
import sys
import urllib.request

import pytest
from django.core.management import call_command

from acceptance import selectors, stages
from acceptance.models import Chain, Run, RunResult, Target
from tests.acceptance.workers import ROOT, Worker, dev_script, wait_until, worker_env
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
    dev = dev_script()
    state_dir = data_dir / "agent"
    # As `run` makes it: through the command, the key into the agent's state directory.
    call_command("target_token", "create", "simulator", "--name", dev.AGENT_TOKEN_NAME, "--replace",
                 "--key-file", state_dir / "token")  # fmt: skip
    logs = tmp_path / "logs"
    logs.mkdir()
    [default_worker] = [Worker(command, env, logs / "worker.log") for command in dev.worker_commands(sys.executable)]
    port = free_port()
    web = Worker([sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"], env, logs / "web.log")
    wait_until(lambda: answers_to_web(port), timeout=120, what="the web server", workers=[web], sweep=False)
    # The agent `run` starts, with this checkout's agent (started in agent/, as the suite starts every agent).
    argv = [sys.executable, "-m", "calculet_agent", *dev.agent_command(sys.executable, state_dir)[1:]]
    agent = Worker(argv, dev.agent_env(f"http://127.0.0.1:{port}"), logs / "agent.log", cwd=ROOT / "agent")
    processes = [default_worker, web, agent]
    try:
        wait_until(
            lambda: Target.objects.filter(slug="simulator", health=Target.OK).exists(),
            timeout=120,
            what="the simulator agent's first poll",
            workers=processes,
            sweep=False,
        )

        # With the default worker frozen, the claim check the request queues can only wait on the broker.
        os.killpg(default_worker.pid, signal.SIGSTOP)
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        assert post_answer(port, token, data) == 201
        claim = Run.objects.get(stage=stages.CLAIM)
        assert (claim.state, claim.attempt, claim.send_count) == (stages.QUEUED, 0, 1)
        assert len(list((data_dir / "broker" / "messages").glob("*.default.msg"))) == 1
        os.killpg(default_worker.pid, signal.SIGCONT)

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
        pool = {f"{os.uname().nodename}:{pid}" for pid in default_worker.pool_children()}
        for run in runs:  # the server's checks claimed by the Celery worker, the runner stages by the agent
            assert (run.worker in pool) == (run.stage in stages.SERVICE_STAGES), (run.stage, run.worker)
            assert run.stage in stages.SERVICE_STAGES or run.worker.startswith("agent "), (run.stage, run.worker)
        assert all(run.attempt == 1 and run.started_at is not None for run in runs)
        assert RunResult.objects.filter(run__chain=chain, verdict=stages.PASS).count() == len(runs)
        assert not list((data_dir / "broker" / "messages").glob("*.simulator.msg"))  # no run sent to a queue
        simulator = Target.objects.get(slug="simulator")
        assert simulator.health == Target.OK and simulator.last_heartbeat_worker.startswith("agent ")
    finally:
        for process in processes:
            process.stop()
