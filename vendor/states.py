"""Question states and the transitions a person may make between them. No ORM here."""

from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

NEW = "new"
ASKED = "asked"
ANSWERED = "answered"
VERIFYING = "verifying"
CLOSED = "closed"
DEFERRED = "deferred"

QUESTION_STATES = [
    (NEW, pgettext_lazy("question state", "New")),
    (ASKED, pgettext_lazy("question state", "Asked")),
    (ANSWERED, pgettext_lazy("question state", "Answered")),
    (VERIFYING, pgettext_lazy("question state", "Verifying")),
    (CLOSED, pgettext_lazy("question state", "Closed")),
    (DEFERRED, pgettext_lazy("question state", "Deferred")),
]

# Questions nobody is waiting on any more: never overdue, not among a vendor's open items.
SETTLED_STATES = frozenset({CLOSED, DEFERRED})

# A PM moves questions along these edges by hand. Answers and chain verdicts move them too
# (asked -> answered -> verifying -> closed) through the same table.
QUESTION_TRANSITIONS: dict[str, frozenset[str]] = {
    NEW: frozenset({ASKED, DEFERRED}),
    ASKED: frozenset({NEW, ANSWERED, DEFERRED}),
    ANSWERED: frozenset({ASKED, VERIFYING, DEFERRED}),
    VERIFYING: frozenset({ANSWERED, CLOSED, DEFERRED}),
    CLOSED: frozenset({ASKED}),
    DEFERRED: frozenset({NEW, ASKED}),
}

PRIORITIES = [
    ("p0", _("P0 — blocking")),
    ("p1", _("P1 — high")),
    ("p2", _("P2 — normal")),
    ("p3", _("P3 — low")),
]


def can_transition(current: str, target: str) -> bool:
    return target in QUESTION_TRANSITIONS.get(current, frozenset())
