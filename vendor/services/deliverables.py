"""Deciding a question's deliverables. Accepting the last one owed closes the question; rejecting one of a closed
question opens it again, since something is owed once more — unless an accepted alternative of it (the same
`either`) still answers for it."""

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from calculet.actors import SYSTEM, Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, DomainError, ForbiddenError
from vendor import states
from vendor.access import may_act_as_pm
from vendor.models import Answer, Deliverable, Question
from vendor.selectors import deliverables_owed
from vendor.services.questions import question_state_move

# States from which accepting the last deliverable closes the question (the transitions table allows it).
CLOSABLE_STATES = frozenset({states.ANSWERED, states.VERIFYING})


def _check_actor(actor: Actor) -> None:
    if actor != SYSTEM and not may_act_as_pm(actor):
        raise ForbiddenError(
            gettext_noop("Only a PM, or the system after a check, may accept or reject a deliverable.")
        )


def deliverable_lock(deliverable: Deliverable) -> Deliverable:
    """Lock the deliverable's question, then the deliverable (the lock order, docs/acceptance.md): deciding it
    may move the question. Callers that write audit rows before deciding take this lock first."""
    question_id = Deliverable.objects.filter(pk=deliverable.pk).values_list("question_id", flat=True).get()
    lock_rows(Question.objects).get(pk=question_id)
    return lock_rows(Deliverable.objects).select_related("question").get(pk=deliverable.pk)


def _check_answer_is_owed(locked: Deliverable, answer: Answer | None) -> None:
    """A decision on an answer's proof is about what the organisation the question is put to owes: an answer of
    an organisation the question was moved away from decides nothing (ConflictError naming `answer`)."""
    if answer is not None and answer.organisation_id != locked.question.organisation_id:
        raise ConflictError(
            gettext_noop(
                "Answer %(answer)s is not from the organisation %(question)s is put to now: it decides nothing about "
                "%(deliverable)s."
            ),
            field="answer",
            params={"answer": answer.pk, "question": locked.question.code, "deliverable": locked.key},
        )


def _decide(deliverable: Deliverable, *, actor: Actor, reason: str, state: str, answer: Answer | None) -> Deliverable:
    _check_actor(actor)
    reason = (reason or "").strip()
    if not reason:
        raise DomainError(gettext_noop("Give the reason for the decision."), field="reason")
    with transaction.atomic():
        locked = deliverable_lock(deliverable)
        _check_answer_is_owed(locked, answer)
        before = {"state": locked.state, "reason": locked.reason}
        locked.state = state
        locked.reason = reason
        locked.decided_at = timezone.now()
        locked.decided_by = actor_user(actor)
        locked.save(update_fields=["state", "reason", "decided_at", "decided_by"])
        audit_record(
            actor=actor,
            action=f"deliverable.{'accept' if state == Deliverable.ACCEPTED else 'reject'}",
            obj=locked,
            before=before,
            after={"state": state, "reason": reason, "question": locked.question.code, "key": locked.key},
        )
        question = locked.question
        if state == Deliverable.ACCEPTED and question.state in CLOSABLE_STATES and not deliverables_owed(question):
            question_state_move(
                actor=actor, question=question, state=states.CLOSED, reason="every deliverable is accepted"
            )
        elif state == Deliverable.REJECTED and question.state == states.CLOSED and deliverables_owed(question):
            # An alternative of the rejected one (the same `either`) may still answer for it.
            question_state_move(
                actor=actor, question=question, state=states.ASKED, reason=f"deliverable {locked.key} was rejected"
            )
    return locked


def deliverable_accept(
    deliverable: Deliverable, *, actor: Actor, reason: str, answer: Answer | None = None
) -> Deliverable:
    """Accept a deliverable; when it was the question's last one not accepted and the question is answered or
    being verified, close the question (audited, by the same actor).

    Preconditions: `actor` is a PM or SYSTEM (ForbiddenError otherwise); `reason` says what accepted it
    (DomainError naming `reason` otherwise); `answer`, the answer whose proof decides it, is from the
    organisation the question is put to (ConflictError naming `answer` otherwise: a question never closes on
    another organisation's proof). Runs in the caller's transaction when there is one.
    """
    return _decide(deliverable, actor=actor, reason=reason, state=Deliverable.ACCEPTED, answer=answer)


def deliverable_reject(
    deliverable: Deliverable, *, actor: Actor, reason: str, answer: Answer | None = None
) -> Deliverable:
    """Reject a deliverable with the reason (the findings); a closed question opens again (Asked).

    Preconditions as `deliverable_accept`.
    """
    return _decide(deliverable, actor=actor, reason=reason, state=Deliverable.REJECTED, answer=answer)
