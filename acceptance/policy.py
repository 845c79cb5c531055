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

All the requirements of a status are met by one answer, so by the same artifact versions. A pinned C3
capability is held to `pinned["C3"]`'s requirements whatever it is promoted to; a pinned C4 one never moves.

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
from django.utils.translation import gettext as _

from acceptance.stages import PASSED, RUNNER_STAGES, STAGE_LABELS, STALE
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
    "version": "seed-grades-v1",
    "requirements": {
        "C4": [],
        "C3": [ANSWER, SDK],
        "C2": [ANSWER, ARTIFACTS, PROBES_SIMULATOR],
        "C1": [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK],
        "C0": [ANSWER, ARTIFACTS, PROBES_SIMULATOR, SDK, PROBES_HARDWARE],
    },
    "pinned": {"C3": "C0", "C4": None},
    "two_person_approval": ["device-reset"],
}

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


@dataclass(frozen=True)
class ApprovalFacts:
    """One member's standing approval of a move: who, which move, and the evidence it was given on."""

    approver: str
    from_status: str
    to_status: str
    answer_id: int | None
    run_ids: frozenset[int]


@dataclass
class Decision:
    allowed: bool
    reasons: list[dict]
    answer_id: int | None = None
    run_ids: list[int] = field(default_factory=list)
    # The versions of the evidence the status rests on.
    versions: dict[str, str] = field(default_factory=dict)


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
        if not isinstance(items, list) or set(items) - set(REQUIREMENTS):
            raise ValueError(f"requirements for {status} must be a list drawn from {', '.join(REQUIREMENTS)}")
    pinned = policy.get("pinned", {})
    if set(pinned) - {"C3", "C4"} or any(value is not None and value not in STATUSES for value in pinned.values()):
        raise ValueError("pinned maps C3/C4 to the status whose requirements apply, or None for never")
    approved = policy.get("two_person_approval", [])
    if not isinstance(approved, list) or not all(isinstance(slug, str) and slug for slug in approved):
        raise ValueError("two_person_approval lists the slugs of the capabilities whose promotion needs approvals")


def approval_required(policy: dict, *, capability: str, pinned_status: str, current: str, to: str) -> bool:
    """Whether moving `capability` from `current` to `to` needs the approvals: a promotion of a capability the
    policy names, and a pinned capability's demotion to C4 or its way back from C4 to its pin."""
    if to == current:
        return False
    if capability in policy.get("two_person_approval", []) and status_rank(to) < status_rank(current):
        return True
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
        _("answer %(answer)s, runs %(runs)s")
        % {"answer": decision.answer_id, "runs": ", ".join(map(str, sorted(decision.run_ids))) or "-"}
        if decision.answer_id is not None
        else _("the move alone")
    )
    message = _(
        "Moving %(capability)s from %(from)s to %(to)s needs the approval of %(needed)s different members of the "
        "integration team, given for this move on the evidence it rests on (%(evidence)s); %(given)s given "
        "(%(who)s)."
    ) % {
        "capability": capability,
        "from": current,
        "to": to,
        "needed": APPROVALS_NEEDED,
        "evidence": evidence,
        "given": len(approvers),
        "who": ", ".join(approvers) or _("no one"),
    }
    return Decision(
        False,
        [reason("approval_missing", message)],
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


def _met(requirement: str, answer: AnswerFacts, recipe_probes: list[str]) -> bool:
    if requirement == ANSWER:
        return (
            answer.complete
            and bool(answer.version)
            and answer.on_own_deliverable
            and answer.deliverable_state != DELIVERABLE_REJECTED
        )
    if requirement == ARTIFACTS:
        return _artifact_chain(answer) is not None and answer.deliverable_state in ("", DELIVERABLE_ACCEPTED)
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
        run_note = _(" (run %(run)s)") % {"run": chain.stage_run_ids[stage]} if stage in chain.stage_run_ids else ""
        found.append(
            reason(
                "stage_stale" if state == STALE else "stage_not_passed",
                _("%(stage)s (%(code)s) is %(state)s on %(target)s (%(kind)s)%(run)s.")
                % {
                    "stage": STAGE_LABELS[stage],
                    "code": stage,
                    "state": state,
                    "target": chain.target_name,
                    "kind": chain.target_kind,
                    "run": run_note,
                },
            )
        )
        if state == STALE:
            continue
        # The probes that failed it, each with what its runner found (not_exercised: the package lacks it).
        for probe, finding in sorted(chain.probes_failed.get(stage, {}).items()):
            found.append(
                reason(
                    "probe_failed",
                    _("Probe %(probe)s failed in %(stage)s (%(code)s) on %(target)s: %(finding)s.")
                    % {
                        "probe": probe,
                        "stage": STAGE_LABELS[stage],
                        "code": stage,
                        "target": chain.target_name,
                        "finding": finding,
                    },
                )
            )
    return found


def _probe_reasons(answer: AnswerFacts, kind: str, recipe_probes: list[str]) -> list[dict]:
    if not recipe_probes:
        return [
            reason(
                "no_recipe_probes",
                _("The capability's recipe has no probes: no run can exercise it, so no run proves it."),
            )
        ]
    chains = [chain for chain in answer.chains if chain.target_kind == kind]
    if kind == HARDWARE:
        attested = [c for c in chains if any(c.attested.get(stage) for stage in RUNNER_STAGES)]
        if not attested:
            return [
                reason(
                    "no_hardware_runs",
                    _(
                        "No E0 runs: every probe must pass through %(stages)s on an attested hardware target "
                        "(simulator runs and board doubles are evidence of grade E4)."
                    )
                    % {"stages": ", ".join(RUNNER_STAGES)},
                )
            ]
        chains = attested
    if not chains:
        return [reason("no_target", _("No chain on a target of kind %(kind)s for this answer.") % {"kind": kind})]
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
                    _("Probe %(probe)s did not pass in %(stage)s (%(code)s) on %(target)s.")
                    % {"probe": probe, "stage": STAGE_LABELS[stage], "code": stage, "target": best.target_name},
                )
            )
        if kind == HARDWARE and not best.attested.get(stage):
            found.append(
                reason(
                    "grade_not_e0",
                    _("%(stage)s (%(code)s) on %(target)s is not E0: the device was not attested.")
                    % {"stage": STAGE_LABELS[stage], "code": stage, "target": best.target_name},
                )
            )
    return found


def _deliverable_reason(answer: AnswerFacts) -> dict:
    """Why the answer's deliverable holds nothing up: rejected (with the decision's reason), or still owed."""
    names = {"deliverable": answer.deliverable, "question": answer.question}
    if answer.deliverable_state == DELIVERABLE_REJECTED:
        return reason(
            "deliverable_rejected",
            _("Deliverable %(deliverable)s of %(question)s was rejected (%(why)s): nothing rests on it.")
            % {**names, "why": answer.deliverable_reason or _("no reason given")},
        )
    return reason(
        "deliverable_owed",
        _("Deliverable %(deliverable)s of %(question)s is owed: it has not been accepted, so nothing rests on it yet.")
        % names,
    )


def _reasons(requirement: str, answer: AnswerFacts, recipe_probes: list[str], capability: str) -> list[dict]:
    if requirement == ANSWER:
        found = []
        if not answer.complete:
            found.append(reason("answer_incomplete", _("The answer lacks elements of section 13.")))
        if not answer.version:
            found.append(reason("version_missing", _("The answer names no version that adds the capability.")))
        if not answer.on_own_deliverable:
            found.append(
                reason(
                    "wrong_deliverable",
                    _("The answer delivers %(deliverable)s, which is not a deliverable of %(capability)s.")
                    % {"deliverable": answer.deliverable or _("nothing named"), "capability": capability},
                )
            )
        if answer.deliverable_state == DELIVERABLE_REJECTED:
            found.append(_deliverable_reason(answer))
        return found
    if requirement == ARTIFACTS:
        if not answer.chains:
            return [reason("no_target", _("No chain checks this answer."))]
        best = max(answer.chains, key=lambda c: sum(c.stage_states.get(s) == PASSED for s in ("claim", "artifact")))
        return _stage_reasons(best, ["claim", "artifact"])
    if requirement == SDK:
        if answer.sdk_rejected:
            return [
                reason(
                    "deliverable_rejected",
                    _("SDK deliverable %(deliverable)s was rejected: nothing rests on it.") % {"deliverable": named},
                )
                for named in answer.sdk_rejected
            ]
        return [
            reason(
                "no_sdk_evidence",
                _(
                    "No current E2 evidence: the capability's SDK entry points have not been found in the "
                    "delivered headers and library of version %(version)s."
                )
                % {"version": answer.version or "?"},
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
    approvals: list[ApprovalFacts] | None = None,
) -> Decision:
    """Whether a capability at `current` may move to `to`, and why not.

    Demotions (away from C0) are allowed, save a pinned capability's to C4, which needs the approvals; their
    reason is checked by the caller. `answers` are the candidate answers, newest first: the promotion is
    allowed when one of them meets every requirement, and, where `approval_required`, the standing
    `approvals` of members bind enough of them to the move and that answer's runs. `recipe_probes` are the
    probe names of the capability's recipe. `approvals=None` judges the evidence alone.
    """
    decision = _evaluate(
        policy, current=current, to=to, pinned_status=pinned_status, answers=answers, recipe_probes=recipe_probes,
        capability=capability,
    )  # fmt: skip
    if (
        decision.allowed
        and approvals is not None
        and approval_required(policy, capability=capability, pinned_status=pinned_status, current=current, to=to)
    ):
        return _approved(decision, approvals, current=current, to=to, capability=capability)
    return decision


def _evaluate(
    policy: dict,
    *,
    current: str,
    to: str,
    pinned_status: str,
    answers: list[AnswerFacts],
    recipe_probes: list[str] | None,
    capability: str,
) -> Decision:
    probes = list(recipe_probes or [])
    if to == current:
        return Decision(False, [reason("no_change", _("The capability is already %(status)s.") % {"status": to})])
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
                    _(
                        "This capability is pinned at %(status)s: it is not promoted at all. A newer runtime "
                        "version is a different capability."
                    )
                    % {"status": pinned_status},
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
                _("This capability is pinned at %(status)s: it moves only when %(governing)s's requirements hold.")
                % {"status": pinned_status, "governing": governing},
            )
        ]
    requirements = policy["requirements"][governing]
    if not requirements:
        return Decision(True, [])
    if not answers:
        return Decision(
            False,
            [*pin_reasons, reason("no_answer", _("No complete answer names this capability: nothing has run."))],
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
    if not found:
        # Everything else holds: what is left is the deliverable, still owed (a rejected one is named above).
        found.append(_deliverable_reason(newest))
    return Decision(False, [*pin_reasons, *found], answer_id=newest.answer_id)


def supported_status(
    policy: dict,
    *,
    current: str,
    pinned_status: str,
    answers: list[AnswerFacts],
    recipe_probes: list[str],
    capability: str = "",
) -> tuple[str, dict[str, str]]:
    """The most mature status, no more mature than `current`, that the current evidence supports, and the
    versions it rests on; C3 when none above it is supported, or C4 for a capability whose promotion needs
    approvals (its approvals lapse with the evidence, and it must not stay opened on nothing). What the system
    demotes to when evidence lapses. A capability at C3 or C4 stays where it is."""
    if status_rank(current) >= status_rank("C3"):
        return current, {}
    for status in STATUSES[status_rank(current) : status_rank("C3")]:
        decision = evaluate(
            policy, current="C4", to=status, pinned_status=pinned_status, answers=answers, recipe_probes=recipe_probes
        )
        if decision.allowed:
            return status, decision.versions
    return ("C4" if capability in policy.get("two_person_approval", []) else "C3"), {}
