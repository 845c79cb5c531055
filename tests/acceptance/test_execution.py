"""A whole chain executed in this process through the same service a worker task calls (no broker
involved), with real runner subprocesses in the sandbox."""

from dataclasses import replace

import pytest

from acceptance import selectors, stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain, Run
from acceptance.recipes import recipe_for
from acceptance.services import answer_submit, capability_promote, chain_start_for_answer
from npu_sim.calbin.goldens import read_golden, write_golden
from tests.acceptance.conftest import edit_calbin
from tests.factories import answer_draft, complete_answer_data, drive, make_artifact, sdk_checked, tiny_golden_bytes

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_complete_answer_passes_all_seven_stages_and_reaches_c2_then_c1_with_the_sdk_check(
    answer, simulator_online, pm_user
):
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    drive(chain)
    rows = selectors.chain_stages(chain)
    assert [(stage, state) for stage, state, _ in rows] == [(stage, stages.PASSED) for stage in stages.CHAIN_STAGES]
    # Every runner stage sent the capability's recipe: decode at batch 8, each lane against the vendor's golden.
    for run in chain.runs.filter(stage__in=stages.RUNNER_STAGES):
        assert (
            run.probes == [{"name": "decode_batch", "params": {"batch": 8}}]
            and run.recipe_version == recipe_for("decode-batch-8").version
        )
        assert [(p["name"], p["verdict"]) for p in run.result["probes"]] == [("decode_batch", "pass")]
    golden = chain.runs.get(stage=stages.GOLDEN).result["probes"][0]
    assert golden["metrics"]["worst_lane_cosine"] >= 0.9999
    soak = chain.runs.get(stage=stages.SOAK)
    soak_probe = soak.result["probes"][0]["metrics"]
    assert soak.params["requests"] == 16 and soak_probe["completed"] == 16
    assert soak_probe["decode_tokens_per_s"]["p50"] >= soak.params["min_decode_tokens_per_s"]
    assert "PROGRESS" not in soak.log_tail or soak.progress == 100
    assert soak.log and soak.result["sandbox"]["network_isolation"]
    answer.question.refresh_from_db()
    # The passing chain accepts V18's one deliverable, the package: the question closes on it.
    assert answer.question.deliverables.get().state == "accepted"
    assert answer.question.state == "closed"
    blocked = capability_promote(actor=pm_user, capability=chain.capability, request=PromotionRequest(to="C1"))
    assert [r["code"] for r in blocked.reasons] == ["no_sdk_evidence"]
    attempt = capability_promote(actor=pm_user, capability=chain.capability, request=PromotionRequest(to="C2"))
    assert attempt.allowed, attempt.reasons
    assert attempt.versions == {"calrt": "0.7.6", "driver": "2.3.0", "firmware": "1.8.0", "chip": "calculet-2c"}
    sdk_checked(chain.capability)
    assert capability_promote(actor=pm_user, capability=chain.capability, request=PromotionRequest(to="C1")).allowed
    blocked = capability_promote(actor=pm_user, capability=chain.capability, request=PromotionRequest(to="C0"))
    assert not blocked.allowed
    assert [r["code"] for r in blocked.reasons] == ["no_hardware_runs"]
    # Every runner verdict on the simulator is evidence of grade E4.
    grades = {
        g
        for run in chain.runs.filter(stage__in=stages.RUNNER_STAGES)
        for g in run.evidence.grades.values_list("grade", flat=True)
    }
    assert grades == {"E4"}


def test_a_golden_mismatch_fails_the_golden_stage_and_stops_the_chain(
    vendor_user, organisation, question, capability, calbin, simulator_online, tmp_path
):
    """A golden whose decode logits are not what the package computes (each row moved to other tokens)."""
    delivered = read_golden(tiny_golden_bytes(tmp_path), "vendor")
    wrong = replace(delivered, decode_logits=delivered.decode_logits[:, ::-1].copy())
    golden = make_artifact(vendor_user, write_golden(wrong), kind="golden", version="2.0.0", file_name="wrong.npz")
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    drive(chain)
    states = {stage: state for stage, state, _ in selectors.chain_stages(chain)}
    assert states[stages.GOLDEN] == stages.FAILED
    assert states[stages.FAILURE] == stages.PENDING
    run = chain.runs.get(stage=stages.GOLDEN)
    assert "decode_logits: cosine" in run.reason, run.reason
    assert "golden_mismatch" in [finding["code"] for finding in run.findings]
    assert run.metrics["tensors"]["decode_logits"]["passed"] is False
    assert not Run.objects.filter(stage=stages.FAILURE).exists()


def test_an_unknown_fault_scenario_is_refused_by_the_runner_as_an_error(
    vendor_user, question, capability, calbin, golden, simulator_online
):
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    data["error_paths"] = [{"scenario": "cosmic ray in the KV cache", "expect_code": 15}]
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    drive(chain)
    run = chain.runs.get(stage=stages.FAILURE)
    assert run.verdict == stages.ERROR
    assert run.reason.startswith("the runner refused the job (exit 2)")
    assert "cosmic ray" in run.reason


def test_a_package_for_another_chip_fails_at_the_artifact_stage_before_any_runner(
    vendor_user, organisation, question, capability, golden, calbin_bytes, simulator_online, tmp_path
):
    package = make_artifact(
        vendor_user,
        edit_calbin(calbin_bytes, "package_info.txt", "compat.chip", "calculet-4c"),
        kind="calbin",
        version="3.0.0",
        file_name="t.tar",
    )
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=package, golden=golden)),
    )
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    drive(chain)
    artifact_run = chain.runs.get(stage=stages.ARTIFACT)
    assert artifact_run.verdict == stages.FAIL
    assert "calculet-2c" in artifact_run.reason
    assert not chain.runs.filter(stage=stages.RUNNER).exists()
