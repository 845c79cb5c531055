"""Typed inputs of acceptance's writes, parsed once at the edge. No ORM here.

The API's serializers, the pages' forms, the admin and the commands build these; the services take them as they
are and check only what needs the database or a permission (where the capability is now, who asks).
"""

from dataclasses import dataclass

from django.utils.translation import gettext_noop

from calculet.errors import DomainError
from calculet.sentences import Labelled
from evidence.grades import STATUSES
from vendor.claim import ELEMENT_VERDICTS

REASON_MAX_CHARS = 2000
NOTE_MAX_CHARS = 2000
REVIEW_NOTE_MAX_CHARS = 2000  # a checklist item's note, an element's reason
REVIEW_REASON_MAX_CHARS = 5000  # the reason for a document review's decision


@dataclass(frozen=True)
class PromotionRequest:
    """A move of a capability's status asked of the promotion gate: `to` one of C0–C4, `reason` stripped and
    at most REASON_MAX_CHARS (empty: none given; a demotion needs one, which the gate checks)."""

    to: str
    reason: str = ""


def _status(to: str) -> str:
    if to not in STATUSES:
        raise DomainError(
            gettext_noop("Unknown status %(status)r; one of %(statuses)s."),
            field="to",
            params={"status": to, "statuses": list(STATUSES)},
        )
    return to


def promotion_request(to: str, reason: str = "") -> PromotionRequest:
    """The request from the words a page or a command was given; DomainError on field "to" or "reason" when
    they cannot be one (the API's serializer and the admin's form make the same checks themselves)."""
    to = _status(to)
    reason = reason.strip()
    if len(reason) > REASON_MAX_CHARS:
        raise DomainError(
            gettext_noop("A reason holds at most %(limit)s characters."),
            field="reason",
            params={"limit": REASON_MAX_CHARS},
        )
    return PromotionRequest(to=to, reason=reason)


SCHEDULE_NOT_A_NUMBER = gettext_noop("%(field)s: a health check schedule is a whole number from 1, or empty.")


def schedule_number(text: str) -> int | None:
    """One field of a target's health check schedule as typed on a page or a command line: empty (None, the
    settings' default) or ASCII digits; ValueError otherwise. That it is at least 1 is the service's rule."""
    text = text.strip()
    if not text:
        return None
    if not text.isascii() or not text.isdigit():
        raise ValueError(text)
    return int(text)


@dataclass(frozen=True)
class ApprovalRequest:
    """A member's approval of moving a capability from its status to `to` (one of C0–C4) on the evidence the
    move rests on now; `note` (what the approver checked) stripped and at most NOTE_MAX_CHARS."""

    to: str
    note: str = ""


def approval_request(to: str, note: str = "") -> ApprovalRequest:
    """The approval from the words a page or a command was given; DomainError on field "to" or "note" when
    they cannot be one (the API's serializer makes the same checks itself)."""
    to = _status(to)
    note = note.strip()
    if len(note) > NOTE_MAX_CHARS:
        raise DomainError(
            gettext_noop("A note holds at most %(limit)s characters."), field="note", params={"limit": NOTE_MAX_CHARS}
        )
    return ApprovalRequest(to=to, note=note)


TARGET_TOKEN_NAME_MAX_CHARS = 100


def target_token_name(name: str) -> str:
    """A target token's name as a command or the admin gives it (the host it is for): stripped, and cut to
    TARGET_TOKEN_NAME_MAX_CHARS (the admin names a token after the user who makes it); DomainError on "name"
    when nothing is left."""
    name = name.strip()
    if not name:
        raise DomainError(gettext_noop("Name the token (the host it is for)."), field="name")
    return name[:TARGET_TOKEN_NAME_MAX_CHARS]


@dataclass(frozen=True)
class ItemCheck:
    """One checklist item as the reviewer judged it: whether it holds, and a note (stripped)."""

    ticked: bool
    note: str = ""


@dataclass(frozen=True)
class ElementVerdict:
    """The reviewer's verdict on one of section 13's elements: `verdict` one of ELEMENT_VERDICTS, `reason`
    stripped (that not_applicable needs one is the review's rule, which the service checks)."""

    element: str
    verdict: str
    reason: str = ""


@dataclass(frozen=True)
class DocumentReviewDraft:
    """A PM's review of a document deliverable: one `ItemCheck` per posted checklist entry, in order (that
    there is one per item of the deliverable's checklist is the service's rule), a verdict on each of
    ELEMENTS in their order, and the decision's `reason` (stripped, given, at most REVIEW_REASON_MAX_CHARS)."""

    items: tuple[ItemCheck, ...]
    elements: tuple[ElementVerdict, ...]
    reason: str


def review_note(index: int, note: str) -> str:
    """A checklist item's note as posted on the page, stripped; DomainError on "items.N.note"."""
    if len(note) > REVIEW_NOTE_MAX_CHARS:
        raise DomainError(
            gettext_noop("A note is text of at most %(limit)s characters."),
            field=f"items.{index}.note",
            params={"limit": REVIEW_NOTE_MAX_CHARS},
        )
    return note.strip()


def element_verdict(element: str, verdict: str, reason: str) -> ElementVerdict:
    """An element's verdict as posted on the page; DomainError on "elements.E" (none given),
    "elements.E.verdict" or "elements.E.reason"."""
    if not verdict:
        raise DomainError(
            gettext_noop("Say whether the answer's %(element)s is present or does not apply to this document."),
            field=f"elements.{element}",
            params={"element": Labelled("element", element)},
        )
    if verdict not in ELEMENT_VERDICTS:
        raise DomainError(
            gettext_noop("The verdict is one of: %(verdicts)s."),
            field=f"elements.{element}.verdict",
            params={"verdicts": list(ELEMENT_VERDICTS)},
        )
    if len(reason) > REVIEW_NOTE_MAX_CHARS:
        raise DomainError(
            gettext_noop("A reason is text of at most %(limit)s characters."),
            field=f"elements.{element}.reason",
            params={"limit": REVIEW_NOTE_MAX_CHARS},
        )
    return ElementVerdict(element=element, verdict=verdict, reason=reason.strip())


def review_reason(reason: str) -> str:
    """The decision's reason as posted on the page, stripped; DomainError on "reason"."""
    reason = reason.strip()
    if not reason:
        raise DomainError(gettext_noop("Give the reason for the decision."), field="reason")
    if len(reason) > REVIEW_REASON_MAX_CHARS:
        raise DomainError(
            gettext_noop("The reason is at most %(limit)s characters."),
            field="reason",
            params={"limit": REVIEW_REASON_MAX_CHARS},
        )
    return reason
