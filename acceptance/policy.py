"""The promotion policy of product.md section 4 as data, and its evaluation. No ORM here.

The seed's rules decide which evidence can support which status. A status lists the requirements a
capability must meet to move to it; each requirement is one of `REQUIREMENTS`:

- `answer`: a complete answer (all six elements of section 13) that names the version it is about, and that
  answers the capability on the capability's own deliverable, which has not been rejected;
- `artifacts`: that answer's claim and its artifacts checked (claim and artifact stages passed: E1), and its
  deliverable accepted (a status above C3 never rests on a deliverable that is owed or rejected);
- `probes_simulator`: every probe of the capability's recipe passed through the runner, golden, failure,
  integration and soak stages on a simulator target (E4), on the current inputs;
- `sdk`: the capability's SDK entry points present in the delivered SDK of that version (current E2
  evidence from the header-and-symbol check);
- `probes_hardware`: the same five stages with every probe passed on an attested hardware target (E0: the
  device reported itself, matching its registration, and is not a double).

What the capability's recipe holds decides how a requirement is met:

- `sdk` holds by itself when the recipe names no SDK call, by name or by role (`Recipe.names_sdk_calls`):
  there is nothing to find in an SDK.
- A recipe without probes is proven by its deliverable's static check (an SDK, container image or schema that
  passed, at the answer's version): that check stands for `artifacts` and `probes_simulator`, and an E1 check
  (an image or a schema: the product's own artifact) for `probes_hardware`; an SDK's symbols (E2) "do not
  mean the product is verified", so an SDK-only capability stops at C1.

All the requirements of a status are met by one answer, so by the same artifact versions. A pinned C3
capability is held to `pinned["C3"]`, a list of requirements (new artifacts and every probe passed on an
attested board), whatever it is promoted to; a pinned C4 one (`None`) never moves.

Two approvals: the capabilities `two_person_approval` names — the seed's C4 decisions, "must not be opened"
rather than "missing" (I10's privileged reset and memory surface) — are promoted only when, besides the
requirements, APPROVALS_NEEDED different members of the integration team approved that move on the evidence it
rests on (the same answer and runs); evidence that lapses leaves the approval bound to nothing. A pinned
capability is demoted to C4, and brought back from C4 to its pin, only with the same approvals (bound to the
move alone: no evidence moves it).
`ACCEPTANCE_PROMOTION_POLICY` in the settings replaces the default (same shape, its own version).
"""

from dataclasses import dataclass, field

from django.conf import settings
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

# A deliverable's states as the gate reads them (vendor.models.Deliverable.STATES).
DELIVERABLE_ACCEPTED = "accepted"
DELIVERABLE_REJECTED = "rejected"

DEFAULT_POLICY: dict = {
    "version": "seed-grades-v2",
    "requirements": {
        "C4": [],
        "C3": [ANSWER, SDK],
        "C2": [ANSWER, ARTIFACTS, PROBES_SIMULATOR],
        "C1": [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK],
        "C0": [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK, PROBES_HARDWARE],
    },
    # Section 13: the pinned C3 capabilities stay "until new artifacts and real tests exist". A simulator target
    # cannot play the runtime they need (two boards, a second model resident), so the board's runs are the test.
    "pinned": {"C3": [ANSWER, ARTIFACTS, SDK, PROBES_HARDWARE], "C4": None},
    "two_person_approval": ["device-reset"],
}
# The grade of a static check that stands for a board's runs: an image or a schema is the product's own artifact.
STATIC_PROOF_GRADE = "E1"

APPROVALS_NEEDED = 2


def policy_current() -> dict:
    """The policy in force: the settings' ACCEPTANCE_PROMOTION_POLICY, or the default."""
    return settings.ACCEPTANCE_PROMOTION_POLICY or DEFAULT_POLICY


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
    # The deliverable's state as it stands for this answer's organisation (DELIVERABLE_*; "" for an answer that
    # names none), the question it belongs to and the reason it was decided.
    deliverable_state: str = ""
    question: str = ""
    deliverable_reason: str = ""
    # Current E2 evidence (the SDK check) for this capability at the answer's version.
    sdk_checked: bool = False
    # The SDK deliverables whose check at the answer's version was rejected: "V24 sdk-kv (reason)".
    sdk_rejected: list[str] = field(default_factory=list)
    # The grades of the passed static checks of the answer's own deliverable (E1 image or schema, E2 SDK).
    checked_grades: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class ApprovalFacts:
    """One member's standing approval of a move: who, which move, and the evidence it was given on."""

    approver: str
    from_status: str
    to_status: str
    answer_id: int | None
    run_ids: frozenset[int]


@dataclass(frozen=True)
class GateSubject:
    """What the gate needs of the capability itself, beside its status and its answers: its slug, the status it
    is pinned at (empty: not pinned), the probe names of its recipe, and whether that recipe names SDK entry
    points (without any, `sdk` holds by itself). Built from a capability by `selectors.capability_gate_subject`."""

    capability: str = ""
    pinned_status: str = ""
    recipe_probes: tuple[str, ...] = ()
    sdk_calls: bool = True


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
    if set(pinned) - {"C3", "C4"} or any(
        value is not None and (not isinstance(value, list) or set(value) - set(REQUIREMENTS))
        for value in pinned.values()
    ):
        raise ValueError("pinned maps C3/C4 to the list of requirements that move it, or None for never")
    approved = policy.get("two_person_approval", [])
    if not isinstance(approved, list) or not all(isinstance(slug, str) and slug for slug in approved):
        raise ValueError("two_person_approval lists the slugs of the capabilities whose promotion needs approvals")


def approval_required(policy: dict, *, subject: GateSubject, current: str, to: str) -> bool:
    """Whether moving the capability from `current` to `to` needs the approvals: a promotion of a capability the
    policy names, and a pinned capability's demotion to C4 or its way back from C4 to its pin."""
    if to == current:
        return False
    if subject.capability in policy.get("two_person_approval", []) and status_rank(to) < status_rank(current):
        return True
    pinned_status = subject.pinned_status
    return bool(pinned_status) and (to == "C4" or (current == "C4" and to == pinned_status))


def _approved(
    decision: Decision, approvals: list[ApprovalFacts], *, current: str, to: str, capability: str
) -> Decision:
    """`decision` when enough members approved this move on the evidence it rests on; otherwise blocked,
    naming the approvals missing."""
    binding = (current, to, decision.answer_id, frozenset(decision.run_ids))
    approvers = sorted(
        {a.approver for a in approvals if (a.from_status, a.to_status, a.answer_id, a.run_ids) == binding}
    )
    if len(approvers) >= APPROVALS_NEEDED:
        return decision
    evidence = (
        sentence(
            gettext_noop("answer %(answer)s, runs %(runs)s"),
            answer=decision.answer_id,
            runs=sorted(decision.run_ids) or "-",
        )
        if decision.answer_id is not None
        else sentence(gettext_noop("the move alone"))
    )
    missing = reason(
        "approval_missing",
        gettext_noop(
            "Moving %(capability)s from %(from)s to %(to)s needs the approval of %(needed)s different members of the "
            "integration team, given for this move on the evidence it rests on (%(evidence)s); %(given)s given "
            "(%(who)s)."
        ),
        capability=capability,
        to=to,
        needed=APPROVALS_NEEDED,
        evidence=evidence,
        given=len(approvers),
        who=list(approvers) or sentence(gettext_noop("no one")),
        **{"from": current},
    )
    return Decision(
        False,
        [missing],
        answer_id=decision.answer_id,
        run_ids=decision.run_ids,
        versions=decision.versions,
    )


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


def _met(requirement: str, answer: AnswerFacts, recipe_probes: list[str], sdk_calls: bool) -> bool:
    if requirement == ANSWER:
        return (
            answer.complete
            and bool(answer.version)
            and answer.on_own_deliverable
            and answer.deliverable_state != DELIVERABLE_REJECTED
        )
    if requirement == SDK:
        return answer.sdk_checked or not sdk_calls
    if not recipe_probes:  # proven by its deliverable's static check, not by runs
        if requirement == PROBES_HARDWARE:
            return STATIC_PROOF_GRADE in answer.checked_grades
        return bool(answer.checked_grades)
    if requirement == ARTIFACTS:
        return _artifact_chain(answer) is not None and answer.deliverable_state in ("", DELIVERABLE_ACCEPTED)
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


def _static_reasons(answer: AnswerFacts, requirement: str) -> list[dict]:
    if requirement == PROBES_HARDWARE and answer.checked_grades:
        return [
            reason(
                "static_check_not_e1",
                gettext_noop(
                    "The capability's recipe has no probes and its deliverable's check is %(grades)s: an SDK's "
                    "symbols do not show the product working, and no run can; it stops at C1."
                ),
                grades=sorted(answer.checked_grades),
            )
        ]
    return [
        reason(
            "no_static_check",
            gettext_noop(
                "The capability's recipe has no probes: it is proven by a passed static check of its own SDK, "
                "container image or schema deliverable at version %(version)s, and there is none."
            ),
            version=answer.version or "?",
        )
    ]


def _probe_reasons(answer: AnswerFacts, kind: str, recipe_probes: list[str]) -> list[dict]:
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


def _deliverable_reason(answer: AnswerFacts) -> dict:
    """Why the answer's deliverable holds nothing up: rejected (with the decision's reason), or still owed."""
    names = {"deliverable": answer.deliverable, "question": answer.question}
    if answer.deliverable_state == DELIVERABLE_REJECTED:
        return reason(
            "deliverable_rejected",
            gettext_noop("Deliverable %(deliverable)s of %(question)s was rejected (%(why)s): nothing rests on it."),
            **names,
            why=answer.deliverable_reason or sentence(gettext_noop("no reason given")),
        )
    return reason(
        "deliverable_owed",
        gettext_noop(
            "Deliverable %(deliverable)s of %(question)s is owed: it has not been accepted, so nothing rests on it yet."
        ),
        **names,
    )


def _reasons(requirement: str, answer: AnswerFacts, recipe_probes: list[str], capability: str) -> list[dict]:
    if requirement in (ARTIFACTS, PROBES_SIMULATOR, PROBES_HARDWARE) and not recipe_probes:
        return _static_reasons(answer, requirement)
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
        if answer.deliverable_state == DELIVERABLE_REJECTED:
            found.append(_deliverable_reason(answer))
        return found
    if requirement == ARTIFACTS:
        if not answer.chains:
            return [reason("no_target", gettext_noop("No chain checks this answer."))]
        best = max(answer.chains, key=lambda c: sum(c.stage_states.get(s) == PASSED for s in ("claim", "artifact")))
        return _stage_reasons(best, ["claim", "artifact"])
    if requirement == SDK:
        if answer.sdk_rejected:
            return [
                reason(
                    "deliverable_rejected",
                    gettext_noop("SDK deliverable %(deliverable)s was rejected: nothing rests on it."),
                    deliverable=named,
                )
                for named in answer.sdk_rejected
            ]
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
    subject: GateSubject,
    current: str,
    to: str,
    answers: list[AnswerFacts],
    approvals: list[ApprovalFacts] | None = None,
) -> Decision:
    """Whether the capability `subject` names, at `current`, may move to `to`, and why not.

    Demotions (away from C0) are allowed, save a pinned capability's to C4, which needs the approvals; their
    reason is checked by the caller. `answers` are the candidate answers, newest first: the promotion is
    allowed when one of them meets every requirement, and, where `approval_required`, the standing
    `approvals` of members bind enough of them to the move and that answer's runs. `approvals=None` judges
    the evidence alone.
    """
    decision = _evaluate(policy, subject=subject, current=current, to=to, answers=answers)
    if (
        decision.allowed
        and approvals is not None
        and approval_required(policy, subject=subject, current=current, to=to)
    ):
        return _approved(decision, approvals, current=current, to=to, capability=subject.capability)
    return decision


def _evaluate(policy: dict, *, subject: GateSubject, current: str, to: str, answers: list[AnswerFacts]) -> Decision:
    probes, sdk_calls = list(subject.recipe_probes), subject.sdk_calls
    capability, pinned_status = subject.capability, subject.pinned_status
    if to == current:
        return Decision(False, [reason("no_change", gettext_noop("The capability is already %(status)s."), status=to)])
    if status_rank(to) > status_rank(current):
        return Decision(True, [])
    pinned = policy.get("pinned", {})
    if pinned_status and current == "C4" and to == pinned_status and pinned.get(pinned_status) is not None:
        # Back to its pin after a demotion to C4: the undoing of a decision, approved as that was.
        return Decision(True, [])
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
    requirements = policy["requirements"][to]
    pin_reasons: list[dict] = []
    if pinned_status and pinned.get(pinned_status):
        requirements = pinned[pinned_status]
        pin_reasons = [
            reason(
                "pinned_needs_full_proof",
                gettext_noop(
                    "This capability is pinned at %(status)s until new artifacts and real tests exist: it moves "
                    "only when %(requirements)s hold."
                ),
                status=pinned_status,
                requirements=[r for r in requirements if r != SDK or sdk_calls],
            )
        ]
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
        if all(_met(requirement, answer, probes, sdk_calls) for requirement in requirements):
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
        if not _met(requirement, newest, probes, sdk_calls):
            found.extend(r for r in _reasons(requirement, newest, probes, capability) if r not in found)
    if not found:
        # Everything else holds: what is left is the deliverable, still owed (a rejected one is named above).
        found.append(_deliverable_reason(newest))
    return Decision(False, [*pin_reasons, *found], answer_id=newest.answer_id)


def supported_status(
    policy: dict, *, subject: GateSubject, current: str, answers: list[AnswerFacts]
) -> tuple[str, dict[str, str]]:
    """The most mature status, no more mature than `current`, that the current evidence supports, and the
    versions it rests on; C3 when none above it is supported, or C4 for a capability whose promotion needs
    approvals (its approvals lapse with the evidence, and it must not stay opened on nothing). What the system
    demotes to when evidence lapses. A capability at C3 or C4 stays where it is."""
    if status_rank(current) >= status_rank("C3"):
        return current, {}
    for status in STATUSES[status_rank(current) : status_rank("C3")]:
        decision = evaluate(policy, subject=subject, current="C4", to=status, answers=answers)
        if decision.allowed:
            return status, decision.versions
    return ("C4" if subject.capability in policy.get("two_person_approval", []) else "C3"), {}
