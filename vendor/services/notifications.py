"""Telling people what happened: each event stored once, then e-mailed to every person its audience names who
may be told of it (`vendor.access.may_be_told`) and has not muted its kind, and POSTed to the webhooks that
subscribe to it (`vendor.services.webhooks`). Who is a candidate for which event is data (`vendor.events`).

Services call `notify_on_commit` at the line where the change they make is decided: the event is told only
once that change has committed, and a failure to tell never undoes it.
"""

import datetime
from functools import partial

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone, translation
from django.utils.translation import gettext_noop

from calculet.actors import SYSTEM, Actor, actor_label, actor_user
from calculet.audit import audit_record
from calculet.errors import DomainError
from vendor import due, events
from vendor.access import may_be_told, may_open_pages, may_see_all, user_membership
from vendor.inputs import NotificationPreferences
from vendor.models import (
    Comment,
    Membership,
    Notification,
    NotificationEvent,
    NotificationPreference,
    Organisation,
    Question,
)
from vendor.selectors import questions_by_due
from vendor.services.dispatch import notification_email_queue
from vendor.services.webhooks import RESEND_AFTER, webhook_deliveries_create


def _team_pm_ids() -> set[int]:
    return set(
        Membership.objects.filter(organisation__kind=Organisation.INTEGRATOR, role=Membership.PM).values_list(
            "user_id", flat=True
        )
    )


def _candidate_ids(kind: str, question: Question | None, organisation_id: int | None, named: set[int]) -> set[int]:
    audience = events.EVENTS[kind].audience
    ids = set(named)
    assignee_id = question.assignee_id if question is not None else None
    if assignee_id and audience != events.NAMED:
        ids.add(assignee_id)
    if question is not None and audience in (events.QUESTION_PEOPLE, events.THREAD):
        ids |= set(Comment.objects.filter(question=question, author__isnull=False).values_list("author_id", flat=True))
    if organisation_id is not None and audience in (events.THREAD, events.RUN_PEOPLE):
        ids |= set(
            Membership.objects.filter(organisation_id=organisation_id, role=Membership.VENDOR).values_list(
                "user_id", flat=True
            )
        )
    if audience in (events.PMS, events.ASSIGNEE_AND_PMS) or (audience == events.ASSIGNEE_OR_PMS and not assignee_id):
        ids |= _team_pm_ids()
    return ids


def _muted(user) -> list[str]:
    try:
        return user.notification_preference.muted
    except NotificationPreference.DoesNotExist:
        return []


def _recipients(kind: str, event: NotificationEvent, named: set[int], skipped: set) -> list:
    ids = _candidate_ids(kind, event.question, event.organisation_id, named) - skipped
    people = (
        get_user_model()
        .objects.filter(pk__in=ids, is_active=True)
        .select_related("membership__organisation", "notification_preference")
        .order_by("pk")
    )
    return [
        person
        for person in people
        if may_open_pages(person)
        and may_be_told(person, organisation_id=event.organisation_id)
        and (events.EVENTS[kind].vendor_may_receive or may_see_all(person))
        and kind not in _muted(person)
    ]


def notify(
    kind: str,
    *,
    actor: Actor,
    organisation_id: int | None,
    question_id: int | None = None,
    named_ids=(),
    skip_ids=(),
    data: dict | None = None,
    key: str = "",
) -> NotificationEvent | None:
    """Store the event and tell everyone who should be told: a Notification (e-mailed after commit) per
    person, a delivery per subscribed webhook. `organisation_id` is the vendor whose work the event is about
    (None: the team's own decision, which no vendor is told). `named_ids` are people the event names (the
    new assignee, those mentioned); `skip_ids` people told of it by another event (those a comment mentions).
    An event with a `key` already told is told again to nobody; returns None.
    """
    if kind not in events.EVENTS or kind == events.TEST:
        raise ValueError(f"unknown event kind {kind!r}")
    person = actor_user(actor)
    label = actor_label(actor)
    question = Question.objects.select_related("assignee").get(pk=question_id) if question_id else None
    data = {"actor": label, **(data or {})}
    if question is not None:
        data.setdefault("question", question.code)
        data.setdefault("path", f"/questions/{question.code}/")
    with transaction.atomic():
        try:
            with transaction.atomic():
                event = NotificationEvent.objects.create(
                    kind=kind,
                    key=key,
                    question=question,
                    organisation_id=organisation_id,
                    actor_label=label,
                    data=data,
                )
        except IntegrityError:
            return None  # told before
        skipped = {*skip_ids, person.pk if person else None}
        recipients = _recipients(kind, event, set(named_ids), skipped)
        notifications = Notification.objects.bulk_create(
            [Notification(event=event, user=person, email=person.email) for person in recipients]
        )
        webhook_deliveries_create(event)
        for notification in notifications:
            if notification.email:
                transaction.on_commit(partial(notification_email_queue, notification.pk))
    return event


def notify_on_commit(kind: str, **kwargs) -> None:
    """`notify` once the current transaction commits; a failure to tell is logged, never raised."""
    transaction.on_commit(partial(notify, kind, **kwargs), robust=True)


def notification_emails_resend(*, now: datetime.datetime | None = None) -> int:
    """Queue again the e-mail of every notification still unsent RESEND_AFTER after it was made and on which
    no attempt has failed (a failed attempt is retried, and given up, by its task); returns how many."""
    cutoff = (now or timezone.now()) - RESEND_AFTER
    unsent = Notification.objects.filter(emailed_at__isnull=True, error="", created_at__lte=cutoff).exclude(email="")
    notification_ids = list(unsent.order_by("pk").values_list("pk", flat=True))
    for notification_id in notification_ids:
        notification_email_queue(notification_id)
    return len(notification_ids)


def notification_email_send(notification_id: int) -> None:
    """E-mail one notification, in its recipient's language, once. A failure is recorded and raised (the task
    tries again)."""
    notification = Notification.objects.select_related("event__question", "user__notification_preference").get(
        pk=notification_id
    )
    if notification.emailed_at is not None or not notification.email:
        return
    try:
        language = notification.user.notification_preference.language
    except NotificationPreference.DoesNotExist:
        language = settings.LANGUAGE_CODE
    event = notification.event
    with translation.override(language):
        line = events.subject(event.kind, event.data)
        body = render_to_string(
            "vendor/notification-email.txt",
            {
                "event": event,
                "subject": line,
                "detail": events.detail(event.data),
                "url": events.url(event.data),
                "user": notification.user,
            },
        )
    try:
        send_mail(f"[calculet] {line}", body, settings.DEFAULT_FROM_EMAIL, [notification.email])
    except Exception as error:
        Notification.objects.filter(pk=notification.pk).update(error=str(error)[:2000])
        raise
    Notification.objects.filter(pk=notification.pk).update(emailed_at=timezone.now(), error="")


def notification_preferences_update(
    *, actor: Actor, user, preferences: NotificationPreferences
) -> NotificationPreference:
    """A person's own choices (`vendor.inputs.NotificationPreferences`): the kinds not to be told of, the
    language of e-mails, the address they go to.

    Preconditions: `actor` is `user` (ForbiddenError is never needed: nobody reaches another's preferences).
    DomainError otherwise; one audit row, none when nothing changed.
    """
    if actor != user or user_membership(user) is None:
        raise DomainError(gettext_noop("Only you change your notification preferences."))
    muted, language, email = list(preferences.muted), preferences.language, preferences.email
    with transaction.atomic():
        preference, _ = NotificationPreference.objects.select_for_update().get_or_create(user=user)
        before = {"muted": preference.muted, "language": preference.language, "email": user.email}
        after = {"muted": muted, "language": language, "email": email}
        if before == after:
            return preference
        preference.muted = muted
        preference.language = language
        preference.save(update_fields=["muted", "language", "updated_at"])
        if user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        audit_record(actor=actor, action="notification.preferences", obj=preference, before=before, after=after)
    return preference


def questions_due_notify() -> int:
    """The daily job: tell of every open question that became due soon or overdue, once per due date.
    Returns how many events were told."""
    today = timezone.localdate()
    told = 0
    for status, kind in ((due.OVERDUE, events.OVERDUE), (due.DUE_SOON, events.DUE_SOON)):
        for question in questions_by_due(Question.objects.all(), status, today).order_by("number"):
            event = notify(
                kind,
                actor=SYSTEM,
                organisation_id=question.organisation_id,
                question_id=question.pk,
                data={"due_date": str(question.due_date)},
                key=f"{kind}:{question.pk}:{question.due_date}",
            )
            told += event is not None
    return told
