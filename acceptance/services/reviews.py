"""A PM's review of a document deliverable: the checklist ticked item by item, recorded as E3 evidence, and
the deliverable accepted when every item holds, rejected otherwise. A document never moves a capability."""

from django.db import transaction
from django.utils.translation import gettext_noop

from calculet.audit import audit_record
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.sentences import Labelled
from evidence.models import EvidenceItem
from evidence.services import evidence_record
from vendor.access import may_act_as_pm
from vendor.models import Answer, Deliverable, DocumentReview
from vendor.services.deliverables import deliverable_accept, deliverable_lock, deliverable_reject

MAX_NOTE = 2000
MAX_REASON = 5000


def _checked_items(deliverable: Deliverable, items) -> list[dict]:
    """The posted items, one per checklist entry in order, as stored: {"item", "ticked", "note"}."""
    checklist = list(deliverable.checklist)
    if not isinstance(items, list) or len(items) != len(checklist):
        raise DomainError(
            gettext_noop("Give one entry per checklist item (%(count)s), in the checklist's order."),
            field="items",
            params={"count": len(checklist)},
        )
    checked = []
    for index, (text, entry) in enumerate(zip(checklist, items, strict=True)):
        if not isinstance(entry, dict) or not isinstance(entry.get("ticked"), bool):
            raise DomainError(
                gettext_noop("Say whether “%(item)s” holds: ticked true or false."),
                field=f"items.{index}.ticked",
                params={"item": text},
            )
        unknown = sorted(set(entry) - {"ticked", "note"})
        if unknown:
            raise DomainError(
                gettext_noop("Unknown key %(key)s."), field=f"items.{index}.{unknown[0]}", params={"key": unknown[0]}
            )
        note = entry.get("note") or ""
        if not isinstance(note, str) or len(note) > MAX_NOTE:
            raise DomainError(
                gettext_noop("A note is text of at most %(limit)s characters."),
                field=f"items.{index}.note",
                params={"limit": MAX_NOTE},
            )
        checked.append({"item": text, "ticked": entry["ticked"], "note": note.strip()})
    return checked


def _reviewed_answer(deliverable: Deliverable) -> Answer:
    """The latest answer that delivers the document."""
    answer = (
        Answer.objects.select_related("organisation")
        .filter(question_id=deliverable.question_id, deliverable=deliverable)
        .order_by("-created_at", "-pk")
        .first()
    )
    if answer is None:
        raise ConflictError(
            gettext_noop("No answer delivers %(deliverable)s yet: there is nothing to review."),
            field="answer",
            params={"deliverable": deliverable.key},
        )
    return answer


def _explanation(items: list[dict], reason: str) -> str:
    lines = [
        f"[{'x' if entry['ticked'] else ' '}] {entry['item']}" + (f": {entry['note']}" if entry["note"] else "")
        for entry in items
    ]
    return "\n".join([*lines, "", reason])


def document_review(*, actor, deliverable: Deliverable, items, reason: str) -> DocumentReview:
    """Record a PM's review of a document deliverable and decide it.

    Preconditions: `actor` is a PM (ForbiddenError); the deliverable is a document (DomainError on
    `deliverable`); an answer delivers it (ConflictError on `answer`); `items` holds one {"ticked", "note"}
    per checklist item, in order (DomainError naming the item); `reason` is given (DomainError on `reason`).

    Writes the review, E3 evidence about the deliverable (linked to no capability: a document never moves
    one) and the decision — accepted when every item is ticked, rejected otherwise, naming the items that do
    not hold — all audited, in one transaction. Accepting the question's last deliverable closes it.
    """
    if not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM reviews a document."), params={})
    if deliverable.kind != Deliverable.DOCUMENT:
        raise DomainError(
            gettext_noop("%(deliverable)s is a deliverable of kind %(kind)s: only documents are reviewed by hand."),
            field="deliverable",
            params={"deliverable": deliverable.key, "kind": Labelled("deliverable_kind", deliverable.kind)},
        )
    checked = _checked_items(deliverable, items)
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise DomainError(gettext_noop("Give the reason for the decision."), field="reason", params={})
    if len(reason) > MAX_REASON:
        raise DomainError(
            gettext_noop("The reason is at most %(limit)s characters."), field="reason", params={"limit": MAX_REASON}
        )
    answer = _reviewed_answer(deliverable)
    accepted = all(entry["ticked"] for entry in checked)
    failing = [entry["item"] for entry in checked if not entry["ticked"]]
    with transaction.atomic():
        deliverable_lock(deliverable)  # the lock order: question and deliverable before the audit head
        review = DocumentReview.objects.create(
            deliverable=deliverable, answer=answer, reviewer=actor, items=checked, reason=reason, accepted=accepted
        )
        question = deliverable.question
        verdict = "accepted" if accepted else "rejected"
        held = len(checked) - len(failing)
        evidence_record(
            origin=EvidenceItem.REVIEW,
            grade="E3",
            conclusion=(
                f"Document review of {question.code} {deliverable.key}: {verdict}, {held} of {len(checked)} "
                f"checklist items hold."
            ),
            organisation=answer.organisation,
            deliverable=deliverable,
            code_prefix="REV",
            source_text=f"document review {review.pk} of answer r{answer.revision} by {actor.get_username()}",
            explanation=_explanation(checked, reason),
            actor=actor,
        )
        audit_record(
            actor=actor,
            action="document.review",
            obj=review,
            after={"deliverable": deliverable.key, "answer": answer.pk, "accepted": accepted, "items": checked},
        )
        if accepted:
            deliverable_accept(deliverable, actor=actor, reason=f"Document review {review.pk}: {reason}")
        else:
            deliverable_reject(
                deliverable,
                actor=actor,
                reason=f"Document review {review.pk}: does not hold: {'; '.join(failing)}. {reason}",
            )
    return review
