"""Question states and the transitions a person may make between them. No ORM here."""

NEW = "new"
ASKED = "asked"
ANSWERED = "answered"
VERIFYING = "verifying"
CLOSED = "closed"
DEFERRED = "deferred"

QUESTION_STATES = [
    (NEW, "New"),
    (ASKED, "Asked"),
    (ANSWERED, "Answered"),
    (VERIFYING, "Verifying"),
    (CLOSED, "Closed"),
    (DEFERRED, "Deferred"),
]

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
    ("p0", "P0 — blocking"),
    ("p1", "P1 — high"),
    ("p2", "P2 — normal"),
    ("p3", "P3 — low"),
]


def can_transition(current: str, target: str) -> bool:
    return target in QUESTION_TRANSITIONS.get(current, frozenset())
