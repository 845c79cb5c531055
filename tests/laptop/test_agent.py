"""The laptop default serves the bundled simulator as a board is served: its runner stages and health checks are
pulled by the calculet-agent `dev.py run` starts, holding only the server's URL and a target token `run` made."""

from pathlib import Path

from acceptance import stages
from tests.acceptance.workers import processes_with


def environment_of(pid: int) -> set[str]:
    return {item.split(b"=", 1)[0].decode() for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if item}


def test_the_simulator_s_runs_are_claimed_by_an_agent_holding_only_the_url_and_a_token(laptop):
    [agent_pid] = processes_with(f"--state-dir\0{laptop.data_dir / 'agent'}\0")
    assert environment_of(agent_pid) == {"CALCULET_SERVER"}  # the token is in a file of the data folder

    simulator = laptop.get("pm", "/api/v1/targets/simulator/").json()
    assert simulator["pulled"] and simulator["health"] == "ok", simulator
    [agent] = simulator["agents"]

    runs = laptop.get("pm", "/api/v1/runs/?question=V18&target=simulator").json()["results"]
    runner_stages = [run for run in runs if run["stage"] in stages.RUNNER_STAGES]
    assert sorted(run["stage"] for run in runner_stages) == sorted(stages.RUNNER_STAGES)
    for listed in runner_stages:
        run = laptop.get("pm", f"/api/v1/runs/{listed['id']}/").json()
        assert run["state"] == stages.PASSED, (run["stage"], run["reason"])
        assert run["result"]["agent"]["host"] == agent["host"], run["result"].get("agent")
        assert "[calculet-agent]" in run["log"]
        assert set(run["timing"]) == {"queue_wait", "fetch", "runner", "post"}, run["timing"]
    # The server's own checks of the chain ran on the Celery worker `run` starts, never on the agent.
    for run in runs:
        if run["stage"] in stages.SERVICE_STAGES:
            assert run["state"] == stages.PASSED, (run["stage"], run["reason"])
            assert "agent" not in laptop.get("pm", f"/api/v1/runs/{run['id']}/").json()["result"]
