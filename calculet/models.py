"""The core's own tables: the audit log every app writes through."""

from django.conf import settings
from django.db import models


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditImmutableError("Audit entries are append-only.")

    def delete(self):
        raise AuditImmutableError("Audit entries are append-only.")


class AuditImmutableError(Exception):
    pass


class AuditEntry(models.Model):
    """Who did what to which object, written in the same transaction as the change.

    Each row carries the hash of the row before it, so an edited or deleted row breaks the chain
    (see `calculet.audit.audit_verify`). The unique `prev_hash` forbids a fork.
    """

    created_at = models.DateTimeField()
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=60, db_index=True)
    object_type = models.CharField(max_length=60, db_index=True)
    object_id = models.CharField(max_length=100, db_index=True)
    object_repr = models.CharField(max_length=300)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, unique=True)
    hash = models.CharField(max_length=64, unique=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"

    def __str__(self):
        return f"{self.actor_label} {self.action} {self.object_type}:{self.object_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AuditImmutableError("Audit entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditImmutableError("Audit entries are append-only.")


class AuditHead(models.Model):
    """A single row holding the latest audit hash; locking it serialises appends to the chain."""

    last_hash = models.CharField(max_length=64)


class JobRun(models.Model):
    """When a periodic job last finished (one row per job), so that a job that stopped running is seen: beat
    down leaves no other trace. `/readyz` and `manage.py ops_status` read the sweeper's."""

    name = models.CharField(max_length=60, primary_key=True)
    finished_at = models.DateTimeField()

    def __str__(self):
        return f"{self.name} finished at {self.finished_at:%Y-%m-%d %H:%M:%S}"
