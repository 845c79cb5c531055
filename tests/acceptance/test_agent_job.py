"""The job of a runner stage is one: a worker's `runner_execute` and calculet-agent's claim are given the same
job, inputs, files and environment for the same run (`acceptance.services.runs.jobs.runner_job`)."""

import hashlib
import json
from pathlib import Path

import pytest

from acceptance import stages
from acceptance.models import Run
from acceptance.services import chain_start_for_answer, target_ensure_simulator
from acceptance.services.agents import target_token_create
from acceptance.services.inputs import answer_inputs
from acceptance.services.runs import running
from acceptance.services.runs.execute import run_execute
from acceptance.services.runs.reporting import RunReporter
from calculet.actors import SYSTEM
from tests.acceptance.test_agent_api import Agent
from tests.acceptance.test_proof import answer_with, package
from tests.factories import make_capability, make_question

pytestmark = pytest.mark.django_db


def queued_runner_run(answer) -> Run:
    """The answer's first runner stage, queued for the agent once the server's own checks passed here."""
    chain_start_for_answer(answer.pk)
    for _ in range(5):
        run = Run.objects.filter(answer=answer, state=stages.QUEUED).order_by("pk").first()
        assert run is not None
        if run.stage in stages.RUNNER_STAGES:
            return run
        run_execute(run.pk, worker="in-process")
        assert Run.objects.get(pk=run.pk).state == stages.PASSED, Run.objects.get(pk=run.pk).reason
    raise AssertionError("no runner stage was queued")


def local_job(run: Run, monkeypatch) -> dict:
    """What `runner_execute` gives the runner for the run: the job it writes, the environment it adds, and the
    digest of every file under its working directory, with the directory written as {workdir}."""
    seen: dict = {}

    def capture(argv, *, workdir, env, **kwargs):
        placed = str(workdir)
        job_path = Path(argv[argv.index("--job") + 1])
        seen["job"] = json.loads(job_path.read_text().replace(placed, "{workdir}"))
        seen["env"] = {k: v.replace(placed, "{workdir}") for k, v in env.items() if k == "NPU_SIM_DEVICE_CONFIG"}
        seen["files"] = {
            str(path.relative_to(workdir)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in Path(workdir).rglob("*")
            if path.is_file() and path != job_path
        }
        raise OSError("captured")  # the runner is not run: only its job is compared

    monkeypatch.setattr(running, "run_sandboxed", capture)
    outcome = running.runner_execute(run, RunReporter(run), answer_inputs(run.answer))
    assert outcome.reason == "the runner could not be started: captured"
    return seen


def test_a_multi_package_run_served_by_the_agent_gets_the_second_package_and_the_job_a_worker_gives(
    vendor_user, organisation, tmp_path, monkeypatch
):
    simulator = target_ensure_simulator()
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="host 1")
    agent = Agent(key)
    assert agent.register().status_code == 200
    assert agent.claim().status_code == 204  # the first poll: the target is served from now on
    question = make_question("V35", organisation=organisation, state="asked")
    capability = make_capability("dynamic-resident-multi-model", status="C3", pinned_status="C3", questions=[question])
    calbin, golden = package(vendor_user, tmp_path, features=("residency", "multi_model"))
    other, _ = package(vendor_user, tmp_path, decode_batch=4, features=("residency", "multi_model"), version="1.0.1")
    answer = answer_with(vendor_user, question, capability, calbin, golden, extra_assets=[other])
    run = queued_runner_run(answer)

    claimed = agent.claim()
    assert claimed.status_code == 200, claimed.content
    served = claimed.json()["job"]
    assert claimed.json()["run"] == run.pk
    assert served["job"]["packages"] == {"second": "{workdir}/inputs/second.tar"}
    by_name = {item["name"]: item["sha256"] for item in served["inputs"]}
    assert by_name == {
        "inputs/calbin.tar": calbin.blob.sha256,
        "inputs/second.tar": other.blob.sha256,
        "inputs/golden.npz": golden.blob.sha256,
    }

    run.refresh_from_db()
    local = local_job(run, monkeypatch)
    assert local["job"] == served["job"]
    assert local["env"] == served["env"] == {"NPU_SIM_DEVICE_CONFIG": "{workdir}/inputs/device.json"}
    device = hashlib.sha256(served["files"]["inputs/device.json"].encode()).hexdigest()
    assert local["files"] == {**by_name, "inputs/device.json": device}
