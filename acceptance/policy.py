"""The promotion policy of product.md section 4 as data, and its evaluation. No ORM here.

A policy maps a status to the requirements a capability must meet to be promoted to it. Each requirement
names chain stages that must have passed, on the current inputs of one chain, on a target of one of the
listed kinds. All the requirements of a status must be met by chains of the same answer, so by the same
artifact versions. Pinned capabilities follow `pinned`: a pinned C3 capability is held to C0's
requirements whatever status it is promoted to; a pinned C4 capability is never promoted.

`ACCEPTANCE_PROMOTION_POLICY` in the settings replaces the default (same shape, its own version).
"""

from dataclasses import dataclass, field

from acceptance.stages import CHAIN_STAGES, PASSED, RUNNER_STAGES, STAGE_LABELS, STALE
from evidence.grades import STATUSES, status_rank

SIMULATOR = "simulator"
HARDWARE = "hardware"
TARGET_KINDS = [SIMULATOR, HARDWARE]

DEFAULT_POLICY: dict = {
    "version": "section4-v1",
    "requirements": {
        "C4": [],
        "C3": [],
        "C2": [{"stages": ["claim", "artifact"], "target_kinds": [SIMULATOR, HARDWARE]}],
        "C1": [{"stages": ["claim", "artifact", "runner", "golden"], "target_kinds": [SIMULATOR, HARDWARE]}],
        "C0": [
            {"stages": list(CHAIN_STAGES), "target_kinds": [SIMULATOR, HARDWARE]},
            {"stages": list(RUNNER_STAGES), "target_kinds": [HARDWARE]},
        ],
    },
    "pinned": {"C3": "C0", "C4": None},
}


@dataclass
class ChainFacts:
    """One chain of a candidate answer: its target and the state of each stage on its current inputs."""

    chain_id: int
    target_name: str
    target_kind: str
    stage_states: dict[str, str]
    stage_run_ids: dict[str, int] = field(default_factory=dict)


@dataclass
class AnswerFacts:
    answer_id: int
    chains: list[ChainFacts]


@dataclass
class Decision:
    allowed: bool
    reasons: list[dict]
    answer_id: int | None = None
    run_ids: list[int] = field(default_factory=list)


def reason(code: str, message: str) -> dict:
    return {"code": code, "message": message}


def policy_check(policy: dict) -> None:
    """Raise ValueError when a configured policy is malformed."""
    if not str(policy.get("version", "")).strip():
        raise ValueError("a promotion policy needs a version")
    requirements = policy.get("requirements")
    if not isinstance(requirements, dict) or set(requirements) != set(STATUSES):
        raise ValueError(f"a promotion policy lists requirements for each of {', '.join(STATUSES)}")
    for status, items in requirements.items():
        for item in items:
            unknown_stages = set(item.get("stages", [])) - set(CHAIN_STAGES)
            unknown_kinds = set(item.get("target_kinds", [])) - set(TARGET_KINDS)
            if unknown_stages or unknown_kinds or not item.get("target_kinds"):
                raise ValueError(f"requirement for {status} names unknown stages or target kinds: {item}")
    pinned = policy.get("pinned", {})
    if set(pinned) - {"C3", "C4"} or any(value is not None and value not in STATUSES for value in pinned.values()):
        raise ValueError("pinned maps C3/C4 to the status whose requirements apply, or None for never")


def _requirement_met(requirement: dict, chains: list[ChainFacts]) -> ChainFacts | None:
    for chain in chains:
        if chain.target_kind not in requirement["target_kinds"]:
            continue
        if all(chain.stage_states.get(stage) == PASSED for stage in requirement["stages"]):
            return chain
    return None


def _requirement_reasons(requirement: dict, chains: list[ChainFacts]) -> list[dict]:
    kinds = requirement["target_kinds"]
    eligible = [chain for chain in chains if chain.target_kind in kinds]
    stages = ", ".join(requirement["stages"])
    if kinds == [HARDWARE]:
        ran = [chain for chain in eligible if any(chain.stage_states.get(s) == PASSED for s in requirement["stages"])]
        if not ran:
            return [
                reason(
                    "no_hardware_runs",
                    f"No hardware runs: {stages} must pass on a hardware target "
                    "(simulator runs are evidence of grade E4, not E0).",
                )
            ]
    if not eligible:
        return [reason("no_target", f"No chain on a target of kind {' or '.join(kinds)} for this answer.")]
    # Report against the chain that got furthest, so the reasons name what is actually left to do.
    best = max(eligible, key=lambda chain: sum(chain.stage_states.get(s) == PASSED for s in requirement["stages"]))
    found = []
    for stage in requirement["stages"]:
        state = best.stage_states.get(stage, "pending")
        if state == PASSED:
            continue
        code = "stage_stale" if state == STALE else "stage_not_passed"
        run_note = f" (run {best.stage_run_ids[stage]})" if stage in best.stage_run_ids else ""
        found.append(
            reason(
                code,
                f"{STAGE_LABELS[stage]} ({stage}) is {state} on {best.target_name} ({best.target_kind}){run_note}.",
            )
        )
    return found


def evaluate(policy: dict, *, current: str, to: str, pinned_status: str, answers: list[AnswerFacts]) -> Decision:
    """Whether a capability at `current` may move to `to`, and why not.

    Demotions (away from C0) are always allowed; their reason is checked by the caller. `answers` are the
    candidate answers, newest first: the promotion is allowed when one of them meets every requirement.
    """
    if to == current:
        return Decision(False, [reason("no_change", f"The capability is already {to}.")])
    if status_rank(to) > status_rank(current):
        return Decision(True, [])
    pinned = policy.get("pinned", {})
    if pinned_status and pinned_status in pinned and pinned[pinned_status] is None:
        return Decision(
            False,
            [
                reason(
                    "pinned_never_promoted",
                    f"This capability is pinned at {pinned_status}: it is not promoted at all. "
                    "A newer runtime version is a different capability.",
                )
            ],
        )
    governing = to
    pin_reasons: list[dict] = []
    if pinned_status and pinned.get(pinned_status):
        governing = pinned[pinned_status]
        pin_reasons = [
            reason(
                "pinned_needs_full_proof",
                f"This capability is pinned at {pinned_status}: it moves only when {governing}'s requirements hold.",
            )
        ]
    requirements = policy["requirements"][governing]
    if not requirements:
        return Decision(True, [])
    if not answers:
        return Decision(
            False, [*pin_reasons, reason("no_answer", "No complete answer names this capability: nothing has run.")]
        )
    for answer in answers:
        met = [_requirement_met(requirement, answer.chains) for requirement in requirements]
        if all(met):
            run_ids = sorted(
                {
                    chain.stage_run_ids[stage]
                    for requirement, chain in zip(requirements, met, strict=True)
                    for stage in requirement["stages"]
                    if chain is not None and stage in chain.stage_run_ids
                }
            )
            return Decision(True, [], answer_id=answer.answer_id, run_ids=run_ids)
    newest = answers[0]
    found: list[dict] = []
    for requirement in requirements:
        if _requirement_met(requirement, newest.chains) is None:
            # Requirements overlap (C0 asks for the runner stages twice); say each missing thing once.
            found.extend(r for r in _requirement_reasons(requirement, newest.chains) if r not in found)
    return Decision(False, [*pin_reasons, *found], answer_id=newest.answer_id)
