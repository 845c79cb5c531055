"""What people can be told about, and who is told of each: rules as data, no ORM here.

`vendor.services.notifications.notify` applies them: it takes the candidates an event's audience names,
keeps those `vendor.access.may_be_told` lets in and who have not muted the kind, and e-mails them; active
webhooks that subscribe to the kind receive it under the same access rule.
"""

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from calculet import labels

ASSIGNED = "assigned"
ANSWERED = "answered"
COMMENT = "comment"
MENTION = "mention"
RUN_FAILED = "run_failed"
PROMOTION_BLOCKED = "promotion_blocked"
PROMOTION_GRANTED = "promotion_granted"
DUE_SOON = "due_soon"
OVERDUE = "overdue"
REVERIFICATION_DUE = "reverification_due"
TEST = "test"

# Who the candidates are; `notify` may add the people an event names (the new assignee, those mentioned).
NAMED = "named"  # only the people the event names
QUESTION_PEOPLE = "question_people"  # the question's assignee and everyone who wrote in its thread
THREAD = "thread"  # those, and the engineers of the vendor the thread is with
RUN_PEOPLE = "run_people"  # the question's assignee and the engineers of the vendor whose answer ran
ASSIGNEE_OR_PMS = "assignee_or_pms"  # the question's assignee, or the team's PMs when nobody is
ASSIGNEE_AND_PMS = "assignee_and_pms"
PMS = "pms"  # the team's PMs


@dataclass(frozen=True)
class EventKind:
    label: str | Promise
    audience: str
    subject: str | Promise  # %-format over the event's data
    # Whether a vendor's engineers can ever be told: events about the team's own decisions are not theirs.
    vendor_may_receive: bool = True


EVENTS: dict[str, EventKind] = {
    ASSIGNED: EventKind(_("A question is assigned to me"), NAMED, _("%(question)s is assigned to you")),
    ANSWERED: EventKind(
        _("A vendor answers a question I follow"),
        QUESTION_PEOPLE,
        _("%(organisation)s answered %(question)s (revision %(revision)s)"),
    ),
    COMMENT: EventKind(_("A comment on a question I follow"), THREAD, _("%(actor)s commented on %(question)s")),
    MENTION: EventKind(_("Someone mentions me"), NAMED, _("%(actor)s mentioned you on %(question)s")),
    RUN_FAILED: EventKind(
        _("An acceptance run fails or errs"),
        RUN_PEOPLE,
        _("%(question)s: %(stage)s ended %(verdict)s on %(target)s"),
    ),
    PROMOTION_BLOCKED: EventKind(
        _("The gate blocks a promotion"),
        PMS,
        _("The gate blocked %(capability)s from moving %(from_status)s → %(to_status)s"),
        vendor_may_receive=False,
    ),
    PROMOTION_GRANTED: EventKind(
        _("The gate changes a capability's status"),
        PMS,
        _("%(capability)s moved %(from_status)s → %(to_status)s"),
        vendor_may_receive=False,
    ),
    DUE_SOON: EventKind(
        _("A question I follow is due soon"), ASSIGNEE_OR_PMS, _("%(question)s is due on %(due_date)s")
    ),
    OVERDUE: EventKind(
        _("A question I follow is overdue"), ASSIGNEE_OR_PMS, _("%(question)s is overdue: it was due on %(due_date)s")
    ),
    REVERIFICATION_DUE: EventKind(
        _("Proof must be re-verified"),
        ASSIGNEE_AND_PMS,
        _("%(question)s must be re-verified: %(target)s now runs other versions"),
    ),
    TEST: EventKind(_("A test delivery"), NAMED, _("A test delivery from calculet")),
}

# What a person can choose on their preferences page: every kind but the webhook's test delivery.
CHOOSABLE = [kind for kind in EVENTS if kind != TEST]
CHOICES = [(kind, EVENTS[kind].label) for kind in EVENTS]


# The data values that are codes or stored English names, and the vocabulary (calculet.labels) each reads in.
LABELLED_DATA = {"stage": "stage", "verdict": "verdict", "target": "target_name"}


def subject(kind: str, data: dict) -> str:
    """An event in one line, in the active language; a value the data lacks shows as "?"."""
    shown = {
        key: labels.label(LABELLED_DATA[key], value) if key in LABELLED_DATA else value for key, value in data.items()
    }
    return str(EVENTS[kind].subject) % defaultdict(lambda: "?", shown)


def detail(data: dict) -> str:
    """The event's detail (a run's summary) in the active language."""
    return labels.phrase("run_summary", data.get("detail", ""))


def url(data: dict) -> str:
    """The address of the page an event is about, or "" when there is none."""
    path = data.get("path", "")
    return f"{settings.CALCULET_BASE_URL.rstrip('/')}{path}" if path else ""
