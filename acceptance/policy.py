"""The promotion policy of product.md section 4 as data, and its evaluation. No ORM here.

The seed's rules decide which evidence can support which status. A status lists the requirements a
capability must meet to move to it; each requirement is one of `REQUIREMENTS`:

- `answer`: a complete answer (all six elements of section 13) that names the version it is about, and that
  answers the capability on the capability's own deliverable;
- `artifacts`: that answer's claim and its artifacts checked (claim and artifact stages passed: E1);
- `probes_simulator`: every probe of the capability's recipe passed through the runner, golden, failure,
  integration and soak stages on a simulator target (E4), on the current inputs;
- `sdk`: the capability's SDK entry points present in the delivered SDK of that version (current E2
  evidence from the header-and-symbol check);
- `probes_hardware`: the same five stages with every probe passed on an attested hardware target (E0: the
  device reported itself, matching its registration, and is not a double).

All the requirements of a status are met by one answer, so by the same artifact versions. A pinned C3
capability is held to `pinned["C3"]`'s requirements whatever it is promoted to; a pinned C4 one never moves.
`ACCEPTANCE_PROMOTION_POLICY` in the settings replaces the default (same shape, its own version).
"""

from dataclasses import dataclass, field

from django.utils.translation import gettext_noop

from acceptance.stages import PASSED, RUNNER_STAGES, STALE
from calculet.sentences import Labelled, english, sentence
from evidence.grades import STATUSES, status_rank

SIMULATOR = "simulator"
HARDWARE = "hardware"
TARGET_KINDS = [SIMULATOR, HARDWARE]

ANSWER = "answer"
ARTIFACTS = "artifacts"
PROBES_SIMULATOR = "probes_simulator"
SDK = "sdk"
PROBES_HARDWARE = "probes_hardware"
REQUIREMENTS = [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK, PROBES_HARDWARE]

DEFAULT_POLICY: dict = {
    "version": "seed-grades-v1",
    "requirements": {
        "C4": [],
        "C3": [ANSWER, SDK],
        "C2": [ANSWER, ARTIFACTS, PROBES_SIMULATOR],
        "C1": [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK],
        "C0": [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK, PROBES_HARDWARE],
    },
    "pinned": {"C3": "C0", "C4": None},
}


@dataclass
class ChainFacts:
    """One chain of a candidate answer: its target, the state of each stage on its current inputs, and for the
    runner stages what their latest runs proved."""

    chain_id: int
    target_name: str
    target_kind: str
    stage_states: dict[str, str]
    stage_run_ids: dict[str, int] = field(default_factory=dict)
    # Per runner stage: the probes whose verdict was pass in its latest run on the current inputs.
    probes_passed: dict[str, set[str]] = field(default_factory=dict)
    # Per runner stage: the probes that did not pass in that run, each with its first finding's code.
    probes_failed: dict[str, dict[str, str]] = field(default_factory=dict)
    # Per runner stage: whether its latest run was measured on an attested board (E0).
    attested: dict[str, bool] = field(default_factory=dict)
    # The versions the device reported in the latest runner-stage run (calrt, driver, firmware, chip).
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class AnswerFacts:
    answer_id: int
    chains: list[ChainFacts]
    complete: bool = True
    version: str = ""
    # False when the answer proves another deliverable than one of the capability's own.
    on_own_deliverable: bool = True
    deliverable: str = ""
    # Current E2 evidence (the SDK check) for this capability at the answer's version.
    sdk_checked: bool = False


@dataclass
class Decision:
    allowed: bool
    reasons: list[dict]
    answer_id: int | None = None
    run_ids: list[int] = field(default_factory=list)
    # The versions of the evidence the status rests on.
    versions: dict[str, str] = field(default_factory=dict)


def reason(code: str, template: str, /, **params) -> dict:
    """A reason as the gate stores it: its code, its English message for the API, and the template and
    parameters a page renders in the reader's language (calculet.sentences)."""
    stored = sentence(template, **params)
    return {"code": code, "message": english(stored), **stored}


def policy_check(policy: dict) -> None:
    """Raise ValueError when a configured policy is malformed."""
    if not str(policy.get("version", "")).strip():
        raise ValueError("a promotion policy needs a version")
    requirements = policy.get("requirements")
    if not isinstance(requirements, dict) or set(requirements) != set(STATUSES):
        raise ValueError(f"a promotion policy lists requirements for each of {', '.join(STATUSES)}")
    for status, items in requirements.items():
        if not isinstance(items, list) or set(items) - set(REQUIREMENTS):
            raise ValueError(f"requirements for {status} must be a list drawn from {', '.join(REQUIREMENTS)}")
    pinned = policy.get("pinned", {})
    if set(pinned) - {"C3", "C4"} or any(value is not None and value not in STATUSES for value in pinned.values()):
        raise ValueError("pinned maps C3/C4 to the status whose requirements apply, or None for never")


def _probes_met(chain: ChainFacts, recipe_probes: list[str]) -> bool:
    return all(
        chain.stage_states.get(stage) == PASSED and set(recipe_probes) <= chain.probes_passed.get(stage, set())
        for stage in RUNNER_STAGES
    )


def _probe_chain(answer: AnswerFacts, kind: str, recipe_probes: list[str]) -> ChainFacts | None:
    for chain in answer.chains:
        if chain.target_kind != kind or not _probes_met(chain, recipe_probes):
            continue
        if kind == HARDWARE and not all(chain.attested.get(stage) for stage in RUNNER_STAGES):
            continue
        return chain
    return None


def _artifact_chain(answer: AnswerFacts) -> ChainFacts | None:
    for chain in answer.chains:
        if chain.stage_states.get("claim") == PASSED and chain.stage_states.get("artifact") == PASSED:
            return chain
    return None


def _met(requirement: str, answer: AnswerFacts, recipe_probes: list[str]) -> bool:
    if requirement == ANSWER:
        return answer.complete and bool(answer.version) and answer.on_own_deliverable
    if requirement == ARTIFACTS:
        return _artifact_chain(answer) is not None
    if requirement == SDK:
        return answer.sdk_checked
    if not recipe_probes:
        return False
    kind = SIMULATOR if requirement == PROBES_SIMULATOR else HARDWARE
    return _probe_chain(answer, kind, recipe_probes) is not None


def _stage_reasons(chain: ChainFacts, stages: list[str]) -> list[dict]:
    found = []
    for stage in stages:
        state = chain.stage_states.get(stage, "pending")
        if state == PASSED:
            continue
        where = {
            "stage": Labelled("stage", stage),
            "code": stage,
            "state": Labelled("run_state_word", state),
            "target": chain.target_name,
            "kind": Labelled("target_kind", chain.target_kind),
        }
        code = "stage_stale" if state == STALE else "stage_not_passed"
        if stage in chain.stage_run_ids:
            template = gettext_noop("%(stage)s (%(code)s) is %(state)s on %(target)s (%(kind)s) (run %(run)s).")
            found.append(reason(code, template, **where, run=chain.stage_run_ids[stage]))
        else:
            found.append(
                reason(code, gettext_noop("%(stage)s (%(code)s) is %(state)s on %(target)s (%(kind)s)."), **where)
            )
        if state == STALE:
            continue
        # The probes that failed it, each with what its runner found (not_exercised: the package lacks it).
        for probe, finding in sorted(chain.probes_failed.get(stage, {}).items()):
            found.append(
                reason(
                    "probe_failed",
                    gettext_noop("Probe %(probe)s failed in %(stage)s (%(code)s) on %(target)s: %(finding)s."),
                    probe=probe,
                    stage=Labelled("stage", stage),
                    code=stage,
                    target=chain.target_name,
                    finding=finding,
                )
            )
    return found


def _probe_reasons(answer: AnswerFacts, kind: str, recipe_probes: list[str]) -> list[dict]:
    if not recipe_probes:
        return [
            reason(
                "no_recipe_probes",
                gettext_noop("The capability's recipe has no probes: no run can exercise it, so no run proves it."),
            )
        ]
    chains = [chain for chain in answer.chains if chain.target_kind == kind]
    if kind == HARDWARE:
        attested = [c for c in chains if any(c.attested.get(stage) for stage in RUNNER_STAGES)]
        if not attested:
            return [
                reason(
                    "no_hardware_runs",
                    gettext_noop(
                        "No E0 runs: every probe must pass through %(stages)s on an attested hardware target "
                        "(simulator runs and board doubles are evidence of grade E4)."
                    ),
                    stages=Labelled("stage", RUNNER_STAGES),
                )
            ]
        chains = attested
    if not chains:
        return [
            reason(
                "no_target",
                gettext_noop("No chain on a target of kind %(kind)s for this answer."),
                kind=Labelled("target_kind", kind),
            )
        ]
    best = max(chains, key=lambda c: sum(c.stage_states.get(stage) == PASSED for stage in RUNNER_STAGES))
    found = _stage_reasons(best, RUNNER_STAGES)
    for stage in RUNNER_STAGES:
        if best.stage_states.get(stage) != PASSED:
            continue
        missing = [probe for probe in recipe_probes if probe not in best.probes_passed.get(stage, set())]
        for probe in missing:
            found.append(
                reason(
                    "probe_not_passed",
                    gettext_noop("Probe %(probe)s did not pass in %(stage)s (%(code)s) on %(target)s."),
                    probe=probe,
                    stage=Labelled("stage", stage),
                    code=stage,
                    target=best.target_name,
                )
            )
        if kind == HARDWARE and not best.attested.get(stage):
            found.append(
                reason(
                    "grade_not_e0",
                    gettext_noop("%(stage)s (%(code)s) on %(target)s is not E0: the device was not attested."),
                    stage=Labelled("stage", stage),
                    code=stage,
                    target=best.target_name,
                )
            )
    return found


def _reasons(requirement: str, answer: AnswerFacts, recipe_probes: list[str], capability: str) -> list[dict]:
    if requirement == ANSWER:
        found = []
        if not answer.complete:
            found.append(reason("answer_incomplete", gettext_noop("The answer lacks elements of section 13.")))
        if not answer.version:
            found.append(
                reason("version_missing", gettext_noop("The answer names no version that adds the capability."))
            )
        if not answer.on_own_deliverable and answer.deliverable:
            found.append(
                reason(
                    "wrong_deliverable",
                    gettext_noop("The answer delivers %(deliverable)s, which is not a deliverable of %(capability)s."),
                    deliverable=answer.deliverable,
                    capability=capability,
                )
            )
        elif not answer.on_own_deliverable:
            found.append(
                reason(
                    "wrong_deliverable",
                    gettext_noop("The answer delivers nothing named, which is not a deliverable of %(capability)s."),
                    capability=capability,
                )
            )
        return found
    if requirement == ARTIFACTS:
        if not answer.chains:
            return [reason("no_target", gettext_noop("No chain checks this answer."))]
        best = max(answer.chains, key=lambda c: sum(c.stage_states.get(s) == PASSED for s in ("claim", "artifact")))
        return _stage_reasons(best, ["claim", "artifact"])
    if requirement == SDK:
        return [
            reason(
                "no_sdk_evidence",
                gettext_noop(
                    "No current E2 evidence: the capability's SDK entry points have not been found in the "
                    "delivered headers and library of version %(version)s."
                ),
                version=answer.version or "?",
            )
        ]
    return _probe_reasons(answer, SIMULATOR if requirement == PROBES_SIMULATOR else HARDWARE, recipe_probes)


def _versions(answer: AnswerFacts, requirements: list[str], recipe_probes: list[str]) -> dict[str, str]:
    """The versions the status rests on: the board's when hardware evidence is needed, else the simulator's."""
    for requirement, kind in ((PROBES_HARDWARE, HARDWARE), (PROBES_SIMULATOR, SIMULATOR)):
        if requirement in requirements:
            chain = _probe_chain(answer, kind, recipe_probes)
            if chain is not None:
                return dict(chain.versions)
    return {"calrt": answer.version} if answer.version else {}


def _run_ids(answer: AnswerFacts, requirements: list[str], recipe_probes: list[str]) -> list[int]:
    chains = []
    if ARTIFACTS in requirements:
        chains.append((_artifact_chain(answer), ["claim", "artifact"]))
    for requirement, kind in ((PROBES_SIMULATOR, SIMULATOR), (PROBES_HARDWARE, HARDWARE)):
        if requirement in requirements:
            chains.append((_probe_chain(answer, kind, recipe_probes), RUNNER_STAGES))
    return sorted(
        {
            chain.stage_run_ids[stage]
            for chain, stages in chains
            if chain
            for stage in stages
            if stage in chain.stage_run_ids
        }
    )


def evaluate(
    policy: dict,
    *,
    current: str,
    to: str,
    pinned_status: str,
    answers: list[AnswerFacts],
    recipe_probes: list[str] | None = None,
    capability: str = "",
) -> Decision:
    """Whether a capability at `current` may move to `to`, and why not.

    Demotions (away from C0) are always allowed; their reason is checked by the caller. `answers` are the
    candidate answers, newest first: the promotion is allowed when one of them meets every requirement.
    `recipe_probes` are the probe names of the capability's recipe.
    """
    probes = list(recipe_probes or [])
    if to == current:
        return Decision(False, [reason("no_change", gettext_noop("The capability is already %(status)s."), status=to)])
    if status_rank(to) > status_rank(current):
        return Decision(True, [])
    pinned = policy.get("pinned", {})
    if pinned_status and pinned_status in pinned and pinned[pinned_status] is None:
        return Decision(
            False,
            [
                reason(
                    "pinned_never_promoted",
                    gettext_noop(
                        "This capability is pinned at %(status)s: it is not promoted at all. A newer runtime "
                        "version is a different capability."
                    ),
                    status=pinned_status,
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
                gettext_noop(
                    "This capability is pinned at %(status)s: it moves only when %(governing)s's requirements hold."
                ),
                status=pinned_status,
                governing=governing,
            )
        ]
    requirements = policy["requirements"][governing]
    if not requirements:
        return Decision(True, [])
    if not answers:
        return Decision(
            False,
            [
                *pin_reasons,
                reason("no_answer", gettext_noop("No complete answer names this capability: nothing has run.")),
            ],
        )
    for answer in answers:
        if all(_met(requirement, answer, probes) for requirement in requirements):
            return Decision(
                True,
                [],
                answer_id=answer.answer_id,
                run_ids=_run_ids(answer, requirements, probes),
                versions=_versions(answer, requirements, probes),
            )
    newest = answers[0]
    found: list[dict] = []
    for requirement in requirements:
        if not _met(requirement, newest, probes):
            found.extend(r for r in _reasons(requirement, newest, probes, capability) if r not in found)
    return Decision(False, [*pin_reasons, *found], answer_id=newest.answer_id)


def supported_status(
    policy: dict, *, current: str, pinned_status: str, answers: list[AnswerFacts], recipe_probes: list[str]
) -> tuple[str, dict[str, str]]:
    """The most mature status, no more mature than `current`, that the current evidence supports, and the
    versions it rests on; C3 when none above it is supported. What the system demotes to when evidence lapses.
    A capability at C3 or C4 stays where it is."""
    if status_rank(current) >= status_rank("C3"):
        return current, {}
    for status in STATUSES[status_rank(current) : status_rank("C3")]:
        decision = evaluate(
            policy, current="C4", to=status, pinned_status=pinned_status, answers=answers, recipe_probes=recipe_probes
        )
        if decision.allowed:
            return status, decision.versions
    return "C3", {}
