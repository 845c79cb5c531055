"""The acceptance events people are told of: a run that fails or errs, the gate's decisions, proof to re-verify
after a target's versions change."""

import datetime

import pytest
from django.utils import timezone, translation

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain, Run, Target
from acceptance.protocol import StageOutcome
from acceptance.services import capability_promote, chain_start_for_answer, target_register
from acceptance.services.runs.finishing import run_finish
from calculet.actors import SYSTEM
from tests.factories import make_user
from vendor import events
from vendor.inputs import QuestionChanges
from vendor.models import Notification, NotificationEvent, NotificationPreference
from vendor.services.notifications import notification_email_send, notification_emails_resend, notify
from vendor.services.questions import question_update
from vendor.services.webhooks import RESEND_AFTER


@pytest.fixture
def told(django_capture_on_commit_callbacks):
    def run(change, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return change(*args, **kwargs)

    return run


@pytest.fixture
def chain(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer, target=simulator_online)


def recipients(kind: str) -> list[str]:
    return sorted(Notification.objects.filter(event__kind=kind).values_list("user__username", flat=True))


@pytest.mark.parametrize("verdict", [stages.FAIL, stages.ERROR])
def test_a_failed_or_errored_run_tells_the_assignee_and_the_vendor(
    chain, pm_user, vendor_user, question, told, verdict
):
    make_user("otto", "bolt", "vendor")  # another vendor's engineer
    question_update(actor=pm_user, question=question, changes=QuestionChanges(assignee=pm_user))
    run = Run.objects.get(chain=chain, stage=stages.CLAIM)
    Run.objects.filter(pk=run.pk).update(state=stages.RUNNING, attempt=1)
    run.refresh_from_db()
    told(run_finish, run, worker="test", outcome=StageOutcome(verdict, "the golden does not match"), reporter=None)
    assert recipients("run_failed") == ["pam", "val"]
    event = NotificationEvent.objects.get(kind="run_failed")
    assert (event.data["verdict"], event.data["detail"], event.organisation) == (
        verdict,
        "the golden does not match",
        vendor_user.membership.organisation,
    )


def test_a_failed_run_is_mailed_in_the_readers_language(chain, pm_user, vendor_user, question, told, mailoutbox):
    """Stage, verdict, the simulator's name and calculet's summary in Chinese; the runner's detail as written."""
    NotificationPreference.objects.create(user=vendor_user, language="zh-hans")
    vendor_user.email = "val@acme.example"
    vendor_user.save(update_fields=["email"])
    run = Run.objects.get(chain=chain, stage=stages.CLAIM)
    Run.objects.filter(pk=run.pk).update(state=stages.RUNNING, attempt=1)
    run.refresh_from_db()
    reason = "1 check(s) failed — golden:decode_logits: top1 0.97 < 0.99"
    told(run_finish, run, worker="test", outcome=StageOutcome(stages.FAIL, reason), reporter=None)
    event = NotificationEvent.objects.get(kind="run_failed")
    assert (event.data["stage"], event.data["verdict"]) == (stages.CLAIM, stages.FAIL)
    notification_email_send(Notification.objects.get(event=event, user=vendor_user).pk)
    mail = mailoutbox[-1]
    assert mail.subject == f"[calculet] {question.code}：厂商声明 在 内置 NPU 模拟器 上结束，结果为 失败"
    assert "1 项检查未通过 — golden:decode_logits: top1 0.97 < 0.99" in mail.body
    with translation.override("en"):
        assert events.subject(event.kind, event.data) == (
            f"{question.code}: Claim ended failed on Bundled NPU simulator"
        )


def test_an_email_whose_message_was_lost_is_sent_again(pm_user, vendor_user, question, mailoutbox, tasks_in_process):
    pm_user.email = "pam@team.example"
    pm_user.save(update_fields=["email"])
    # No commit in this test, so the e-mail was never queued: as if the broker had been down.
    event = notify(
        "overdue",
        actor=SYSTEM,
        organisation_id=question.organisation_id,
        question_id=question.pk,
        data={"due_date": "2026-01-01"},
    )
    notification = Notification.objects.get(event=event, user=pm_user)
    failed = Notification.objects.create(event=event, user=vendor_user, email="val@acme.example", error="550")
    assert notification_emails_resend() == 0  # its message may still be on its way
    later = timezone.now() + RESEND_AFTER + datetime.timedelta(seconds=1)
    assert notification_emails_resend(now=later) == 1  # not the one whose sending failed: its task retries it
    assert [mail.to for mail in mailoutbox] == [["pam@team.example"]]
    notification.refresh_from_db()
    failed.refresh_from_db()
    assert notification.emailed_at is not None and failed.emailed_at is None
    assert notification_emails_resend(now=later) == 0


def test_a_passed_run_tells_nobody(chain, pm_user, question, told):
    run = Run.objects.get(chain=chain, stage=stages.CLAIM)
    Run.objects.filter(pk=run.pk).update(state=stages.RUNNING, attempt=1)
    run.refresh_from_db()
    told(run_finish, run, worker="test", outcome=StageOutcome(stages.PASS, "fine"), reporter=None)
    assert not NotificationEvent.objects.filter(kind="run_failed").exists()


def test_the_gates_decisions_are_told_to_the_team_and_never_to_a_vendor(capability, pm_user, vendor_user, told):
    other_pm = make_user("quinn", "team", "pm")
    told(capability_promote, actor=pm_user, capability=capability, request=PromotionRequest(to="C0"))
    assert recipients("promotion_blocked") == ["quinn"]
    told(
        capability_promote,
        actor=pm_user,
        capability=capability,
        request=PromotionRequest(to="C4", reason="not supported after all"),
    )
    assert recipients("promotion_granted") == ["quinn"]
    event = NotificationEvent.objects.get(kind="promotion_granted")
    assert (event.organisation, event.data["from_status"], event.data["to_status"]) == (None, "C3", "C4")
    assert not Notification.objects.filter(user=vendor_user).exists()
    assert other_pm.notifications.count() == 2


def test_new_versions_on_a_target_tell_whose_proof_must_be_re_verified(chain, pm_user, vendor_user, question, told):
    question_update(actor=pm_user, question=question, changes=QuestionChanges(assignee=vendor_user))
    told(
        target_register,
        actor=SYSTEM,
        slug="simulator",
        kind=Target.SIMULATOR,
        calrt_version="0.8.0",
        driver_version="2.3.0",
        firmware_version="1.8.0",
        chip="calculet-2c",
    )
    assert recipients("reverification_due") == ["pam", "val"]
    event = NotificationEvent.objects.get(kind="reverification_due")
    assert event.question == question and "CalRT 0.8.0" in event.data["detail"]
