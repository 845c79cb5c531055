"""The promotion gate: the only code that changes a capability's status."""

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from acceptance import policy as gate_policy
from acceptance import stages
from acceptance.inputs import REASON_MAX_CHARS, PromotionRequest
from acceptance.models import PromotionAttempt, Run, Target
from acceptance.policy import policy_current
from acceptance.selectors import capability_gate_facts, capability_gate_subject
from acceptance.services.approvals import approval_facts, approvals_revoke_lapsed, standing_approvals
from acceptance.services.targets import target_accepts_runs
from calculet.actors import SYSTEM, Actor, Machine, actor_label, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, DomainError, ForbiddenError
from evidence.grades import STATUSES, status_rank
from evidence.models import Capability
from evidence.status_guard import gate_writes
from vendor import events
from vendor.access import may_act_as_pm
from vendor.services.notifications import notify_on_commit


def _actor_may_promote(actor: Actor) -> bool:
    """A PM, a superuser in the admin, or a person at the server's shell (a command's actor)."""
    return isinstance(actor, Machine) or may_act_as_pm(actor)


def capability_promote(*, actor: Actor, capability: Capability, request: PromotionRequest) -> PromotionAttempt:
    """Ask the gate to move `capability` to `request.to`, and store the attempt whatever the answer.

    Preconditions: `request.to` is not the status the capability already has (ConflictError on field "to",
    and no attempt is stored); a demotion (away from C0) gives a reason (DomainError on field "reason"); the
    actor is a PM, a superuser, or a shell label (ForbiddenError otherwise). The request's shape was checked
    where it was built (`acceptance.inputs`). Never raises for a blocked promotion: the returned attempt has
    `allowed=False` and machine-readable `reasons`. The capability's row is locked while the policy is
    evaluated, so of two concurrent attempts exactly one takes effect and the other sees the new status. The
    status is written inside `gate_writes()`, with an audit row, in the same transaction.
    """
    if not _actor_may_promote(actor):
        raise ForbiddenError(gettext_noop("Only a PM may change a capability's status."), params={})
    to_status, reason = request.to, request.reason
    policy = policy_current()
    with transaction.atomic():
        locked = lock_rows(Capability.objects).get(pk=capability.pk)
        current = locked.status
        if to_status == current:
            raise ConflictError(
                gettext_noop("The capability is already %(status)s."), field="to", params={"status": current}
            )
        demotion = status_rank(to_status) > status_rank(current)
        if demotion and not reason:
            raise DomainError(gettext_noop("A demotion needs a reason."), field="reason", params={})
        facts, subject = capability_gate_facts(locked), capability_gate_subject(locked)
        approvals_revoke_lapsed(locked=locked, policy=policy, subject=subject, facts=facts)
        decision = gate_policy.evaluate(
            policy,
            subject=subject,
            current=current,
            to=to_status,
            answers=facts,
            approvals=approval_facts(standing_approvals(locked)),
        )
        attempt = _attempt_record(actor, locked, current, to_status, reason, decision, policy)
        if decision.allowed:  # the approvals of the move made are spent, those of any other lapse with it
            approvals_revoke_lapsed(
                locked=locked,
                policy=policy,
                subject=subject,
                facts=facts,
                cause=f"spent or lapsed by attempt {attempt.pk}",
            )
    attempt.capability = locked
    return attempt


def _attempt_record(
    actor: Actor, locked: Capability, current: str, to_status: str, reason: str, decision, policy: dict
):
    """Store the attempt, move the status when allowed, and write the audit row and the notification.
    Precondition: this transaction holds the capability's row lock."""
    demotion = status_rank(to_status) > status_rank(current)
    attempt = PromotionAttempt.objects.create(
        capability=locked,
        actor=actor_user(actor),
        actor_label=actor_label(actor),
        from_status=current,
        to_status=to_status,
        allowed=decision.allowed,
        reason=reason,
        reasons=decision.reasons,
        policy_version=policy["version"],
        answer_id=decision.answer_id,
        versions=decision.versions,
    )
    if decision.run_ids:
        attempt.runs.set(decision.run_ids)
        attempt.artifacts.set(
            Run.artifacts.through.objects.filter(run_id__in=decision.run_ids)
            .values_list("artifact_id", flat=True)
            .distinct()
        )
    summary = {
        "attempt": attempt.pk,
        "to": to_status,
        "reason": reason,
        "policy_version": policy["version"],
        "reasons": [item["code"] for item in decision.reasons],
        "runs": decision.run_ids,
        "versions": decision.versions,
    }
    if decision.allowed:
        with gate_writes():
            locked.status = to_status
            locked.status_changed_at = timezone.now()
            locked.save(update_fields=["status", "status_changed_at"])
        audit_record(
            actor=actor,
            action="capability.demote" if demotion else "capability.promote",
            obj=locked,
            before={"status": current},
            after={"status": to_status, **summary},
        )
    else:
        audit_record(
            actor=actor,
            action="capability.promotion_blocked",
            obj=locked,
            before={"status": current},
            after=summary,
        )
    notify_on_commit(
        events.PROMOTION_GRANTED if decision.allowed else events.PROMOTION_BLOCKED,
        actor=actor,
        organisation_id=None,  # the team's decision: no vendor is told
        data={
            "capability": locked.title,
            "from_status": current,
            "to_status": to_status,
            "detail": "\n".join(item["message"] for item in decision.reasons) or reason,
            "path": f"/capabilities/{locked.slug}/",
        },
    )
    return attempt


def capability_gate_preview(capability: Capability) -> list[tuple[str, gate_policy.Decision]]:
    """What the gate would say now for each status more mature than the capability's: the same evaluation as
    `capability_promote`, with nothing stored and nothing locked."""
    policy = policy_current()
    facts, subject = capability_gate_facts(capability), capability_gate_subject(capability)
    approvals = approval_facts(standing_approvals(capability))
    return [
        (
            status,
            gate_policy.evaluate(
                policy, subject=subject, current=capability.status, to=status, answers=facts, approvals=approvals
            ),
        )
        for status in STATUSES[: status_rank(capability.status)]
    ]


def capability_reverify(capability: Capability, *, cause: str) -> PromotionAttempt | None:
    """The system's re-verification: when the evidence a status above C3 rests on no longer holds (a re-run on
    new versions failed or could not run, an artifact was superseded), demote the capability to what the
    current evidence supports, as an audited attempt by SYSTEM whose reasons say what lapsed. Returns the
    attempt, or None when the current evidence still supports the status."""
    policy = policy_current()
    with transaction.atomic():
        locked = lock_rows(Capability.objects).get(pk=capability.pk)
        current = locked.status
        if status_rank(current) >= status_rank("C3"):
            return None
        facts, subject = capability_gate_facts(locked), capability_gate_subject(locked)
        supported, versions = gate_policy.supported_status(policy, subject=subject, current=current, answers=facts)
        if supported == current:
            return None
        lapsed = gate_policy.evaluate(policy, subject=subject, current="C4", to=current, answers=facts)
        decision = gate_policy.Decision(True, lapsed.reasons, answer_id=lapsed.answer_id, run_ids=[], versions=versions)
        reason = f"re-verification: {cause}; the current evidence supports {supported}, not {current}"
        attempt = _attempt_record(SYSTEM, locked, current, supported, reason[:REASON_MAX_CHARS], decision, policy)
        approvals_revoke_lapsed(locked=locked, policy=policy, subject=subject, facts=facts)
    attempt.capability = locked
    return attempt


def capabilities_reverify_unrunnable() -> list[PromotionAttempt]:
    """Proof that cannot run again: a capability above C3 whose chain must re-verify lapsed evidence (the
    target's versions changed, or a newer answer superseded the artifacts) and waits to run on a target that
    takes no runs now (in maintenance, its health check failed, no worker serving it) is re-verified on the
    evidence there is (`capability_reverify`): demoted to what that supports rather than left standing on
    lapsed evidence until the target comes back. The sweeper calls this. Returns the demotions."""
    now = timezone.now()
    # Only chains re-verifying lapsed evidence: a PM's re-run waiting for a target in maintenance changes nothing.
    waiting = set(
        Run.objects.filter(
            state__in=(stages.PENDING, stages.QUEUED),
            chain__capability__status__in=("C0", "C1", "C2"),
            chain__runs__evidence__current=False,
        )
        .values_list("chain__capability_id", "target_id")
        .distinct()
    )
    targets = {target.pk: target for target in Target.objects.filter(pk__in={target for _, target in waiting})}
    demoted = []
    for capability_id, target_id in sorted(waiting):
        target = targets[target_id]
        if target_accepts_runs(target, now):
            continue
        why = "it is in maintenance" if target.maintenance else (target.health_reason or f"it is {target.health}")
        capability = Capability.objects.get(pk=capability_id)
        attempt = capability_reverify(capability, cause=f"its proof cannot run again on {target.slug}: {why}")
        if attempt is not None:
            demoted.append(attempt)
    return demoted
