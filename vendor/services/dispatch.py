"""Sending the vendor app's tasks to the broker, by name (`vendor/tasks.py` imports the services, so no
service imports it). A message is only a wake-up call: what it asks for is stored first, so a broker that is
down costs a resend interval, never the work — the periodic resend jobs send again what is left undone."""

import logging

from calculet.celery import task_send

logger = logging.getLogger(__name__)


def artifact_check_queue(artifact_id: int) -> None:
    try:
        task_send("vendor.artifact_check", [artifact_id])
    except Exception:  # the broker is down: the artifact stays verifying and is sent again later
        logger.exception("could not send the check of artifact %s; it will be sent again", artifact_id)


def notification_email_queue(notification_id: int) -> None:
    try:
        task_send("vendor.notification_email", [notification_id])
    except Exception:  # the broker is down: the notification stays listed, with no e-mail sent
        logger.exception("could not queue the e-mail of notification %s", notification_id)


def webhook_delivery_queue(delivery_id: int) -> None:
    try:
        task_send("vendor.webhook_deliver", [delivery_id])
    except Exception:  # the broker is down: the delivery stays pending, with its log
        logger.exception("could not queue webhook delivery %s", delivery_id)
