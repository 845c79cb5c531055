"""The newcomer's demo: issue 11's story built through the services only (whatever ALLOWED_HOSTS says), told
once, on the in-process worker, on the simulator's calculet-agent as `dev.py run` serves it, and honestly when
nothing serves the simulator."""

import pytest
from django.core.management import call_command
from django.utils import timezone

from acceptance import stages
from acceptance.judging import EXAMPLE_NOT_RUN
from acceptance.models import Chain, PromotionAttempt, Run, RunResult
from acceptance.services import target_ensure_simulator
from acceptance.services.agents import target_token_create
from calculet.actors import SYSTEM
from calculet.models import AuditEntry
from evidence.models import Capability, EvidenceItem
from vendor.models import Answer, ApiToken, Artifact, Comment, Deliverable, DocumentReview, Question, Upload


def counts() -> dict[str, int]:
    models = [Answer, Artifact, Upload, ApiToken, PromotionAttempt, Run, AuditEntry, Comment, DocumentReview]
    return {model.__name__: model.objects.count() for model in [*models, EvidenceItem]}


def simulator_chain(code: str) -> Chain:
    return Chain.objects.get(answer__question__code=code, target__slug="simulator")


def reason_codes(attempt: PromotionAttempt) -> list[str]:
    return [reason["code"] for reason in attempt.reasons]


def assert_the_story_was_told(output: str, *, by_agent: bool = False) -> None:
    """`by_agent`: calculet-agent served the simulator, so the vendor's example was recorded as not run."""
    # V18: the batch-8 package, uploaded through the tus services, proven on the simulator.
    v18 = Answer.objects.get(question__code="V18")
    assert v18.complete and v18.missing == [] and v18.deliverable.key == "package-batch-8"
    uploaded = Artifact.objects.filter(uploads__isnull=False, state=Artifact.VERIFIED).distinct()
    assert sorted(uploaded.values_list("kind", flat=True)) == ["calbin", "golden", "sdk", "sdk"]
    chain = simulator_chain("V18")
    assert sorted(chain.runs.values_list("stage", flat=True)) == sorted(stages.CHAIN_STAGES)
    assert set(chain.runs.values_list("state", flat=True)) == {stages.PASSED}
    runner = chain.runs.get(stage=stages.RUNNER)
    assert [(probe["name"], probe["verdict"]) for probe in runner.result["probes"]] == [("decode_batch", "pass")]
    example = runner.result["minimal_example"]
    if by_agent:
        assert not example["ran"] and example["detail"] == EXAMPLE_NOT_RUN and runner.result["agent"]["host"]
    else:
        assert example["ran"] and example["passed"] and "checking calbin.tar" in example["output"]

    attempts = {a.to_status: a for a in PromotionAttempt.objects.filter(capability__slug="decode-batch-8")}
    assert attempts["C2"].allowed and attempts["C2"].answer_id == v18.pk
    assert attempts["C1"].allowed, attempts["C1"].reasons  # the SDK check found its calls (E2, from V20's SDK)
    assert not attempts["C0"].allowed and reason_codes(attempts["C0"]) == ["no_hardware_runs"]
    assert Capability.objects.get(slug="decode-batch-8").status == "C1"

    question = Question.objects.get(code="V18")
    states = dict(question.deliverables.values_list("key", "state"))
    assert states == {"package-batch-4": "owed", "package-batch-8": "accepted", "package-batch-16": "owed"}
    assert question.state != "closed"
    assert "V18 is verifying and owes package-batch-4, package-batch-16" in output

    # V17: the same package offered as the sampling package cannot exercise the sampling probe.
    v17_runner = simulator_chain("V17").runs.get(stage=stages.RUNNER)
    assert v17_runner.state == stages.FAILED
    assert ("probes.sampling", "not_exercised") in [(f["field"], f["code"]) for f in v17_runner.findings]
    assert not simulator_chain("V17").runs.filter(stage=stages.GOLDEN).exists()
    sampling = PromotionAttempt.objects.get(capability__slug="npu-sampling")
    # Pinned at C3, it moves on an attested board's runs only: the gate names those as missing.
    assert not sampling.allowed and reason_codes(sampling) == ["pinned_needs_full_proof", "no_hardware_runs"]
    assert Capability.objects.get(slug="npu-sampling").status == "C3"
    assert "sampling (not_exercised" in output

    # V20: the SDK, checked in its headers and the library's dynamic symbols (E2), accepted; it carries the
    # calls a decode package is driven through too, so it is E2 for decode batch 8 (C1 above), never for the
    # KV manager, whose other calls it lacks.
    sdk = Deliverable.objects.get(question__code="V20", key="parallel-mode-sdk")
    assert sdk.state == Deliverable.ACCEPTED, sdk.reason
    check = EvidenceItem.objects.get(origin="check", deliverable=sdk)
    assert (check.grade_text, check.versions) == ("E2", {"calrt": "0.7.6"})
    proven = set(check.capabilities.values_list("slug", flat=True))
    assert {"parallel-mode", "c-api-nonblocking", "decode-batch-8"} <= proven
    assert "kv-manager-api" not in proven
    assert "V20's SDK check accepted parallel-mode-sdk" in output

    # V60: the written policy reviewed by the PM, accepted, and the question closed.
    v60 = Question.objects.get(code="V60")
    assert v60.state == "closed"
    review = DocumentReview.objects.get(deliverable__question=v60)
    assert review.accepted and review.reviewer.username == "pm" and all(item["ticked"] for item in review.items)
    assert review.elements["version"] == {"verdict": "present", "reason": ""}
    assert review.elements["golden"]["verdict"] == "not_applicable" and review.elements["golden"]["reason"]
    assert EvidenceItem.objects.filter(origin="review", deliverable=review.deliverable, grades__grade="E3").exists()

    # The team's work: assignments, due dates and V18's thread.
    v18_question, v17_question = Question.objects.get(code="V18"), Question.objects.get(code="V17")
    assert (v18_question.assignee.username, v17_question.assignee.username) == ("lin", "acme-engineer")
    assert v18_question.due_date > v17_question.due_date >= timezone.localdate()
    thread = list(Comment.objects.filter(question=v18_question).order_by("id"))
    assert [comment.author.username for comment in thread] == ["pm", "acme-engineer"]
    assert [person.username for person in thread[1].mentions.all()] == ["pm"]
    assert thread[1].artifacts.get().kind == "calbin"

    token = ApiToken.objects.get(user__username="acme-engineer")
    assert token.prefix in output and "pm / calculet-demo" in output
    assert "Still running" not in output


@pytest.mark.django_db(transaction=True)
def test_seed_demo_tells_the_story_once_whatever_the_allowed_hosts(chain_in_process, settings, tmp_path, capsys):
    settings.DATA_DIR = tmp_path
    settings.ALLOWED_HOSTS = ["calculet.example"]  # no request is made: testserver need not be allowed
    call_command("import_checklist")
    call_command("seed_demo")
    assert_the_story_was_told(capsys.readouterr().out)

    before = counts()
    call_command("seed_demo")
    assert counts() == before
    assert ApiToken.objects.get(user__username="acme-engineer").prefix in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_without_a_worker_the_demo_names_the_chains_still_running_and_asks_no_promotion(
    request, settings, tmp_path, capsys
):
    from acceptance.services import runs_sweep
    from acceptance.tasks import deliverable_check_task
    from tests.acceptance.workers import broker_flush

    settings.DATA_DIR = tmp_path
    settings.ACCEPTANCE_TARGET_HEARTBEAT_SECONDS = 1  # how long the demo waits for a worker to report itself
    call_command("import_checklist")
    try:
        call_command("seed_demo", "--wait", "5")
        output = capsys.readouterr().out
        assert "Still running, so the promotions that need their verdicts were not asked" in output
        for code in ("V18", "V17"):
            run = simulator_chain(code).runs.get()
            assert f"{code}'s chain on simulator: Claim pending (run {run.pk})" in output
        assert "nothing serves the simulator target" in output
        assert "V20's SDK check (a worker of the default queue runs it)" in output
        assert not PromotionAttempt.objects.exists()
        assert Question.objects.get(code="V60").state == "closed"  # a review needs no worker

        # Once a worker serves the target (this process, from here on) and the chains have run, the next run
        # of the command finishes the story.
        request.getfixturevalue("chain_in_process")
        runs_sweep()  # the pending runs go to the target that now accepts them
        deliverable_check_task(Answer.objects.get(question__code="V20").pk)  # the message a worker would take
        call_command("seed_demo", "--wait", "5")
        assert_the_story_was_told(capsys.readouterr().out)
    finally:
        broker_flush()  # the run messages no worker took


@pytest.mark.django_db(transaction=True)
def test_seed_demo_waits_for_its_chains_on_the_simulator_s_agent(workers, gunicorn_server, settings, tmp_path, capsys):
    """As `scripts/dev.py run` serves it: the simulator's runner stages pulled by calculet-agent from calculet
    served by gunicorn, the server's own checks on a Celery worker of the default queue."""
    settings.DATA_DIR = tmp_path
    call_command("import_checklist")
    _, key = target_token_create(actor=SYSTEM, target=target_ensure_simulator(), name="this host")
    with gunicorn_server() as (url, _):
        workers.celery("default", "default")  # the claim and artifact checks, the SDK check
        workers.agent(url, key)
        call_command("seed_demo")
    assert_the_story_was_told(capsys.readouterr().out, by_agent=True)
    runner_workers = RunResult.objects.filter(run__stage__in=stages.RUNNER_STAGES).values_list("worker", flat=True)
    assert runner_workers and all(worker.startswith("agent ") for worker in runner_workers)


@pytest.mark.django_db(transaction=True)
def test_without_a_compiler_the_demo_skips_the_sdk_and_says_so(
    chain_in_process, settings, tmp_path, capsys, monkeypatch
):
    def no_compiler(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "g++")

    monkeypatch.setattr("calculet.demo.sdk_archive", no_compiler)
    settings.DATA_DIR = tmp_path
    call_command("import_checklist")
    call_command("seed_demo")
    output = capsys.readouterr().out
    assert "skipped V20's SDK: it is built with g++, which could not build it" in output
    assert not Answer.objects.filter(question__code="V20").exists()
    assert Deliverable.objects.get(question__code="V20", key="parallel-mode-sdk").state == Deliverable.OWED
    # The rest of the story is told; without the SDK check decode batch 8 stops at C2.
    assert Capability.objects.get(slug="decode-batch-8").status == "C2"
    c1 = PromotionAttempt.objects.get(capability__slug="decode-batch-8", to_status="C1")
    assert not c1.allowed and reason_codes(c1) == ["no_sdk_evidence"]
    assert "Still running" not in output
