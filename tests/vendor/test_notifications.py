"""Who is told what, by e-mail: the events of the vendor app, people's choices, and a vendor only ever told about
its own organisation."""

import datetime

import pytest
from django.core import mail
from django.utils import translation

from acceptance.services import answer_submit
from calculet.actors import SYSTEM
from calculet.errors import DomainError
from calculet.models import AuditEntry
from tests.factories import answer_draft, complete_answer, make_account, make_question
from vendor import events
from vendor.inputs import CommentDraft, NotificationPreferences, QuestionChanges, notification_preferences
from vendor.models import Notification, NotificationEvent, Question
from vendor.services.comments import comment_create
from vendor.services.notifications import notification_preferences_update, notify, questions_due_notify
from vendor.services.questions import question_update


@pytest.fixture
def told(chain_in_process, django_capture_on_commit_callbacks):
    """Run what a change queues once it commits (the events, then their e-mails), in this process."""

    def run(change, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return change(*args, **kwargs)

    return run


def addressed(user, address=None):
    user.email = address or f"{user.username}@example.org"
    user.save(update_fields=["email"])
    return user


def recipients(kind: str) -> list[str]:
    return sorted(Notification.objects.filter(event__kind=kind).values_list("user__username", flat=True))


def test_the_assignee_is_told_by_email_in_their_language(pm, vendor_a, question_a, told):
    addressed(vendor_a.user)
    notification_preferences_update(
        actor=vendor_a.user,
        user=vendor_a.user,
        preferences=NotificationPreferences(muted=(), language="zh-hans", email="alice@example.org"),
    )
    told(question_update, actor=pm.user, question=question_a, changes=QuestionChanges(assignee=vendor_a.user))
    assert recipients("assigned") == ["alice"]
    (message,) = mail.outbox
    assert message.to == ["alice@example.org"]
    assert message.subject == "[calculet] V18 已分配给你"
    assert "http://127.0.0.1:8000/questions/V18/" in message.body
    assert Notification.objects.get().emailed_at is not None


def test_nobody_is_told_of_their_own_doing_and_a_muted_kind_is_not_told(pm, question_a, told):
    colleague = addressed(make_account("cleo", "team", "pm").user)
    told(question_update, actor=pm.user, question=question_a, changes=QuestionChanges(assignee=pm.user))
    assert recipients("assigned") == []
    notification_preferences_update(
        actor=colleague,
        user=colleague,
        preferences=NotificationPreferences(muted=("assigned",), language="en", email=colleague.email),
    )
    told(question_update, actor=pm.user, question=question_a, changes=QuestionChanges(assignee=colleague))
    assert recipients("assigned") == [] and mail.outbox == []
    assert NotificationEvent.objects.filter(kind="assigned").count() == 2  # stored, told to nobody


def test_without_an_address_the_notification_is_listed_and_nothing_is_mailed(pm, vendor_a, question_a, told):
    told(question_update, actor=pm.user, question=question_a, changes=QuestionChanges(assignee=vendor_a.user))
    notification = Notification.objects.get()
    assert (notification.email, notification.emailed_at) == ("", None)
    assert mail.outbox == []


def test_an_answer_tells_the_assignee_and_the_threads_people(pm, vendor_a, question_a, artifacts_a, told):
    colleague = make_account("cleo", "team", "pm")
    question_update(actor=pm.user, question=question_a, changes=QuestionChanges(assignee=pm.user))
    comment_create(actor=colleague.user, question=question_a, draft=CommentDraft(body="waiting for this"))
    told(answer_submit, actor=vendor_a.user, question=question_a, draft=answer_draft(complete_answer(artifacts_a)))
    assert recipients("answered") == ["cleo", "pat"]
    event = NotificationEvent.objects.get(kind="answered")
    organisation = vendor_a.user.membership.organisation.name
    with translation.override("en"):
        assert events.subject(event.kind, event.data) == f"{organisation} answered V18 (revision 1)"


def test_a_vendor_is_only_ever_told_about_its_own_organisation(pm, vendor_a, vendor_b, question_a, question_b, told):
    """Every event the vendor app tells, on two vendors' questions: each vendor hears of its own alone."""
    for account in (vendor_a, vendor_b):
        addressed(account.user)
    colleague_a = addressed(make_account("amy", "acme", "vendor").user)
    for question, account in ((question_a, vendor_a), (question_b, vendor_b)):
        told(question_update, actor=pm.user, question=question, changes=QuestionChanges(assignee=account.user))
        told(
            comment_create, actor=pm.user, question=question, draft=CommentDraft(body="@alice @bruno @amy please look")
        )
        told(comment_create, actor=account.user, question=question, draft=CommentDraft(body="looking"))
    for kind in (events.RUN_FAILED, events.REVERIFICATION_DUE, events.PROMOTION_BLOCKED):
        for question in (question_a, question_b):
            told(
                notify,
                kind,
                actor=SYSTEM,
                organisation_id=question.organisation_id if kind != events.PROMOTION_BLOCKED else None,
                question_id=question.pk if kind != events.PROMOTION_BLOCKED else None,
                data={"capability": "x", "detail": "y"},
            )
    acme, bolt = vendor_a.user.membership.organisation, vendor_b.user.membership.organisation
    for user, own in ((vendor_a.user, acme), (colleague_a, acme), (vendor_b.user, bolt)):
        heard = Notification.objects.filter(user=user).select_related("event")
        assert heard.exists()
        assert {n.event.organisation_id for n in heard} == {own.pk}, user
        assert {n.event.question.code for n in heard} == {"V18" if own == acme else "V19"}
        assert not heard.filter(event__kind__startswith="promotion").exists()
    for message in mail.outbox:
        reader = message.to[0].split("@")[0]
        assert ("V19" in message.subject) == (reader == "bruno"), (reader, message.subject)


def test_the_daily_job_tells_each_due_date_once(pm, vendor_a, question_a, settings, told):
    settings.QUESTION_DUE_SOON_DAYS = 3
    today = datetime.date.today()
    question_update(actor=pm.user, question=question_a, changes=QuestionChanges(assignee=vendor_a.user))
    unassigned = make_question("V20", organisation=question_a.organisation, state="asked")
    settled = make_question("V21", organisation=question_a.organisation, state="deferred")
    later = make_question("V22", organisation=question_a.organisation, state="asked")
    Question.objects.filter(pk=question_a.pk).update(due_date=today - datetime.timedelta(days=1))
    Question.objects.filter(pk=unassigned.pk).update(due_date=today + datetime.timedelta(days=3))
    Question.objects.filter(pk__in=[settled.pk]).update(due_date=today - datetime.timedelta(days=9))
    Question.objects.filter(pk=later.pk).update(due_date=today + datetime.timedelta(days=4))
    assert told(questions_due_notify) == 2
    assert recipients("overdue") == ["alice"]
    assert recipients("due_soon") == ["pat"]  # nobody assigned: the team's PMs
    assert told(questions_due_notify) == 0
    # A new due date is a new occasion.
    told(question_update, actor=pm.user, question=question_a, changes=QuestionChanges(due_date=today))
    assert told(questions_due_notify) == 1
    assert recipients("due_soon") == ["alice", "pat"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"muted": ["nonsense"]}, "muted"),
        ({"muted": ["test"]}, "muted"),
        ({"language": "fr"}, "language"),
        ({"email": "not an address"}, "email"),
        ({"email": "a" * 250 + "@x.org"}, "email"),
    ],
)
def test_bad_preferences_name_the_field(changes, field):
    with pytest.raises(DomainError) as error:
        notification_preferences(**{"muted": [], "language": "en", "email": "", **changes})
    assert error.value.field == field


def test_preferences_are_parsed_stripped_and_in_order():
    parsed = notification_preferences(muted=["mention", "assigned", "mention"], language="en", email=" a@x.org ")
    assert parsed == NotificationPreferences(muted=("assigned", "mention"), language="en", email="a@x.org")


def test_preferences_are_ones_own_and_audited(pm, vendor_a):
    with pytest.raises(DomainError):
        notification_preferences_update(
            actor=pm.user, user=vendor_a.user, preferences=NotificationPreferences(muted=(), language="en", email="")
        )
    notification_preferences_update(
        actor=pm.user,
        user=pm.user,
        preferences=notification_preferences(
            muted=["comment", "assigned"], language="zh-hans", email="pat@example.org"
        ),
    )
    entry = AuditEntry.objects.get(action="notification.preferences")
    assert entry.after == {"muted": ["assigned", "comment"], "language": "zh-hans", "email": "pat@example.org"}
