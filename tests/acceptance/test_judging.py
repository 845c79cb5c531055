"""Runners measure, calculet judges (issue 20.1): each case run for real through the sandbox on a hardware
target, with the simulator's own package and golden."""

import sys
from pathlib import Path

import pytest

from acceptance import stages
from acceptance.models import Target
from acceptance.services import target_register
from acceptance.services.targets import target_heartbeat
from calculet.actors import SYSTEM
from tests.acceptance.test_proof import VERSIONS, answer_with, package, run_chain
from tests.acceptance.workers import BOARD_DOUBLE
from tests.factories import make_artifact, make_capability, make_question, runner_bundle_bytes

pytestmark = pytest.mark.django_db(transaction=True)

CHEATING_RUNNER = Path(__file__).with_name("cheating_runner.py")


def board(runner_command: str) -> None:
    target_register(
        actor=SYSTEM,
        slug="board-1",
        kind=Target.HARDWARE,
        runner_command=runner_command,
        **{f"{key}_version" if key != "chip" else key: value for key, value in VERSIONS.items()},
    )
    target_heartbeat(queues=["board-1"], worker="board-host")


def codes(run) -> list[str]:
    return [finding["code"] for finding in run.findings]


def test_a_runner_that_echoes_a_pass_without_opening_the_package_fails_at_its_first_stage(
    vendor_user, question, capability, simulator_online, tmp_path
):
    board(f"{sys.executable} {CHEATING_RUNNER} echo")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    verdict = chain.runs.get(stage=stages.RUNNER)
    assert verdict.state == stages.FAILED, verdict.reason
    assert "the runner wrote no runner-actual.npz: nothing measured to judge" in verdict.reason
    assert codes(verdict)[:2] == ["claim_unsupported", "no_measurement"]
    # The chain stops there: no later stage ran, so nothing the runner claimed can carry the capability on.
    assert not chain.runs.filter(stage__in=stages.RUNNER_STAGES[1:]).exists()


def test_a_result_claiming_a_pass_its_measured_logits_do_not_support_fails_naming_the_mismatch(
    vendor_user, question, capability, simulator_online, tmp_path
):
    board(f"{sys.executable} {CHEATING_RUNNER} golden-tamper")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    verdict = chain.runs.get(stage=stages.GOLDEN)
    assert verdict.state == stages.FAILED, verdict.reason
    assert verdict.reason.startswith("the runner claims a pass its measurements do not support — decode_logits:")
    assert "cosine" in verdict.reason
    assert codes(verdict)[:2] == ["claim_unsupported", "golden_mismatch"]
    assert verdict.result["verdict"] == "pass"  # what the runner said, kept beside calculet's verdict
    assert verdict.result["judged"]["passed"] is False
    assert verdict.metrics["tensors"]["decode_logits"]["passed"] is False
    assert verdict.metrics["tensors"]["prefill_logits"]["passed"] is True


def test_a_probe_whose_observations_do_not_support_its_pass_fails_naming_the_check(
    vendor_user, organisation, simulator_online, tmp_path
):
    """kv_shift's checks are calculet's, from what the runner observed: a board's runner that says pass over
    positions seq_rm did not leave fails the runner stage, the runner's own probe verdict notwithstanding."""
    board(f"{sys.executable} {CHEATING_RUNNER} runner-kv-shift")
    question = make_question("V26", organisation=organisation, state="asked")
    capability = make_capability("kv-manager-api", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    calbin, golden = package(vendor_user, tmp_path, decode_batch=2)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    verdict = chain.runs.get(stage=stages.RUNNER)
    assert verdict.state == stages.FAILED, verdict.reason
    assert verdict.reason.startswith(
        "the runner claims a pass its measurements do not support — kv_shift: remove: remove.positions: "
        "[0, 1, 2, 3, 4, 5, 6] (calculet expects [0, 1, 2, 6, 7, 8, 9])"
    ), verdict.reason
    assert codes(verdict)[:2] == ["claim_unsupported", "probe_check_failed"]
    assert [p["verdict"] for p in verdict.result["probes"]] == ["pass", "pass"]  # what the runner said
    assert verdict.result["judged"]["probes"] == {"kv_manager": "pass", "kv_shift": "fail"}
    assert verdict.metrics["judged_probes"]["kv_manager"]["verdict"] == "pass"


def test_a_soak_whose_responses_under_load_do_not_match_the_golden_fails_naming_them(
    vendor_user, question, capability, simulator_online, tmp_path
):
    board(f"{sys.executable} {CHEATING_RUNNER} soak-tamper")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    assert chain.runs.get(stage=stages.GOLDEN).state == stages.PASSED
    soak = chain.runs.get(stage=stages.SOAK)
    assert soak.state == stages.FAILED, soak.reason
    assert soak.params["golden_samples"] == 4
    assert soak.reason.startswith(
        "the runner claims a pass its measurements do not support — response 1 decode_logits:"
    ), soak.reason
    assert "response 1 decode_logits: cosine" in soak.reason
    assert codes(soak)[:2] == ["claim_unsupported", "golden_mismatch"]
    assert soak.metrics["golden_under_load"]["response_4.decode_logits"]["passed"] is False


def test_the_registered_runner_s_measurements_pass_when_they_match(
    vendor_user, question, capability, simulator_online, tmp_path
):
    board(f"{sys.executable} {BOARD_DOUBLE}")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    verdict = chain.runs.get(stage=stages.GOLDEN)
    assert verdict.state == stages.PASSED, verdict.reason
    assert verdict.result["judged"] == {
        "passed": True,
        "reason": "the measured logits are within tolerance of the golden",
    }
    assert {name: report["passed"] for name, report in verdict.metrics["tensors"].items()} == {
        "prefill_logits": True,
        "decode_logits": True,
    }
    failure = chain.runs.get(stage=stages.FAILURE)
    assert failure.state == stages.PASSED, failure.reason
    assert failure.result["judged"]["reason"].endswith("faults produced the expected code and recovered")
    integration = chain.runs.get(stage=stages.INTEGRATION)
    assert integration.state == stages.PASSED, integration.reason
    assert integration.result["judged"] == {
        "passed": True,
        "reason": "6 sequences served match calculet's replay alone",
    }
    soak = chain.runs.get(stage=stages.SOAK)
    assert soak.state == stages.PASSED, soak.reason
    assert soak.result["judged"]["passed"] is True
    assert soak.result["judged"]["reason"].startswith("16 requests over ")
    assert soak.result["judged"]["reason"].endswith("; 4 sampled responses under load match the golden")
    # The rates are calculet's, computed from the requests' timings: the runner's agree with them here.
    assert soak.metrics["decode_tokens_per_s"] == soak.result["metrics"]["decode_tokens_per_s"]
    assert soak.metrics["duration_ms"] >= 1000 * soak.params["min_duration_s"]


def test_a_vendor_runner_bundle_never_replaces_the_registered_runner(
    vendor_user, question, capability, simulator_online, tmp_path
):
    board(f"{sys.executable} {BOARD_DOUBLE}")
    calbin, golden = package(vendor_user, tmp_path)
    cheat = make_artifact(
        vendor_user,
        runner_bundle_bytes(CHEATING_RUNNER.read_text(), command=("python3", "run.py", "echo")),
        kind="runner_bundle",
        version="1.0.0",
        file_name="runner.tar",
    )
    answer = answer_with(vendor_user, question, capability, calbin, golden, executable_assets=[calbin.pk, cheat.pk])
    chain = run_chain(answer, "board-1")
    runner = chain.runs.get(stage=stages.RUNNER)
    assert runner.state == stages.PASSED, runner.reason
    assert "board double" in runner.log
    assert runner.result["device"]["double"] is True  # the registered runner's report, not the bundle's
    assert "runner bundle" not in runner.log


@pytest.mark.parametrize(
    ("mode", "stage", "code", "reason"),
    [
        ("runner-no-files", stages.RUNNER, "no_measurement", "the runner wrote no runner-actual.npz"),
        (
            "runner-tamper",
            stages.RUNNER,
            "not_greedy",
            "a generated token is not the argmax of the logits it was chosen from",
        ),
        ("failure-no-files", stages.FAILURE, "no_measurement", "the runner wrote no failure-scenarios.jsonl"),
        (
            "failure-wrong-code",
            stages.FAILURE,
            "wrong_error_code",
            "scenario 0 (kv_apply_failure): the device produced SUCCESS (0); the answer expects KV_APPLY_FAILED (15)",
        ),
        (
            "failure-recovery",
            stages.FAILURE,
            "wrong_recovery",
            "scenario 0 (kv_apply_failure): the runner applied ['reset device', 'configure calbin']; the documented "
            "recovery for KV_APPLY_FAILED (15) is none",
        ),
        (
            "failure-unrecovered",
            stages.FAILURE,
            "not_recovered",
            "scenario 0 (kv_apply_failure): the request after recovery was not measured (no logits)",
        ),
        ("integration-no-files", stages.INTEGRATION, "no_measurement", "the runner wrote no integration-sequences"),
        ("integration-tamper", stages.INTEGRATION, "reference_mismatch", "sequence 2: max_rel 0.5 > 0.01"),
        (
            "integration-prompt",
            stages.INTEGRATION,
            "wrong_prompt",
            "sequence 1: its prompt is not the one the job's seed 0 gives",
        ),
        ("soak-no-files", stages.SOAK, "no_measurement", "the runner wrote no soak-requests.jsonl"),
        ("soak-slow", stages.SOAK, "rate_below_threshold", "the median per-request decode rate is 1.986 token/s"),
        ("soak-short", stages.SOAK, "too_short", "the load held for 0.624 s of device time; the soak must hold 2.0 s"),
        ("soak-few", stages.SOAK, "too_few_requests", "8 requests measured; the soak must serve 16"),
        ("soak-errors", stages.SOAK, "errors_under_load", "2 requests failed under load: {'BUSY': 2}"),
    ],
)
def test_a_runner_whose_measurements_do_not_support_its_pass_fails_the_stage_naming_why(
    vendor_user, question, capability, simulator_online, tmp_path, mode, stage, code, reason
):
    """Each runner below runs the simulator and keeps its passing verdict and metrics, then changes, at one
    stage, the measurements calculet judges: the stage fails naming what they do not support."""
    board(f"{sys.executable} {CHEATING_RUNNER} {mode}")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    run = chain.runs.get(stage=stage)
    assert run.state == stages.FAILED, run.reason
    assert run.result["verdict"] == "pass"  # what the runner said
    assert run.reason.startswith("the runner claims a pass its measurements do not support — "), run.reason
    assert reason in run.reason
    assert codes(run)[:2] == ["claim_unsupported", code]
    assert run.result["judged"]["passed"] is False
