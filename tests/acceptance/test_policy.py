"""The chain's stage logic and the promotion policy as data: no database."""

import pytest

from acceptance import stages
from acceptance.policy import DEFAULT_POLICY, AnswerFacts, ChainFacts, evaluate, policy_check

ALL_PASSED = dict.fromkeys(stages.CHAIN_STAGES, stages.PASSED)


def chain(kind: str, states: dict, chain_id: int = 1) -> ChainFacts:
    return ChainFacts(
        chain_id=chain_id,
        target_name=kind,
        target_kind=kind,
        stage_states={stage: states.get(stage, stages.PENDING) for stage in stages.CHAIN_STAGES},
        stage_run_ids={stage: chain_id * 100 + i for i, stage in enumerate(stages.CHAIN_STAGES) if stage in states},
    )


def passed_up_to(last: str) -> dict:
    return dict.fromkeys(stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(last) + 1], stages.PASSED)


def codes(decision) -> list[str]:
    return [item["code"] for item in decision.reasons]


def test_stage_state_follows_latest_run_on_current_inputs():
    assert stages.stage_state(None, None, "d1") == stages.PENDING
    assert stages.stage_state(stages.PASSED, "d1", "d1") == stages.PASSED
    assert stages.stage_state(stages.PASSED, "d0", "d1") == stages.STALE
    assert stages.stage_state(stages.RUNNING, "d1", "d1") == stages.RUNNING


def test_chain_next_runs_the_first_stage_not_passed_only_after_the_one_before():
    run = object()  # the stage's latest run; chain_next only asks whether there is one
    rows = [(s, stages.PASSED, run) for s in stages.CHAIN_STAGES[:2]] + [
        (s, stages.PENDING, None) for s in stages.CHAIN_STAGES[2:]
    ]
    assert stages.chain_next(rows) == (stages.RUN, stages.RUNNER)
    rows[2] = (stages.RUNNER, stages.RUNNING, run)
    assert stages.chain_next(rows) == (stages.WAIT, stages.RUNNER)
    rows[2] = (stages.RUNNER, stages.PENDING, run)  # a run waiting for its target
    assert stages.chain_next(rows) == (stages.WAIT, stages.RUNNER)
    rows[2] = (stages.RUNNER, stages.FAILED, run)
    assert stages.chain_next(rows) == (stages.STOPPED, stages.RUNNER)
    rows[1] = (stages.ARTIFACT, stages.STALE, run)  # its latest run ran on older inputs
    assert stages.chain_next(rows) == (stages.RUN, stages.ARTIFACT)
    assert stages.chain_next([(s, stages.PASSED, run) for s in stages.CHAIN_STAGES]) == (stages.DONE, None)


def test_chain_position_is_the_first_stage_not_passed():
    run = object()
    rows = [(s, stages.PASSED, run) for s in stages.CHAIN_STAGES]
    assert stages.chain_position(rows) == stages.DONE
    rows[3] = (stages.GOLDEN, stages.FAILED, run)
    rows[5] = (stages.INTEGRATION, stages.PENDING, None)
    assert stages.chain_position(rows) == stages.GOLDEN


def test_c2_needs_claim_and_artifact():
    answers = [AnswerFacts(1, [chain("simulator", passed_up_to(stages.CLAIM))])]
    blocked = evaluate(DEFAULT_POLICY, current="C3", to="C2", pinned_status="", answers=answers)
    assert not blocked.allowed
    assert codes(blocked) == ["stage_not_passed"]
    assert "artifact" in blocked.reasons[0]["message"]
    answers = [AnswerFacts(1, [chain("simulator", passed_up_to(stages.ARTIFACT))])]
    assert evaluate(DEFAULT_POLICY, current="C3", to="C2", pinned_status="", answers=answers).allowed


def test_c1_needs_runner_and_golden_on_a_target_and_relies_on_their_runs():
    answers = [AnswerFacts(1, [chain("simulator", passed_up_to(stages.GOLDEN))])]
    decision = evaluate(DEFAULT_POLICY, current="C3", to="C1", pinned_status="", answers=answers)
    assert decision.allowed
    assert decision.answer_id == 1
    assert decision.run_ids == [100, 101, 102, 103]


def test_c0_without_hardware_is_blocked_with_no_hardware_runs():
    answers = [AnswerFacts(1, [chain("simulator", ALL_PASSED)])]
    decision = evaluate(DEFAULT_POLICY, current="C1", to="C0", pinned_status="", answers=answers)
    assert not decision.allowed
    assert codes(decision) == ["no_hardware_runs"]
    assert decision.reasons[0]["message"].startswith("No hardware runs")


def test_c0_with_every_stage_passed_on_hardware_is_allowed():
    answers = [AnswerFacts(1, [chain("simulator", ALL_PASSED, 1), chain("hardware", ALL_PASSED, 2)])]
    assert evaluate(DEFAULT_POLICY, current="C1", to="C0", pinned_status="", answers=answers).allowed


def test_c0_with_hardware_stopped_at_golden_names_the_stages_left():
    answers = [AnswerFacts(1, [chain("hardware", {**passed_up_to(stages.RUNNER), stages.GOLDEN: stages.FAILED})])]
    decision = evaluate(DEFAULT_POLICY, current="C1", to="C0", pinned_status="", answers=answers)
    assert not decision.allowed
    assert set(codes(decision)) == {"stage_not_passed"}
    assert any("golden" in item["message"] and "failed" in item["message"] for item in decision.reasons)
    # Both C0 requirements name the hardware chain's golden stage; the reason is given once.
    messages = [item["message"] for item in decision.reasons]
    assert len(messages) == len(set(messages)) == 4  # golden, failure, integration, soak


def test_requirements_must_hold_for_one_answer_not_a_mix_of_answers():
    # Claim and artifact passed for the newest answer only; runner and golden for an older one only.
    newest = AnswerFacts(2, [chain("simulator", passed_up_to(stages.ARTIFACT), 2)])
    older = AnswerFacts(1, [chain("simulator", {stages.RUNNER: stages.PASSED, stages.GOLDEN: stages.PASSED}, 1)])
    decision = evaluate(DEFAULT_POLICY, current="C3", to="C1", pinned_status="", answers=[newest, older])
    assert not decision.allowed
    assert decision.answer_id == 2


def test_stale_stage_is_reported_as_stale():
    answers = [AnswerFacts(1, [chain("simulator", {**passed_up_to(stages.CLAIM), stages.ARTIFACT: stages.STALE})])]
    decision = evaluate(DEFAULT_POLICY, current="C3", to="C2", pinned_status="", answers=answers)
    assert codes(decision) == ["stage_stale"]


def test_no_answer_blocks_every_promotion_that_has_requirements():
    decision = evaluate(DEFAULT_POLICY, current="C3", to="C2", pinned_status="", answers=[])
    assert codes(decision) == ["no_answer"]


def test_demotion_is_allowed_and_same_status_is_no_change():
    assert evaluate(DEFAULT_POLICY, current="C1", to="C3", pinned_status="", answers=[]).allowed
    same = evaluate(DEFAULT_POLICY, current="C1", to="C1", pinned_status="", answers=[])
    assert not same.allowed
    assert codes(same) == ["no_change"]


def test_pinned_c3_needs_c0_proof_even_for_c2():
    proven_c1 = [AnswerFacts(1, [chain("simulator", ALL_PASSED)])]
    decision = evaluate(DEFAULT_POLICY, current="C3", to="C2", pinned_status="C3", answers=proven_c1)
    assert not decision.allowed
    assert codes(decision) == ["pinned_needs_full_proof", "no_hardware_runs"]
    proven_c0 = [AnswerFacts(1, [chain("simulator", ALL_PASSED, 1), chain("hardware", ALL_PASSED, 2)])]
    assert evaluate(DEFAULT_POLICY, current="C3", to="C2", pinned_status="C3", answers=proven_c0).allowed


def test_pinned_c4_never_moves_whatever_the_runs():
    proven_c0 = [AnswerFacts(1, [chain("simulator", ALL_PASSED, 1), chain("hardware", ALL_PASSED, 2)])]
    for to in ["C3", "C2", "C1", "C0"]:
        decision = evaluate(DEFAULT_POLICY, current="C4", to=to, pinned_status="C4", answers=proven_c0)
        assert not decision.allowed
        assert codes(decision) == ["pinned_never_promoted"]


def test_a_configured_policy_changes_what_c1_needs():
    strict = {
        **DEFAULT_POLICY,
        "version": "strict-1",
        "requirements": {
            **DEFAULT_POLICY["requirements"],
            "C1": [{"stages": stages.CHAIN_STAGES, "target_kinds": ["simulator"]}],
        },
    }
    policy_check(strict)
    answers = [AnswerFacts(1, [chain("simulator", passed_up_to(stages.GOLDEN))])]
    assert evaluate(DEFAULT_POLICY, current="C3", to="C1", pinned_status="", answers=answers).allowed
    assert not evaluate(strict, current="C3", to="C1", pinned_status="", answers=answers).allowed


@pytest.mark.parametrize(
    "broken",
    [
        {"version": "", "requirements": DEFAULT_POLICY["requirements"]},
        {"version": "x", "requirements": {"C0": []}},
        {
            "version": "x",
            "requirements": {
                **DEFAULT_POLICY["requirements"],
                "C1": [{"stages": ["nope"], "target_kinds": ["simulator"]}],
            },
        },
        {"version": "x", "requirements": DEFAULT_POLICY["requirements"], "pinned": {"C2": None}},
    ],
)
def test_malformed_policies_are_refused(broken):
    with pytest.raises(ValueError):
        policy_check(broken)
