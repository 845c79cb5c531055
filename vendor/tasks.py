"""Celery tasks of the vendor app: each calls a service."""

from celery import shared_task

from vendor.services.uploads import upload_expire_stale


@shared_task(name="vendor.uploads_expire", acks_late=True)
def uploads_expire_task() -> None:
    upload_expire_stale()
