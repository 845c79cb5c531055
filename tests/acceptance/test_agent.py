"""calculet-agent in its own process against calculet served by gunicorn: the agent's environment holds only the
server's URL and the simulator target's token, and the chain still runs to its verdicts. This process plays
Celery beat by calling the sweeper; a default-queue worker does the server's own checks."""

from pathlib import Path

import pytest

from acceptance import selectors, stages
from acceptance.models import Chain, Run, RunResult, RunToken, Target
from acceptance.services import answer_submit, target_ensure_simulator
from acceptance.services.agents import target_token_create
from tests.acceptance.workers import wait_until
from tests.factories import complete_answer_data

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
    _, key = target_token_create(actor="test", target=simulator, name="this host")
    with gunicorn_server() as (url, _):
        server_checks = workers.celery("default", "default")
        agent = workers.agent(url, key)
        assert environment_of(agent.pid) == {"CALCULET_SERVER", "CALCULET_TARGET_TOKEN"}
        wait_until(
            lambda: Target.objects.filter(slug="simulator", health=Target.OK).exists(),
            timeout=60,
            what="the agent's first poll",
            workers=[agent],
        )
        data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
        answer = answer_submit(actor=vendor_user, question=question, data=data)
        chain = Chain.objects.get(answer=answer, target=simulator)
        wait_until(lambda: all_passed(chain), timeout=240, what="the chain", workers=[agent, server_checks])

    runner_runs = chain.runs.filter(stage__in=stages.RUNNER_STAGES, state=stages.PASSED)
    assert runner_runs.count() == len(stages.RUNNER_STAGES)
    for run in runner_runs:
        assert run.worker.startswith("agent "), run.worker
        assert run.result["agent"]["host"] and run.result["device"]["calrt"] == simulator.calrt_version
        assert RunResult.objects.filter(run=run).count() == 1
        assert RunToken.objects.filter(run=run).count() == 1
        assert "calculet-agent" in run.log
    # The server's own checks ran on the default queue, never on the agent.
    for run in chain.runs.exclude(stage__in=stages.RUNNER_STAGES):
        assert not run.worker.startswith("agent "), run.worker
    assert RunResult.objects.count() == Run.objects.exclude(state__in=stages.ACTIVE_STATES).count()
