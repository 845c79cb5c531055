"""The failure stage's rules as calculet judges them from what a runner wrote, on measurements built here: a
fault "expected" to succeed shows nothing, and a request after recovery that ended in an error did not
recover, whatever its logits say."""

import json

import numpy as np
import pytest

from acceptance.judging import failure_judgement, reference_golden, stage_judgement
from npu_sim.calbin.build import build_calbin
from npu_sim.calbin.goldens import GoldenSet
from npu_sim.faults import EXPECTED_CODES
from npu_sim.runner import run_job

STEPS = 2
VOCAB = 8
CRASH_RECOVERY = ["reset device", "configure calbin"]  # what the runtime documents for DEVICE_CRASHED


def golden(decode_steps: int = STEPS) -> GoldenSet:
    rows = np.random.default_rng(0).standard_normal((1 + decode_steps, VOCAB)).astype(np.float32)
    bits = (rows.view(np.uint32) >> 16).astype(np.uint16)
    prompt, tokens = np.array([1, 2, 3], dtype=np.int32), np.arange(decode_steps, dtype=np.int32)
    return GoldenSet("golden.npz", prompt, tokens, bits[:1], bits[1:])


def measured(tmp_path, scenarios: list[dict], reference: GoldenSet) -> None:
    """The runner's two files: each scenario's line, and its request after recovery equal to the golden."""
    lines = [
        {"scenario": index, "fault": s["fault"], "at_step": 0, "recovery": CRASH_RECOVERY, **s["measured"]}
        for index, s in enumerate(scenarios)
    ]
    (tmp_path / "failure-scenarios.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    after = np.concatenate([reference.prefill_logits, reference.decode_logits])
    np.savez(tmp_path / "failure-actual.npz", **{f"scenario_{i}_after": after for i in range(len(scenarios))})


def judge(tmp_path, expect_code: int, produced_code: int, after_code: int, **observed):
    reference = golden()
    observed = {"produced_code": produced_code, "after_code": after_code, **observed}
    measured(tmp_path, [{"fault": "device_crash", "measured": observed}], reference)
    params = {"scenarios": [{"fault": "device_crash", "expect_code": expect_code}], "decode_steps": STEPS}
    return failure_judgement({"verdict": "pass"}, tmp_path, reference, params)


def test_a_crash_that_produced_its_code_and_recovered_passes(tmp_path):
    judged = judge(tmp_path, expect_code=23, produced_code=23, after_code=0)
    assert judged.passed, judged.reason


def test_an_error_path_expecting_success_proves_no_fault_took_effect(tmp_path):
    judged = judge(tmp_path, expect_code=0, produced_code=0, after_code=0, recovery=[])
    assert not judged.passed
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "no_fault_effect"]
    assert "an error path expecting SUCCESS proves no fault took effect" in judged.reason


def test_a_request_after_recovery_that_ended_in_an_error_did_not_recover(tmp_path):
    judged = judge(tmp_path, expect_code=23, produced_code=23, after_code=23)
    assert not judged.passed
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "not_recovered"]
    assert "the request after recovery ended" in judged.reason


def test_a_fault_injected_at_another_step_than_the_job_asks_is_not_the_scenario_measured(tmp_path):
    judged = judge(tmp_path, expect_code=23, produced_code=23, after_code=0, at_step=999)
    assert not judged.passed
    assert "scenario_unmeasured" in [f["code"] for f in judged.findings]
    assert "injected at step 999; the job asks for step 0" in judged.reason


@pytest.mark.parametrize(
    ("applied", "named"),
    [
        (
            [],
            "the runner applied no recovery; the documented recovery for DEVICE_CRASHED (23) is reset device, "
            "configure calbin",
        ),
        (["reset"], "the runner applied ['reset']; the documented recovery"),
        (["configure calbin", "reset device"], "the runner applied ['configure calbin', 'reset device']"),
        (["reset core 0.0"], "the runner applied ['reset core 0.0']"),
    ],
)
def test_a_recovery_other_than_the_documented_one_for_the_code_fails(tmp_path, applied, named):
    judged = judge(tmp_path, expect_code=23, produced_code=23, after_code=0, recovery=applied)
    assert not judged.passed
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "wrong_recovery"]
    assert f"scenario 0 (device_crash): {named}" in judged.reason


def test_a_code_with_no_documented_recovery_is_no_recovery_to_accept(tmp_path):
    judged = judge(tmp_path, expect_code=22, produced_code=22, after_code=0)
    assert "wrong_recovery" in [f["code"] for f in judged.findings]
    assert "no recovery is documented for DEVICE_NEEDS_RESET (22)" in judged.reason


def test_a_core_exception_must_reset_the_faulted_core(tmp_path):
    reference = golden()
    scenario = {"fault": "core_exception", "chiplet": 1, "core": 2}
    measured(
        tmp_path,
        [{**scenario, "measured": {"produced_code": 21, "after_code": 0, "recovery": ["reset core 0.0"]}}],
        reference,
    )
    params = {"scenarios": [{**scenario, "expect_code": 21}], "decode_steps": STEPS}
    judged = failure_judgement({"verdict": "fail"}, tmp_path, reference, params)
    assert [f["code"] for f in judged.findings] == ["wrong_recovery"]
    assert "the documented recovery for CORE_EXCEPTION (21) is reset core 1.2" in judged.reason
    measured(
        tmp_path,
        [{**scenario, "measured": {"produced_code": 21, "after_code": 0, "recovery": ["reset core 1.2"]}}],
        reference,
    )
    assert failure_judgement({"verdict": "pass"}, tmp_path, reference, params).passed


def test_a_golden_without_a_decode_step_is_no_reference_to_judge_against(tmp_path):
    empty = golden(decode_steps=0)
    path = tmp_path / "golden.npz"
    np.savez(path, **empty.arrays())
    with pytest.raises(ValueError, match="has no decode step to judge against"):
        reference_golden("vendor", path, tmp_path / "calbin")


def vendor_golden(tmp_path, decode_steps: int):
    path = tmp_path / "golden.npz"
    np.savez(path, **golden(decode_steps).arrays())
    return path


@pytest.mark.parametrize("stage", ["golden", "failure", "soak"])
def test_a_golden_of_one_decode_step_is_too_short_to_judge_by(tmp_path, stage):
    params = {"golden_samples": 4} if stage == "soak" else {}
    judged = stage_judgement(
        stage, {"verdict": "pass"}, tmp_path, params, [], tmp_path, "vendor", vendor_golden(tmp_path, 1)
    )
    assert not judged.passed
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "golden_too_short"]
    assert "the golden (" in judged.reason and "holds 1 decode steps; calculet judges by at least 4" in judged.reason


def test_a_golden_as_long_as_calculet_s_minimum_is_judged_and_the_answer_may_ask_for_more(tmp_path):
    path = vendor_golden(tmp_path, 4)
    reference = golden(4)
    measured(tmp_path, [{"fault": "device_crash", "measured": {"produced_code": 23, "after_code": 0}}], reference)
    params = {"scenarios": [{"fault": "device_crash", "expect_code": 23}]}
    assert stage_judgement("failure", {"verdict": "pass"}, tmp_path, params, [], tmp_path, "vendor", path).passed
    judged = stage_judgement("golden", {}, tmp_path, {"min_decode_steps": 8}, [], tmp_path, "vendor", path)
    assert [f["code"] for f in judged.findings] == ["golden_too_short"]
    assert "holds 4 decode steps; calculet judges by at least 8" in judged.reason
    lowered = stage_judgement(
        "golden", {}, tmp_path, {"min_decode_steps": 1}, [], tmp_path, "vendor", vendor_golden(tmp_path, 2)
    )
    assert [f["code"] for f in lowered.findings] == ["golden_too_short"]  # a job's lower figure does not count


def test_the_simulator_s_recovery_of_every_fault_kind_is_the_documented_one(tmp_path):
    """The runner's own recoveries (`npu_sim.client.recover`) against calculet's table: every default scenario."""
    calbin = build_calbin(tmp_path / "package", decode_batch=1)
    workdir = tmp_path / "run"
    workdir.mkdir()
    job = {"schema_version": 2, "stage": "failure", "calbin": str(calbin), "probes": [], "params": {}}
    result = run_job({**job, "golden_source": "package"}, workdir=workdir)
    judged = stage_judgement("failure", result, workdir, {}, [], calbin, "package", None)
    assert judged.passed, judged.reason
    assert len(judged.metrics["scenarios"]) == len(EXPECTED_CODES)
