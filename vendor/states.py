"""Question states and the transitions a person may make between them. No ORM here."""

from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

NEW = "new"
ASKED = "asked"
ANSWERED = "answered"
VERIFYING = "verifying"
CLOSED = "closed"
DEFERRED = "deferred"
WONT_FIX = "wont_fix"

QUESTION_STATES = [
    (NEW, pgettext_lazy("question state", "New")),
    (ASKED, pgettext_lazy("question state", "Asked")),
    (ANSWERED, pgettext_lazy("question state", "Answered")),
    (VERIFYING, pgettext_lazy("question state", "Verifying")),
    (CLOSED, pgettext_lazy("question state", "Closed")),
    (DEFERRED, pgettext_lazy("question state", "Deferred")),
    (WONT_FIX, pgettext_lazy("question state", "Won't fix")),
]

# Questions nobody is waiting on any more: never overdue, not among a vendor's open items.
SETTLED_STATES = frozenset({CLOSED, DEFERRED, WONT_FIX})

# A PM gives a reason for these; Closed needs every deliverable accepted instead (vendor.services.deliverables).
STATES_NEEDING_REASON = frozenset({DEFERRED, WONT_FIX})

# A PM moves questions along these edges by hand. Answers, chains and accepted deliverables move them too
# (asked -> answered -> verifying -> closed) through the same table. Closed is reached only when every
# deliverable of the question is accepted, whoever asks for it.
QUESTION_TRANSITIONS: dict[str, frozenset[str]] = {
    NEW: frozenset({ASKED, DEFERRED, WONT_FIX}),
    ASKED: frozenset({NEW, ANSWERED, DEFERRED, WONT_FIX}),
    ANSWERED: frozenset({ASKED, VERIFYING, CLOSED, DEFERRED, WONT_FIX}),
    VERIFYING: frozenset({ANSWERED, CLOSED, DEFERRED, WONT_FIX}),
    CLOSED: frozenset({ASKED}),
    DEFERRED: frozenset({NEW, ASKED}),
    WONT_FIX: frozenset({NEW, ASKED}),
}

PRIORITIES = [
    ("p0", _("P0 — blocking")),
    ("p1", _("P1 — high")),
    ("p2", _("P2 — normal")),
    ("p3", _("P3 — low")),
]


def can_transition(current: str, target: str) -> bool:
    return target in QUESTION_TRANSITIONS.get(current, frozenset())
