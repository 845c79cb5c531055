"""Typed inputs of acceptance's writes, parsed once at the edge. No ORM here.

The API's serializers, the pages' forms, the admin and the commands build these; the services take them as they
are and check only what needs the database or a permission (where the capability is now, who asks).
"""

from dataclasses import dataclass

from django.utils.translation import gettext_noop

from calculet.errors import DomainError
from evidence.grades import STATUSES

REASON_MAX_CHARS = 2000
NOTE_MAX_CHARS = 2000


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
