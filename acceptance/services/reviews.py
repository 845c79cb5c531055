"""A PM's review of a document deliverable: the checklist ticked item by item and section 13's six elements
judged one by one, recorded as E3 evidence, and the deliverable accepted when every item holds and every
element is present or does not apply (with the reason), rejected otherwise. A document never moves a
capability."""

from django.db import transaction
from django.utils.translation import gettext_noop

from acceptance.inputs import DocumentReviewDraft, ElementVerdict, ItemCheck
from acceptance.selectors import document_answer
from calculet.actors import Actor, actor_label, actor_user
from calculet.audit import audit_record
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.sentences import Labelled
from evidence.models import EvidenceItem
from evidence.services import evidence_record
from vendor.access import may_act_as_pm
from vendor.claim import ELEMENTS, NOT_APPLICABLE, PRESENT
from vendor.models import Answer, Deliverable, DocumentReview
from vendor.services.deliverables import deliverable_accept, deliverable_lock, deliverable_reject


def _checked_items(deliverable: Deliverable, items: tuple[ItemCheck, ...]) -> list[dict]:
    """The items, one per checklist entry in order, as stored: {"item", "ticked", "note"}."""
    checklist = list(deliverable.checklist)
    if len(items) != len(checklist):
        raise DomainError(
            gettext_noop("Give one entry per checklist item (%(count)s), in the checklist's order."),
            field="items",
            params={"count": len(checklist)},
        )
    return [
        {"item": text, "ticked": item.ticked, "note": item.note} for text, item in zip(checklist, items, strict=True)
    ]


def _element_verdicts(elements: tuple[ElementVerdict, ...]) -> dict[str, dict]:
    """The verdict on each of section 13's elements, as stored: {element: {"verdict", "reason"}}. An element
    that does not apply to the document needs the reason why."""
    verdicts = {}
    for entry in elements:
        if entry.verdict == NOT_APPLICABLE and not entry.reason:
            raise DomainError(
                gettext_noop("Say why the %(element)s does not apply to this document."),
                field=f"elements.{entry.element}.reason",
                params={"element": Labelled("element", entry.element)},
            )
        verdicts[entry.element] = {"verdict": entry.verdict, "reason": entry.reason}
    return verdicts


def _reviewed_answer(deliverable: Deliverable) -> Answer:
    answer = document_answer(deliverable)
    if answer is None:
        raise ConflictError(
            gettext_noop("No answer delivers %(deliverable)s yet: there is nothing to review."),
            field="answer",
            params={"deliverable": deliverable.key},
        )
    return answer


def _explanation(items: list[dict], verdicts: dict[str, dict], lacking: list[str], reason: str) -> str:
    lines = [
        f"[{'x' if entry['ticked'] else ' '}] {entry['item']}" + (f": {entry['note']}" if entry["note"] else "")
        for entry in items
    ]
    elements = []
    for element, verdict in verdicts.items():
        if element in lacking:
            state = "applies, but the answer has none"
        elif verdict["verdict"] == PRESENT:
            state = "present"
        else:
            state = "not applicable"
        elements.append(f"{element}: {state}" + (f": {verdict['reason']}" if verdict["reason"] else ""))
    return "\n".join([*lines, "", *elements, "", reason])


def document_review(*, actor: Actor, deliverable: Deliverable, draft: DocumentReviewDraft) -> DocumentReview:
    """Record a PM's review of a document deliverable and decide it.

    Preconditions: `actor` is a PM (ForbiddenError); the deliverable is a document (DomainError on
    `deliverable`); an answer delivers it (ConflictError on `answer`); the draft holds one item per
    checklist item (DomainError on `items`) and a reason for each element judged not applicable (DomainError
    on `elements.E.reason`). The draft's shape was parsed at the edge (`acceptance.inputs`).

    Writes the review, E3 evidence about the deliverable (linked to no capability: a document never moves
    one) and the decision — accepted when every item is ticked and every element that applies is in the
    answer (section 13: an answer lacking one does not close the question), rejected otherwise, naming the
    items that do not hold and the elements the answer lacks — all audited, in one transaction. Accepting
    the question's last deliverable closes it.
    """
    if not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM reviews a document."))
    if deliverable.kind != Deliverable.DOCUMENT:
        raise DomainError(
            gettext_noop("%(deliverable)s is a deliverable of kind %(kind)s: only documents are reviewed by hand."),
            field="deliverable",
            params={"deliverable": deliverable.key, "kind": Labelled("deliverable_kind", deliverable.kind)},
        )
    checked = _checked_items(deliverable, draft.items)
    verdicts = _element_verdicts(draft.elements)
    reason = draft.reason
    answer = _reviewed_answer(deliverable)
    failing = [entry["item"] for entry in checked if not entry["ticked"]]
    lacking = [
        element for element, verdict in verdicts.items() if verdict["verdict"] == PRESENT and element in answer.missing
    ]
    accepted = not failing and not lacking
    with transaction.atomic():
        deliverable_lock(deliverable)  # the lock order: question and deliverable before the audit head
        review = DocumentReview.objects.create(
            deliverable=deliverable,
            answer=answer,
            reviewer=actor_user(actor),
            items=checked,
            elements=verdicts,
            reason=reason,
            accepted=accepted,
        )
        question = deliverable.question
        verdict = "accepted" if accepted else "rejected"
        held = len(checked) - len(failing)
        present = sum(1 for verdict in verdicts.values() if verdict["verdict"] == PRESENT) - len(lacking)
        evidence_record(
            origin=EvidenceItem.REVIEW,
            grade="E3",
            conclusion=(
                f"Document review of {question.code} {deliverable.key}: {verdict}, {held} of {len(checked)} "
                f"checklist items hold; of section 13's {len(ELEMENTS)} elements {present} present, "
                f"{len(lacking)} lacking, the rest not applicable."
            ),
            organisation=answer.organisation,
            deliverable=deliverable,
            code_prefix="REV",
            source_text=f"document review {review.pk} of answer r{answer.revision} by {actor_label(actor)}",
            explanation=_explanation(checked, verdicts, lacking, reason),
            actor=actor,
        )
        audit_record(
            actor=actor,
            action="document.review",
            obj=review,
            after={
                "deliverable": deliverable.key,
                "answer": answer.pk,
                "accepted": accepted,
                "items": checked,
                "elements": verdicts,
            },
        )
        if accepted:
            deliverable_accept(deliverable, actor=actor, reason=f"Document review {review.pk}: {reason}", answer=answer)
        else:
            faults = []
            if failing:
                faults.append(f"does not hold: {'; '.join(failing)}.")
            if lacking:
                faults.append(f"the answer r{answer.revision} lacks {', '.join(lacking)} (section 13).")
            deliverable_reject(
                deliverable,
                actor=actor,
                reason=f"Document review {review.pk}: {' '.join(faults)} {reason}",
                answer=answer,
            )
    return review
