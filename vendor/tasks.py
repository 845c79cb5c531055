"""Celery tasks of the vendor app: each takes ids and calls a service."""

from smtplib import SMTPException

from celery import shared_task

from vendor.services.artifacts import artifact_check, artifacts_check_resend
from vendor.services.notifications import notification_email_send, notification_emails_resend, questions_due_notify
from vendor.services.uploads import upload_expire_stale
from vendor.services.webhooks import webhook_deliver, webhook_deliveries_resend


@shared_task(name="vendor.uploads_expire", acks_late=True)
def uploads_expire_task() -> None:
    upload_expire_stale()


@shared_task(name="vendor.artifact_check", acks_late=True)
def artifact_check_task(artifact_id: int) -> None:
    artifact_check(artifact_id)


@shared_task(name="vendor.artifacts_check_resend", acks_late=True)
def artifacts_check_resend_task() -> None:
    artifacts_check_resend()


@shared_task(
    name="vendor.notification_email",
    acks_late=True,
    autoretry_for=(OSError, SMTPException),
    retry_backoff=60,
    max_retries=5,
)
def notification_email_task(notification_id: int) -> None:
    notification_email_send(notification_id)


@shared_task(name="vendor.webhook_deliver", bind=True, acks_late=True, max_retries=None)
def webhook_deliver_task(self, delivery_id: int) -> None:
    wait = webhook_deliver(delivery_id)  # the service counts the attempts and says how long to back off
    if wait is not None:
        raise self.retry(countdown=wait)


@shared_task(name="vendor.notifications_resend", acks_late=True)
def notifications_resend_task() -> None:
    notification_emails_resend()
    webhook_deliveries_resend()


@shared_task(name="vendor.questions_due_notify", acks_late=True)
def questions_due_notify_task() -> None:
    questions_due_notify()
