"""The failure stage's rules as calculet judges them from what a runner wrote, on measurements built here: a
fault "expected" to succeed shows nothing, and a request after recovery that ended in an error did not
recover, whatever its logits say."""

import json

import numpy as np
import pytest

from acceptance.judging import failure_judgement, reference_golden
from npu_sim.calbin.goldens import GoldenSet

STEPS = 2
VOCAB = 8


def golden(decode_steps: int = STEPS) -> GoldenSet:
    rows = np.random.default_rng(0).standard_normal((1 + decode_steps, VOCAB)).astype(np.float32)
    bits = (rows.view(np.uint32) >> 16).astype(np.uint16)
    prompt, tokens = np.array([1, 2, 3], dtype=np.int32), np.arange(decode_steps, dtype=np.int32)
    return GoldenSet("golden.npz", prompt, tokens, bits[:1], bits[1:])


def measured(tmp_path, scenarios: list[dict], reference: GoldenSet) -> None:
    """The runner's two files: each scenario's line, and its request after recovery equal to the golden."""
    lines = [
        {"scenario": index, "fault": s["fault"], "at_step": 0, "recovery": ["reset"], **s["measured"]}
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
    judged = judge(tmp_path, expect_code=0, produced_code=0, after_code=0)
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


def test_a_golden_without_a_decode_step_is_no_reference_to_judge_against(tmp_path):
    empty = golden(decode_steps=0)
    path = tmp_path / "golden.npz"
    np.savez(path, **empty.arrays())
    with pytest.raises(ValueError, match="has no decode step to judge against"):
        reference_golden("vendor", path, tmp_path / "calbin")
