"""Two approvals for a move the seed keeps closed: a capability `acceptance.policy` names (I10's privileged
reset and memory surface: C4 as "must not be opened"), promoted; a pinned capability moved to C4 or back.

Each member's approval is recorded on the capability, bound to the move and to the answer and runs the gate's
decision rests on when it is given. The gate counts only standing approvals that still match; those that no
longer do (the capability moved, the evidence lapsed) are revoked with the reason, by the next service that
evaluates the capability under its row lock.
"""

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from acceptance import policy as gate_policy
from acceptance.inputs import ApprovalRequest
from acceptance.models import CapabilityApproval
from acceptance.selectors import capability_gate_facts, capability_gate_subject
from calculet.actors import SYSTEM, Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, DomainError, ForbiddenError
from evidence.models import Capability
from vendor.access import may_approve_moves


def approval_facts(approvals) -> list[gate_policy.ApprovalFacts]:
    """What the gate reads of standing approvals (runs prefetched or not: one query each otherwise)."""
    return [
        gate_policy.ApprovalFacts(
            approver=approval.approver.get_username(),
            from_status=approval.from_status,
            to_status=approval.to_status,
            answer_id=approval.answer_id,
            run_ids=frozenset(run.pk for run in approval.runs.all()),
        )
        for approval in approvals
    ]


def standing_approvals(capability: Capability):
    return (
        CapabilityApproval.objects.filter(capability=capability, revoked_at__isnull=True)
        .select_related("approver__membership__organisation")
        .prefetch_related("runs")
        .order_by("pk")
    )


def approvals_revoke_lapsed(
    *, locked: Capability, policy: dict, subject: gate_policy.GateSubject, facts, cause: str = ""
) -> int:
    """Revoke the capability's standing approvals that no longer bind: given by someone who may no longer
    approve (deactivated, or no longer a PM or operator of the team: two approvals are two present members),
    at another status than its own, or on evidence that is no longer what the move rests on. One audit row
    each; returns how many. Precondition: this transaction holds the capability's row lock."""
    revoked = 0
    for approval in standing_approvals(locked):
        if not may_approve_moves(approval.approver):
            why = f"{approval.approver.get_username()} may no longer approve moves"
        elif approval.from_status != locked.status:
            why = cause or f"the capability is {locked.status} now, not {approval.from_status}"
        else:
            # On the evidence alone (no approvals counted): what an approval binds to.
            decision = gate_policy.evaluate(
                policy, subject=subject, current=locked.status, to=approval.to_status, answers=facts
            )
            bound = (approval.answer_id, {run.pk for run in approval.runs.all()})
            if decision.allowed and bound == (decision.answer_id, set(decision.run_ids)):
                continue
            why = "the evidence it was given on lapsed: the move no longer rests on it"
        approval.revoked_at, approval.revoked_reason = timezone.now(), why
        approval.save(update_fields=["revoked_at", "revoked_reason"])
        audit_record(
            actor=SYSTEM,
            action="capability.approval_revoke",
            obj=locked,
            after={"approval": approval.pk, "approver": approval.approver.get_username(), "reason": why},
        )
        revoked += 1
    return revoked


def capability_approve(*, actor: Actor, capability: Capability, request: ApprovalRequest) -> CapabilityApproval:
    """Record the actor's approval of moving `capability` from its status to `request.to`, bound to the answer
    and runs the gate's decision rests on now.

    Preconditions: the actor is a PM or operator of the integration team (ForbiddenError); the move needs
    approvals (DomainError on `to` otherwise); the evidence supports the move now (ConflictError on `to` with
    the gate's reasons: there is nothing to approve yet); the actor has no standing approval of the same move
    (ConflictError on `to`). The request's shape was checked where it was built (`acceptance.inputs`).
    Audited in the same transaction.
    """
    approver = actor_user(actor)  # each approves as themselves: never a machine
    if approver is None or not may_approve_moves(approver):
        raise ForbiddenError(gettext_noop("Only a PM or an operator of the integration team approves a move."))
    to_status, note = request.to, request.note
    policy = gate_policy.policy_current()
    with transaction.atomic():
        locked = lock_rows(Capability.objects).get(pk=capability.pk)
        subject = capability_gate_subject(locked)
        if not gate_policy.approval_required(policy, subject=subject, current=locked.status, to=to_status):
            raise DomainError(
                gettext_noop("Moving %(capability)s from %(status)s to %(to_status)s needs no approval: ask the gate."),
                field="to",
                params={"capability": locked.slug, "status": locked.status, "to_status": to_status},
            )
        facts = capability_gate_facts(locked)
        approvals_revoke_lapsed(locked=locked, policy=policy, subject=subject, facts=facts)
        decision = gate_policy.evaluate(policy, subject=subject, current=locked.status, to=to_status, answers=facts)
        if not decision.allowed:
            raise ConflictError(
                gettext_noop(
                    "The evidence does not support moving %(capability)s to %(to_status)s: there is nothing to approve."
                ),
                field="to",
                code="blocked",
                reasons=decision.reasons,
                params={"capability": locked.slug, "to_status": to_status},
            )
        if standing_approvals(locked).filter(approver=approver, to_status=to_status).exists():
            raise ConflictError(
                gettext_noop("You have already approved moving %(capability)s to %(to_status)s."),
                field="to",
                params={"capability": locked.slug, "to_status": to_status},
            )
        approval = CapabilityApproval.objects.create(
            capability=locked,
            approver=approver,
            from_status=locked.status,
            to_status=to_status,
            answer_id=decision.answer_id,
            note=note,
        )
        approval.runs.set(decision.run_ids)
        audit_record(
            actor=actor,
            action="capability.approve",
            obj=locked,
            after={
                "approval": approval.pk,
                "from": locked.status,
                "to": to_status,
                "answer": decision.answer_id,
                "runs": sorted(decision.run_ids),
                "note": note,
            },
        )
    return approval
