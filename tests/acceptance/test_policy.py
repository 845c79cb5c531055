"""The chain's stage logic and the promotion policy as data: no database."""

import pytest
from django.utils import translation

from acceptance import stages
from acceptance.policy import (
    DEFAULT_POLICY,
    AnswerFacts,
    ApprovalFacts,
    ChainFacts,
    GateSubject,
    approval_required,
    evaluate,
    policy_check,
    supported_status,
)
from calculet import sentences
from evidence.seed.capabilities import CAPABILITIES

ALL_PASSED = dict.fromkeys(stages.CHAIN_STAGES, stages.PASSED)
PROBES = ["decode_batch"]
BOARD = {"calrt": "0.7.6", "driver": "2.3.0", "firmware": "1.8.0", "chip": "calculet-2c"}


def chain(
    kind: str, states: dict, chain_id: int = 1, *, probes=("decode_batch",), attested: bool | None = None
) -> ChainFacts:
    """A chain whose passed runner stages passed `probes`; on hardware, attested unless told otherwise."""
    passed = [stage for stage in stages.RUNNER_STAGES if states.get(stage) == stages.PASSED]
    return ChainFacts(
        chain_id=chain_id,
        target_name=kind,
        target_kind=kind,
        stage_states={stage: states.get(stage, stages.PENDING) for stage in stages.CHAIN_STAGES},
        stage_run_ids={stage: chain_id * 100 + i for i, stage in enumerate(stages.CHAIN_STAGES) if stage in states},
        probes_passed={stage: set(probes) for stage in passed},
        attested=dict.fromkeys(passed, kind == "hardware" if attested is None else attested),
        versions=BOARD if passed else {},
    )


def answer(*chains, answer_id=1, version="0.7.6", sdk=False, complete=True, own=True) -> AnswerFacts:
    return AnswerFacts(
        answer_id,
        list(chains),
        complete=complete,
        version=version,
        sdk_checked=sdk,
        on_own_deliverable=own,
        deliverable="package-batch-8",
    )


def gate(to, answers, *, current="C3", pinned="", probes=PROBES):
    subject = GateSubject(capability="decode-batch-16", pinned_status=pinned, recipe_probes=tuple(probes))
    return evaluate(DEFAULT_POLICY, subject=subject, current=current, to=to, answers=answers)


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


def test_c3_from_c4_needs_a_complete_answer_naming_its_version_and_the_sdk_check():
    assert codes(gate("C3", [], current="C4")) == ["no_answer"]
    unversioned = gate("C3", [answer(version="")], current="C4")
    assert codes(unversioned) == ["version_missing", "no_sdk_evidence"]
    assert gate("C3", [answer(sdk=True)], current="C4").allowed


def test_c2_needs_the_answer_its_artifacts_and_every_probe_through_the_five_stages_on_the_simulator():
    artifacts_only = gate("C2", [answer(chain("simulator", passed_up_to(stages.ARTIFACT)))])
    assert not artifacts_only.allowed
    assert set(codes(artifacts_only)) == {"stage_not_passed"}
    assert any("Isolated runner (runner) is pending on simulator" in r["message"] for r in artifacts_only.reasons)
    decision = gate("C2", [answer(chain("simulator", ALL_PASSED))])
    assert decision.allowed
    assert decision.run_ids == [100, 101, 102, 103, 104, 105, 106]
    assert decision.versions == BOARD


def test_runs_whose_probes_did_not_cover_the_capability_prove_nothing_for_it():
    """A batch-8 package answering batch 16: every stage ran, but decode_batch at 16 was never exercised."""
    other_probes = answer(chain("simulator", ALL_PASSED, probes=("decode_batch_8_only",)))
    decision = gate("C2", [other_probes])
    assert not decision.allowed
    assert codes(decision) == ["probe_not_passed"] * 5
    assert decision.reasons[0]["message"] == "Probe decode_batch did not pass in Isolated runner (runner) on simulator."


def test_a_capability_without_recipe_probes_is_not_proven_by_runs():
    decision = gate("C2", [answer(chain("simulator", ALL_PASSED))], probes=())
    assert codes(decision) == ["no_static_check"]
    assert "proven by a passed static check of its own SDK, container image or schema" in decision.reasons[0]["message"]


def test_an_answer_on_another_deliverable_or_incomplete_proves_nothing():
    wrong = gate("C2", [answer(chain("simulator", ALL_PASSED), own=False)])
    assert codes(wrong) == ["wrong_deliverable"]
    assert "package-batch-8, which is not a deliverable of decode-batch-16" in wrong.reasons[0]["message"]
    assert codes(gate("C2", [answer(chain("simulator", ALL_PASSED), complete=False)])) == ["answer_incomplete"]


def test_a_blocked_reason_names_the_probe_that_failed_its_stage_and_what_it_found():
    failed = chain("simulator", {**passed_up_to(stages.ARTIFACT), stages.RUNNER: stages.FAILED}, 3)
    failed.probes_failed = {stages.RUNNER: {"sampling": "not_exercised"}}
    decision = gate("C2", [answer(failed)], probes=["sampling"])
    assert codes(decision)[:2] == ["stage_not_passed", "probe_failed"]
    assert decision.reasons[1]["message"] == (
        "Probe sampling failed in Isolated runner (runner) on simulator: not_exercised."
    )


def test_c1_adds_the_sdk_check_to_c2():
    proven = chain("simulator", ALL_PASSED)
    assert codes(gate("C1", [answer(proven)])) == ["no_sdk_evidence"]
    assert gate("C1", [answer(proven, sdk=True)]).allowed


def test_c0_needs_every_probe_through_the_five_stages_on_an_attested_board():
    sim = chain("simulator", ALL_PASSED, 1)
    assert codes(gate("C0", [answer(sim, sdk=True)], current="C1")) == ["no_hardware_runs"]
    double = chain("hardware", ALL_PASSED, 2, attested=False)
    decision = gate("C0", [answer(sim, double, sdk=True)], current="C1")
    assert codes(decision) == ["no_hardware_runs"]
    assert "board doubles are evidence of grade E4" in decision.reasons[0]["message"]
    stopped = chain("hardware", {**passed_up_to(stages.RUNNER), stages.GOLDEN: stages.FAILED}, 2)
    decision = gate("C0", [answer(sim, stopped, sdk=True)], current="C1")
    assert set(codes(decision)) == {"stage_not_passed"} and len(decision.reasons) == 4
    assert "Numerical golden (golden) is failed on hardware (Hardware) (run 203)." in decision.reasons[0]["message"]
    board = chain("hardware", ALL_PASSED, 2)
    assert gate("C0", [answer(sim, board, sdk=True)], current="C1").allowed


def test_a_reason_keeps_english_for_the_api_and_is_read_in_the_readers_language():
    """Asked from a Chinese page, the stored reason is still English; each reader renders it in their own."""
    sim = chain("simulator", ALL_PASSED, 1)
    stopped = chain("hardware", {**passed_up_to(stages.RUNNER), stages.GOLDEN: stages.FAILED}, 2)
    with translation.override("zh-hans"):
        first = gate("C0", [answer(sim, stopped, sdk=True)], current="C1").reasons[0]
    assert first["message"] == "Numerical golden (golden) is failed on hardware (Hardware) (run 203)."
    assert first["params"] == {"stage": "golden", "code": "golden", "state": "failed", "target": "hardware",
                               "kind": "hardware", "run": 203}  # fmt: skip
    with translation.override("zh-hans"):
        assert sentences.text(first) == "数值 golden（golden）在 hardware（硬件）上为失败（运行 203）。"
    with translation.override("en"):
        assert sentences.text(first) == first["message"]


def test_requirements_must_hold_for_one_answer_not_a_mix_of_answers():
    newest = answer(chain("simulator", passed_up_to(stages.ARTIFACT), 2), answer_id=2, sdk=True)
    older = answer(chain("simulator", ALL_PASSED, 1), answer_id=1, sdk=False)
    decision = gate("C1", [newest, older])
    assert not decision.allowed and decision.answer_id == 2


def test_stale_stage_is_reported_as_stale():
    stale = answer(chain("simulator", {**passed_up_to(stages.CLAIM), stages.ARTIFACT: stages.STALE}))
    assert "stage_stale" in codes(gate("C2", [stale]))


def test_demotion_is_allowed_and_same_status_is_no_change():
    assert gate("C3", [], current="C1").allowed
    assert codes(gate("C1", [], current="C1")) == ["no_change"]


def test_pinned_c3_needs_c0_proof_even_for_c2():
    proven_c1 = [answer(chain("simulator", ALL_PASSED), sdk=True)]
    decision = gate("C2", proven_c1, pinned="C3")
    assert codes(decision) == ["pinned_needs_full_proof", "no_hardware_runs"]
    proven_c0 = [answer(chain("simulator", ALL_PASSED, 1), chain("hardware", ALL_PASSED, 2), sdk=True)]
    assert gate("C2", proven_c0, pinned="C3").allowed


def test_pinned_c4_never_moves_whatever_the_runs():
    proven_c0 = [answer(chain("simulator", ALL_PASSED, 1), chain("hardware", ALL_PASSED, 2), sdk=True)]
    for to in ["C3", "C2", "C1", "C0"]:
        assert codes(gate(to, proven_c0, current="C4", pinned="C4")) == ["pinned_never_promoted"]


def test_supported_status_is_what_the_current_evidence_still_holds():
    sim = chain("simulator", ALL_PASSED, 1)
    stale_board = chain("hardware", {**passed_up_to(stages.ARTIFACT), stages.RUNNER: stages.FAILED}, 2)
    answers = [answer(sim, stale_board, sdk=True)]
    probed, pinned = (
        GateSubject(recipe_probes=tuple(PROBES)),
        GateSubject(pinned_status="C3", recipe_probes=tuple(PROBES)),
    )
    assert supported_status(DEFAULT_POLICY, subject=probed, current="C0", answers=answers) == ("C1", BOARD)
    assert supported_status(DEFAULT_POLICY, subject=pinned, current="C0", answers=answers) == ("C3", {})
    assert supported_status(DEFAULT_POLICY, subject=probed, current="C3", answers=[]) == ("C3", {})


def test_a_configured_policy_changes_what_c2_needs():
    lenient = {
        **DEFAULT_POLICY,
        "version": "artifacts-only-1",
        "requirements": {**DEFAULT_POLICY["requirements"], "C2": ["answer", "artifacts"]},
    }
    policy_check(lenient)
    answers = [answer(chain("simulator", passed_up_to(stages.ARTIFACT)))]
    assert not gate("C2", answers).allowed
    subject = GateSubject(recipe_probes=tuple(PROBES))
    assert evaluate(lenient, subject=subject, current="C3", to="C2", answers=answers).allowed


@pytest.mark.parametrize(
    "broken",
    [
        {"version": "", "requirements": DEFAULT_POLICY["requirements"]},
        {"version": "x", "requirements": {"C0": []}},
        {"version": "x", "requirements": {**DEFAULT_POLICY["requirements"], "C1": ["nope"]}},
        {"version": "x", "requirements": DEFAULT_POLICY["requirements"], "pinned": {"C2": None}},
    ],
)
def test_malformed_policies_are_refused(broken):
    with pytest.raises(ValueError):
        policy_check(broken)


@pytest.mark.parametrize("to", ["C2", "C1", "C0"])
def test_a_rejected_deliverable_promotes_nothing_and_is_named(to):
    proven = answer(chain("simulator", ALL_PASSED), chain("hardware", ALL_PASSED, 2), sdk=True)
    proven.question, proven.deliverable_reason = "V18", "the soak failed on CalRT 0.8.0"
    proven.deliverable_state = "accepted"
    assert gate(to, [proven]).allowed
    proven.deliverable_state = "rejected"
    decision = gate(to, [proven])
    assert not decision.allowed
    assert [r["code"] for r in decision.reasons] == ["deliverable_rejected"]
    assert "package-batch-8 of V18 was rejected (the soak failed on CalRT 0.8.0)" in decision.reasons[0]["message"]


def test_an_owed_deliverable_holds_up_what_rests_on_the_artifacts_and_is_named_when_nothing_else_is_missing():
    proven = answer(chain("simulator", ALL_PASSED), sdk=True)
    proven.question, proven.deliverable_state = "V18", "owed"
    blocked = gate("C2", [proven])
    assert [r["code"] for r in blocked.reasons] == ["deliverable_owed"]
    assert "package-batch-8 of V18 is owed" in blocked.reasons[0]["message"]
    # C3 rests on the answer and the SDK, not on the package's acceptance; a rejected one still stops it.
    assert gate("C3", [proven], current="C4").allowed
    proven.deliverable_state = "rejected"
    assert [r["code"] for r in gate("C3", [proven], current="C4").reasons] == ["deliverable_rejected"]
    # While stages are still to pass, they are what the gate names first.
    unfinished = answer(chain("simulator", {stages.CLAIM: stages.PASSED, stages.ARTIFACT: stages.PASSED}))
    unfinished.deliverable_state = "owed"
    assert "deliverable_owed" not in {r["code"] for r in gate("C2", [unfinished]).reasons}


def approval(who, *, from_status="C4", to="C3", answer_id=1, runs=()):
    return ApprovalFacts(who, from_status, to, answer_id, frozenset(runs))


def test_a_c4_decision_moves_only_with_two_members_approving_that_move_on_that_evidence():
    proven = answer(chain("simulator", ALL_PASSED), sdk=True)

    reset = GateSubject(capability="device-reset", recipe_probes=tuple(PROBES))

    def reset_gate(to, approvals, current="C4"):
        return evaluate(DEFAULT_POLICY, subject=reset, current=current, to=to, answers=[proven], approvals=approvals)

    assert approval_required(DEFAULT_POLICY, subject=reset, current="C4", to="C3")
    assert not approval_required(DEFAULT_POLICY, subject=reset, current="C3", to="C4")
    blocked = reset_gate("C3", [approval("ada")])
    assert [r["code"] for r in blocked.reasons] == ["approval_missing"]
    assert "from C4 to C3 needs the approval of 2 different members" in blocked.reasons[0]["message"]
    assert "1 given (ada)" in blocked.reasons[0]["message"]
    # The same member twice, another move, or other evidence bind nothing more.
    assert not reset_gate("C3", [approval("ada"), approval("ada")]).allowed
    assert not reset_gate("C3", [approval("ada"), approval("bo", to="C2")]).allowed
    assert not reset_gate("C3", [approval("ada"), approval("bo", answer_id=2)]).allowed
    assert reset_gate("C3", [approval("ada"), approval("bo")]).allowed
    c2 = reset_gate("C2", [], current="C3")
    assert not c2.allowed and "answer 1, runs 100, 101, 102, 103, 104, 105, 106" in c2.reasons[0]["message"]
    runs = c2.run_ids
    both = [approval(who, from_status="C3", to="C2", runs=runs) for who in ("ada", "bo")]
    assert reset_gate("C2", both, current="C3").allowed
    assert not reset_gate("C2", [*both[:1], approval("bo", from_status="C3", to="C2", runs=runs[:-1])], "C3").allowed
    # Without the evidence no approval moves it; the evidence alone (no approvals counted) is what they bind to.
    assert [r["code"] for r in reset_gate("C3", [approval("ada"), approval("bo")]).reasons] == []
    assert not evaluate(
        DEFAULT_POLICY, subject=reset, current="C4", to="C3", answers=[], approvals=[approval("ada"), approval("bo")]
    ).allowed
    # Lapsed evidence takes it back to C4, not C3.
    assert supported_status(DEFAULT_POLICY, subject=reset, current="C2", answers=[]) == ("C4", {})


def test_a_pinned_capability_goes_to_c4_and_back_only_with_two_approvals():
    def pinned_gate(current, to, approvals):
        subject = GateSubject(capability="npu-sampling", pinned_status="C3")
        return evaluate(DEFAULT_POLICY, subject=subject, current=current, to=to, answers=[], approvals=approvals)

    two = [
        approval("ada", from_status="C3", to="C4", answer_id=None),
        approval("bo", from_status="C3", to="C4", answer_id=None),
    ]
    blocked = pinned_gate("C3", "C4", two[:1])
    assert [r["code"] for r in blocked.reasons] == ["approval_missing"] and "the move alone" in blocked.reasons[0][
        "message"
    ]
    assert pinned_gate("C3", "C4", two).allowed
    back = [approval(who, answer_id=None) for who in ("ada", "bo")]
    assert [r["code"] for r in pinned_gate("C4", "C3", back[:1]).reasons] == ["approval_missing"]
    assert pinned_gate("C4", "C3", back).allowed
    # Back to its pin only: C2 from C4 still needs C0's proof.
    assert "pinned_needs_full_proof" in {r["code"] for r in pinned_gate("C4", "C2", back).reasons}
    # A capability pinned at C4 never moves, approvals or not.
    never = evaluate(
        DEFAULT_POLICY,
        subject=GateSubject(capability="multi-physical-device", pinned_status="C4"),
        current="C4",
        to="C3",
        answers=[],
        approvals=back,
    )
    assert [r["code"] for r in never.reasons] == ["pinned_never_promoted"]


def test_the_policy_names_every_capability_the_seed_keeps_closed_as_a_decision():
    """The seed's privileged surface (I10, "E2/C4 特权面") is C4 as "must not be opened": approvals guard it."""
    decided = {c.slug for c in CAPABILITIES if c.status == "C4" and c.status_from and "特权面" in c.status_from[1]}
    assert decided == {"device-reset"}
    assert decided <= set(DEFAULT_POLICY["two_person_approval"])
