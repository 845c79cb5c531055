"""When a question is due: overdue, due soon, or neither. No ORM here; `vendor.selectors` filters by the
same rule."""

import datetime

from django.utils.translation import pgettext_lazy

from vendor import states

OVERDUE = "overdue"
DUE_SOON = "due_soon"
NOT_DUE = "none"
DUE_STATUSES = [
    (OVERDUE, pgettext_lazy("due status", "Overdue")),
    (DUE_SOON, pgettext_lazy("due status", "Due soon")),
    (NOT_DUE, pgettext_lazy("due status", "No due date")),
]


def due_status(due_date: datetime.date | None, state: str, today: datetime.date, soon_days: int) -> str:
    """OVERDUE once the due date has passed, DUE_SOON from `soon_days` before it to the day itself, "" otherwise
    and for settled questions (closed or deferred), which nobody waits on."""
    if due_date is None or state in states.SETTLED_STATES:
        return ""
    if due_date < today:
        return OVERDUE
    if due_date <= today + datetime.timedelta(days=soon_days):
        return DUE_SOON
    return ""
