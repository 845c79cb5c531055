"""Every capability has a path to each status the seed allows it, and each requirement of that path is needed.

The seed's rules, written out here as the specification the policy is held to (no database):

- C4 -> C3: a complete answer naming its version, with the SDK entry points present where the recipe names any
  (by name, or by role: V23's cancel and time-out).
- C2: and, for a capability the simulator can exercise, its artifacts checked and every probe passed through the
  five runner stages on the simulator; for one it cannot (no probes), its own deliverable's static check passed.
- C1: C2's and the SDK entry points (where the recipe names any).
- C0: C1's and every probe passed on an attested board; for a capability without probes an E1 static check (an
  image or a schema): an SDK's symbols alone (E2) stop it at C1.
- Pinned C3 (section 13, "until new artifacts and real tests exist"): whatever it moves to, its artifacts checked
  and every probe passed on an attested board (and the SDK where the recipe names calls); back to C3 from C4 only
  with two approvals. Pinned C4 never moves.
"""

import pytest

from acceptance import stages
from acceptance.policy import DEFAULT_POLICY, AnswerFacts, ChainFacts, GateSubject, evaluate
from acceptance.recipes import PROVES_INTEGRATION, RECIPES, simulator_proves
from evidence.seed.capabilities import CAPABILITIES
from evidence.seed.deliverables import QUESTION_DELIVERABLES

ALL_PASSED = dict.fromkeys(stages.CHAIN_STAGES, stages.PASSED)
ARTIFACTS_PASSED = {stages.CLAIM: stages.PASSED, stages.ARTIFACT: stages.PASSED}
STATUSES_UP = ["C3", "C2", "C1", "C0"]


def static_grade(slug: str) -> str:
    """The best grade a static check of one of the capability's deliverables gives: E1 for an image or schema."""
    kinds = {d.kind for ds in QUESTION_DELIVERABLES.values() for d in ds if slug in d.capabilities}
    return "E1" if kinds & {"container_image", "schema"} else "E2"


def needs(slug: str, pinned: str, status: str) -> list[str]:
    """What the seed asks before the capability moves to `status`, as the facts that meet it."""
    recipe = RECIPES[slug]
    sdk = ["sdk"] if recipe.sdk_entry_points or recipe.sdk_roles else []
    if pinned == "C3":
        return ["answer", "artifacts", *sdk, "probes_hardware"]
    if status == "C3":
        return ["answer", *sdk]
    if not recipe.probes:
        return ["answer", "checked", *(sdk if status in ("C1", "C0") else [])]
    proof = ["answer", "artifacts", "probes_simulator"]
    return {"C2": proof, "C1": [*proof, *sdk], "C0": [*proof, *sdk, "probes_hardware"]}[status]


def allowed(slug: str, pinned: str) -> list[str]:
    """The statuses the seed allows the capability to reach."""
    if pinned == "C4":
        return []
    if pinned == "C3":
        # C3 is where it is pinned: the way back to it from C4 undoes a decision and takes the two approvals
        # that decision took, no proof (tests/acceptance/test_approvals.py).
        return ["C2", "C1", "C0"]
    if not RECIPES[slug].probes and static_grade(slug) != "E1":
        return ["C3", "C2", "C1"]
    return STATUSES_UP


def facts(slug: str, met: list[str]) -> AnswerFacts:
    probes = {probe.name for probe in RECIPES[slug].probes}
    chains = []
    if "artifacts" in met:
        chains.append(_chain(1, "simulator", ARTIFACTS_PASSED, set()))
    if "probes_simulator" in met:
        chains.append(_chain(2, "simulator", ALL_PASSED if "artifacts" in met else _runner_only(), probes))
    if "probes_hardware" in met:
        chains.append(_chain(3, "hardware", ALL_PASSED if "artifacts" in met else _runner_only(), probes))
    return AnswerFacts(
        answer_id=1,
        chains=chains,
        complete="answer" in met,
        version="0.8.0" if "answer" in met else "",
        sdk_checked="sdk" in met,
        checked_grades={static_grade(slug)} if "checked" in met else set(),
    )


def _runner_only() -> dict:
    """The runner stages passed on a chain whose claim and artifact stages did not."""
    return {**dict.fromkeys(stages.RUNNER_STAGES, stages.PASSED), stages.ARTIFACT: stages.FAILED}


def _chain(chain_id: int, kind: str, states: dict, probes: set[str]) -> ChainFacts:
    passed = [stage for stage in stages.RUNNER_STAGES if states.get(stage) == stages.PASSED]
    return ChainFacts(
        chain_id=chain_id,
        target_name=f"{kind}-{chain_id}",
        target_kind=kind,
        stage_states={stage: states.get(stage, stages.PENDING) for stage in stages.CHAIN_STAGES},
        probes_passed={stage: set(probes) for stage in passed},
        attested=dict.fromkeys(passed, kind == "hardware"),
    )


def decide(seed, status: str, answer: AnswerFacts):
    recipe = RECIPES[seed.slug]
    subject = GateSubject(
        capability=seed.slug,
        pinned_status=seed.status if seed.pinned else "",
        recipe_probes=tuple(probe.name for probe in recipe.probes),
        sdk_calls=recipe.names_sdk_calls,
    )
    return evaluate(DEFAULT_POLICY, subject=subject, current="C4", to=status, answers=[answer])


CASES = [(seed, status) for seed in CAPABILITIES for status in allowed(seed.slug, seed.status if seed.pinned else "")]


def test_every_capability_has_a_recipe_and_a_path_beyond_c4_unless_pinned_there():
    assert {seed.slug for seed in CAPABILITIES} == set(RECIPES)
    unreachable = [seed.slug for seed in CAPABILITIES if not allowed(seed.slug, seed.status if seed.pinned else "")]
    assert unreachable == ["multi-physical-device-calrt-0-7-6"]


@pytest.mark.parametrize(("seed", "status"), CASES, ids=[f"{seed.slug}-{status}" for seed, status in CASES])
def test_the_status_is_reachable_and_every_requirement_is_needed(seed, status):
    pinned = seed.status if seed.pinned else ""
    met = needs(seed.slug, pinned, status)
    decision = decide(seed, status, facts(seed.slug, met))
    assert decision.allowed, decision.reasons
    for missing in met:
        without = decide(seed, status, facts(seed.slug, [m for m in met if m != missing]))
        assert not without.allowed, f"{seed.slug} reached {status} without {missing}"
        assert without.reasons


def test_the_pinned_c4_never_moves_and_an_sdk_alone_never_shows_the_product_working():
    everything = ["answer", "artifacts", "probes_simulator", "sdk", "probes_hardware", "checked"]
    [pinned_c4] = [seed for seed in CAPABILITIES if seed.pinned and seed.status == "C4"]
    for status in STATUSES_UP:
        decision = decide(pinned_c4, status, facts(pinned_c4.slug, everything))
        assert [r["code"] for r in decision.reasons] == ["pinned_never_promoted"]
    [relocate] = [seed for seed in CAPABILITIES if seed.slug == "pdf-relocate-alloc"]
    decision = decide(relocate, "C0", facts(relocate.slug, everything))
    assert [r["code"] for r in decision.reasons] == ["static_check_not_e1"]


def test_a_pinned_capability_moves_without_a_simulator_run():
    """Multi-board needs two boards' runtime, which no simulator target declares: the board's runs decide."""
    [multi_board] = [seed for seed in CAPABILITIES if seed.slug == "multi-board"]
    board_only = facts("multi-board", ["answer", "artifacts", "probes_hardware"])
    assert not any(chain.target_kind == "simulator" and chain.probes_passed for chain in board_only.chains)
    assert decide(multi_board, "C0", board_only).allowed


def test_the_pinned_rule_names_only_the_requirements_that_apply():
    [sampling] = [seed for seed in CAPABILITIES if seed.slug == "npu-sampling"]  # its recipe names no SDK call
    [reason, *_] = decide(sampling, "C2", facts("npu-sampling", ["answer"])).reasons
    assert reason["code"] == "pinned_needs_full_proof"
    assert "it moves only when answer, artifacts, probes_hardware hold" in reason["message"]


INTEGRATION = [seed for seed in CAPABILITIES if simulator_proves(RECIPES[seed.slug]) == PROVES_INTEGRATION]


@pytest.mark.parametrize("seed", INTEGRATION, ids=[seed.slug for seed in INTEGRATION])
def test_a_capability_whose_simulator_runs_prove_calculets_integration_reaches_c0_only_on_a_board(seed):
    """Its probes drive the simulator's own runtime: every simulator run passed is calculet's integration (E4), and
    the vendor's runtime is tested only by an attested board's runs, which C0 needs; a board double's are E4 too."""
    pinned = seed.status if seed.pinned else ""
    met = needs(seed.slug, pinned, "C0")
    assert "probes_hardware" in met
    on_the_simulator = facts(seed.slug, [*(m for m in met if m != "probes_hardware"), "probes_simulator"])
    refused = decide(seed, "C0", on_the_simulator)
    assert not refused.allowed
    assert "no_hardware_runs" in [r["code"] for r in refused.reasons]
    with_a_double = facts(seed.slug, [*met, "probes_simulator"])
    [board] = [chain for chain in with_a_double.chains if chain.target_kind == "hardware"]
    board.attested = dict.fromkeys(board.attested, False)
    assert not decide(seed, "C0", with_a_double).allowed
    assert decide(seed, "C0", facts(seed.slug, [*met, "probes_simulator"])).allowed


def test_the_cancel_and_timeout_roles_are_the_sdk_requirement_of_v23():
    """V23's recipe names no call, only the roles cancel and timeout: the SDK must still have been checked to
    name a call for each before the capability moves to C1 (an SDK without a cancel call fails that check,
    `sdk_role_not_named`, and so leaves no E2 evidence)."""
    from acceptance.selectors import capability_gate_subject
    from evidence.models import Capability

    [seed] = [seed for seed in CAPABILITIES if seed.slug == "job-cancel-timeout"]
    assert RECIPES[seed.slug].sdk_roles and not RECIPES[seed.slug].sdk_entry_points
    assert capability_gate_subject(Capability(slug=seed.slug)).sdk_calls
    proof = ["answer", "artifacts", "probes_simulator"]
    without_sdk = decide(seed, "C1", facts(seed.slug, proof))
    assert not without_sdk.allowed
    assert [r["code"] for r in without_sdk.reasons] == ["no_sdk_evidence"]
    assert decide(seed, "C1", facts(seed.slug, [*proof, "sdk"])).allowed
    assert decide(seed, "C2", facts(seed.slug, proof)).allowed  # C2 asks for the runs only, as for every other
