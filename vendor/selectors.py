"""Reads of the vendor app's rows for the pages and the API alike, scoped by `vendor.access`, each in a fixed
number of queries whatever the number of rows."""

import datetime
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_noop

from calculet.errors import DomainError
from calculet.models import AuditEntry
from vendor import due, events, states
from vendor.access import may_see_all, objects_for_user
from vendor.models import (
    Answer,
    ApiToken,
    Artifact,
    Comment,
    CommentRevision,
    Deliverable,
    Membership,
    Notification,
    NotificationPreference,
    Organisation,
    Question,
    Section,
    Upload,
    Webhook,
    WebhookDelivery,
)

ATTACHABLE_LIMIT = 200


def question_list(*, user) -> QuerySet[Question]:
    return objects_for_user(user, Question.objects).select_related("section", "assignee", "organisation")


def answer_list(*, user, question: Question | None = None) -> QuerySet[Answer]:
    answers = objects_for_user(user, Answer.objects)
    if question is not None:
        answers = answers.filter(question=question)
    return (
        answers.select_related("question", "deliverable", "organisation", "author", "minimal_example_artifact")
        .prefetch_related(
            Prefetch("executable_assets", queryset=Artifact.objects.order_by("pk")),
            Prefetch("golden_artifacts", queryset=Artifact.objects.order_by("pk")),
        )
        .order_by("-revision", "-id")
    )


def artifact_list(*, user) -> QuerySet[Artifact]:
    return objects_for_user(user, Artifact.objects).select_related("organisation", "uploaded_by", "blob")


def upload_list(*, user) -> QuerySet[Upload]:
    return objects_for_user(user, Upload.objects).select_related("organisation", "artifact")


def organisation_list(*, user) -> QuerySet[Organisation]:
    return objects_for_user(user, Organisation.objects)


def organisations() -> QuerySet[Organisation]:
    """Every organisation, for resolving a slug a PM gives; `question_update` decides which may be used."""
    return Organisation.objects.all()


def vendor_organisations() -> QuerySet[Organisation]:
    """The organisations a question can be put to."""
    return Organisation.objects.filter(kind=Organisation.VENDOR)


@dataclass
class Assignees:
    """Who a question can be assigned to: any member of the integration team, and the vendor engineers of the
    organisation the question is put to (`vendor.services.questions` decides; this only offers)."""

    team: list = field(default_factory=list)
    contacts: dict[int, list] = field(default_factory=dict)

    def for_organisation(self, organisation_id: int | None) -> list:
        return self.contacts.get(organisation_id, []) if organisation_id else []

    def everyone(self) -> list:
        return [*self.team, *(user for users in self.contacts.values() for user in users)]


def assignees() -> Assignees:
    """The team and every vendor organisation's engineers, in one query."""
    people = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(
            Q(membership__organisation__kind=Organisation.INTEGRATOR)
            | Q(membership__organisation__kind=Organisation.VENDOR, membership__role=Membership.VENDOR)
        )
        .select_related("membership__organisation")
        .order_by("username")
    )
    found = Assignees()
    for person in people:
        organisation = person.membership.organisation
        if organisation.kind == Organisation.INTEGRATOR:
            found.team.append(person)
        else:
            found.contacts.setdefault(organisation.pk, []).append(person)
    return found


def section_list() -> QuerySet[Section]:
    return Section.objects.all()


def token_list(*, user) -> QuerySet[ApiToken]:
    """A user's own API tokens: nobody, the team included, lists another's."""
    return ApiToken.objects.filter(user=user)


def audit_entries() -> QuerySet[AuditEntry]:
    """The audit log, newest first; only for those `vendor.access.may_read_audit` lets in."""
    return AuditEntry.objects.order_by("-id")


def question_by_code(code: str) -> Question:
    """The question a code names (V18, v18), for the audit log's history filter."""
    question = Question.objects.filter(code=code.strip().upper()).first()
    if question is None:
        raise DomainError(
            gettext_noop("No question has the code %(code)r."), field="question", params={"code": code.strip()}
        )
    return question


def due_soon_days() -> int:
    return settings.QUESTION_DUE_SOON_DAYS


def questions_by_due(questions: QuerySet[Question], status: str, today: datetime.date) -> QuerySet[Question]:
    """The questions whose `vendor.due.due_status` is `status`, or (`due.NOT_DUE`) open ones without a due date."""
    waiting = questions.exclude(state__in=states.SETTLED_STATES)
    if status == due.NOT_DUE:
        return waiting.filter(due_date__isnull=True)
    if status == due.OVERDUE:
        return waiting.filter(due_date__lt=today)
    if status == due.DUE_SOON:
        return waiting.filter(due_date__gte=today, due_date__lte=today + datetime.timedelta(days=due_soon_days()))
    raise ValueError(f"unknown due status {status!r}")


def questions_owing(questions: QuerySet[Question], owes: bool) -> QuerySet[Question]:
    """The open questions that still owe a deliverable (owed or rejected), or (`owes=False`) the others: what a
    vendor means by "waiting for us", whatever state the question is in."""
    owing = Exists(Deliverable.objects.filter(question=OuterRef("pk")).owed())
    condition = owing & ~Q(state__in=states.SETTLED_STATES)
    return questions.filter(condition) if owes else questions.exclude(condition)


def due_counts(*, user) -> dict[str, int]:
    """How many of the questions the user may see are overdue, due soon, or open without a due date; one query."""
    today = timezone.localdate()
    waiting = ~Q(state__in=states.SETTLED_STATES)
    soon_until = today + datetime.timedelta(days=due_soon_days())
    return objects_for_user(user, Question.objects).aggregate(
        **{
            due.OVERDUE: Count("pk", filter=waiting & Q(due_date__lt=today)),
            due.DUE_SOON: Count("pk", filter=waiting & Q(due_date__gte=today, due_date__lte=soon_until)),
            due.NOT_DUE: Count("pk", filter=waiting & Q(due_date__isnull=True)),
        }
    )


def open_questions() -> QuerySet[Question]:
    """Questions neither closed nor deferred, grouped by the organisation they are put to."""
    return (
        Question.objects.exclude(state__in=states.SETTLED_STATES)
        .select_related("organisation", "assignee", "section")
        .order_by("organisation__slug", "number")
    )


def active_users():
    """People who can be named as an assignee; `question_update` decides which of them may be."""
    return get_user_model().objects.filter(is_active=True)


def comment_list(*, user, question: Question) -> QuerySet[Comment]:
    """The question's thread as the user may read it, oldest first, with attachments, mentions and revisions."""
    return (
        objects_for_user(user, Comment.objects.filter(question=question))
        # The thread names each author's organisation.
        .select_related("author__membership__organisation", "organisation", "question")
        .prefetch_related(
            Prefetch("artifacts", queryset=Artifact.objects.order_by("pk")),
            Prefetch("mentions", queryset=get_user_model().objects.order_by("username")),
            Prefetch("revisions", queryset=CommentRevision.objects.select_related("author").order_by("revision")),
        )
        .order_by("created_at", "id")
    )


def attachable_artifacts(*, user, question: Question) -> QuerySet[Artifact]:
    """What a comment on the question may link: the artifacts of the vendor it is put to, newest first."""
    if question.organisation_id is None:
        return Artifact.objects.none()
    artifacts = objects_for_user(user, Artifact.objects.filter(organisation_id=question.organisation_id))
    return artifacts.order_by("-created_at", "-id")[:ATTACHABLE_LIMIT]


def notification_preference(user) -> NotificationPreference:
    """The user's choices, or the defaults (told of everything, in the site's language) when never changed."""
    return NotificationPreference.objects.filter(user=user).first() or NotificationPreference(user=user)


def notification_kinds(user) -> list[str]:
    """The kinds a person can choose to be told of: a vendor's engineers are never told of the team's own
    decisions (promotions), so they are not offered them."""
    return [kind for kind in events.CHOOSABLE if events.EVENTS[kind].vendor_may_receive or may_see_all(user)]


def notification_list(*, user) -> QuerySet[Notification]:
    """What the user was told, newest first: nobody, the team included, lists another's."""
    return Notification.objects.filter(user=user).select_related("event").order_by("-id")


def webhook_list() -> QuerySet[Webhook]:
    """Every hook, for those `vendor.access.may_manage_webhooks` lets in."""
    return Webhook.objects.select_related("organisation").order_by("name", "id")


def webhook_deliveries(hook: Webhook) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(hook=hook).select_related("event").order_by("-id")


def deliverables_owed(question: Question) -> list[Deliverable]:
    """The question's deliverables not yet accepted (owed or rejected) and without an accepted alternative, in
    their order."""
    return list(Deliverable.objects.filter(question=question).owed().order_by("position", "key"))
