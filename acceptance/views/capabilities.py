"""The capability page: its evidence, the questions that can move it, its promotion history, and the
promotion gate asked in place."""

from django.urls import reverse
from django.views.decorators.http import require_POST

from acceptance import proof_labels
from acceptance.inputs import NOTE_MAX_CHARS, REASON_MAX_CHARS
from acceptance.policy import approval_required, policy_current
from acceptance.selectors import capability_gate_subject, capability_status_basis, promotion_history
from acceptance.services import capability_promote
from acceptance.services.approvals import capability_approve, standing_approvals
from acceptance.services.promotion import capability_gate_preview
from acceptance.views.forms import CapabilityApproveForm, CapabilityPromoteForm
from calculet import labels, web
from calculet.errors import DomainError
from calculet.web import errors_by_field
from evidence.grades import STATUSES
from evidence.selectors import capability_evidence, capability_get, capability_questions
from vendor.access import may_act_as_pm, may_approve_moves, may_open_pages, may_see_all

HISTORY_LIMIT = 200
CAPABILITY_EVIDENCE_LIMIT = 200


def _approval_moves(capability) -> list[str]:
    """The statuses the capability's move to would need approvals, from where it is now."""
    policy, subject = policy_current(), capability_gate_subject(capability)
    return [
        status
        for status in STATUSES
        if approval_required(policy, subject=subject, current=capability.status, to=status)
    ]


def _run_meaning(capability) -> list[tuple[str, str]]:
    """What the capability's runs prove on each kind of target: (where, what), as the page says it."""
    return [
        (where, what) for _kind, where, _code, what in proof_labels.labelled(proof_labels.runs_prove([capability.slug]))
    ]


def _capability_page_context(request, capability, **promotion) -> dict:
    sees_all = may_see_all(request.user)
    return {
        "capability": capability,
        "run_meaning": _run_meaning(capability),
        "evidence": capability_evidence(capability, user=request.user)[:CAPABILITY_EVIDENCE_LIMIT],
        "evidence_total": capability_evidence(capability, user=request.user).count(),
        "questions": capability_questions(user=request.user, capability=capability),
        # Promotion attempts are the integration team's, as in the API.
        "sees_history": sees_all,
        "history": promotion_history(capability)[:HISTORY_LIMIT] if sees_all else [],
        "basis": capability_status_basis(capability),
        # What the gate would say for each higher status, evaluated now and stored nowhere.
        "preview": capability_gate_preview(capability) if sees_all else [],
        "statuses": STATUSES,
        "status_choices": [(status, f"{status} — {labels.label('status', status)}") for status in STATUSES],
        "can_promote": may_act_as_pm(request.user),
        "reason_max_chars": REASON_MAX_CHARS,
        "note_max_chars": NOTE_MAX_CHARS,
        "attempt": None,
        "promotion_errors": {},
        "promotion_input": {},
        # The moves that need two members' approval, and the approvals standing (the team's, as in the API).
        "approval_moves": _approval_moves(capability) if sees_all else [],
        "approvals": list(standing_approvals(capability)) if sees_all else [],
        "can_approve": may_approve_moves(request.user),
        "approval": None,
        "approval_errors": {},
        "approval_reasons": [],
        **promotion,
    }


@web.page_for(may_open_pages)
def capability_detail(request, slug):
    capability = capability_get(user=request.user, slug=slug)
    # After a promotion posted without JavaScript, the redirect names the attempt whose decision to show.
    attempt = None
    if may_see_all(request.user) and request.GET.get("attempt", "").isdigit():
        attempt = promotion_history(capability).filter(pk=int(request.GET["attempt"])).first()
    context = _capability_page_context(request, capability, attempt=attempt)
    return web.render_page(request, "acceptance/capability-detail.html", context, nav="capabilities")


@require_POST
@web.page_for(may_act_as_pm)
def capability_promote_view(request, slug):
    """Ask the promotion gate; its decision, and its reasons when it blocks, are shown in place."""
    capability = capability_get(user=request.user, slug=slug)
    form = CapabilityPromoteForm(request.POST)
    attempt = None
    if form.is_valid():
        try:
            attempt = capability_promote(actor=request.user, capability=capability, request=form.request)
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
    errors = errors_by_field(form)

    def context() -> dict:
        capability.refresh_from_db()
        reason = "" if attempt and attempt.allowed else form.data.get("reason", "")
        return _capability_page_context(
            request,
            capability,
            attempt=attempt,
            promotion_errors=errors,
            promotion_input={"to": form.data.get("to", ""), "reason": reason},
        )

    # Post/redirect/get: a reload shows the decision again instead of asking the gate a second time.
    url = reverse("capability-detail", args=[capability.slug])
    return web.answer_post(
        request,
        "acceptance/capability-detail.html",
        context,
        partial="capability-promotion",
        nav="capabilities",
        status=400 if errors else 200,
        redirect_to=f"{url}?attempt={attempt.pk}#capability-promotion" if attempt is not None else "",
    )


@require_POST
@web.page_for(may_approve_moves)
def capability_approve_view(request, slug):
    """Approve a move that needs two members; the approval, or what refused it, is shown in place."""
    capability = capability_get(user=request.user, slug=slug)
    form = CapabilityApproveForm(request.POST)
    reasons, approval = [], None
    if form.is_valid():
        try:
            approval = capability_approve(actor=request.user, capability=capability, request=form.request)
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
            reasons = error.reasons
    errors = errors_by_field(form)

    def context() -> dict:
        capability.refresh_from_db()
        return _capability_page_context(
            request, capability, approval=approval, approval_errors=errors, approval_reasons=reasons
        )

    url = reverse("capability-detail", args=[capability.slug])
    return web.answer_post(
        request,
        "acceptance/capability-detail.html",
        context,
        partial="capability-promotion",
        nav="capabilities",
        status=400 if errors else 200,
        redirect_to=f"{url}#capability-approvals" if approval is not None else "",
    )
