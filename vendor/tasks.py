"""Celery tasks of the vendor app: each calls a service."""

from celery import shared_task

from vendor.services.artifacts import artifact_check, artifacts_check_resend
from vendor.services.uploads import upload_expire_stale


@shared_task(name="vendor.uploads_expire", acks_late=True)
def uploads_expire_task() -> None:
    upload_expire_stale()


@shared_task(name="vendor.artifact_check", acks_late=True)
def artifact_check_task(artifact_id: int) -> None:
    artifact_check(artifact_id)


@shared_task(name="vendor.artifacts_check_resend", acks_late=True)
def artifacts_check_resend_task() -> None:
    artifacts_check_resend()
