"""The append-only, hash-chained audit log. Every service that changes state calls `audit_record`."""

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Cast
from django.utils import timezone

from calculet.actors import Actor, actor_label, actor_user
from calculet.db import lock_rows
from calculet.models import AuditEntry, AuditHead

GENESIS_HASH = "0" * 64


def _canonical(entry_fields: dict[str, Any]) -> bytes:
    return json.dumps(entry_fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def _entry_hash(entry: AuditEntry) -> str:
    fields = {
        "created_at": entry.created_at.isoformat(),
        "actor": entry.actor_id,
        "actor_label": entry.actor_label,
        "action": entry.action,
        "object_type": entry.object_type,
        "object_id": entry.object_id,
        "object_repr": entry.object_repr,
        "before": entry.before,
        "after": entry.after,
        "prev_hash": entry.prev_hash,
    }
    return hashlib.sha256(_canonical(fields)).hexdigest()


def _json_safe(value):
    return json.loads(json.dumps(value, ensure_ascii=False, default=str)) if value is not None else None


def _lock_head() -> AuditHead:
    head = lock_rows(AuditHead.objects).filter(pk=1).first()
    if head is None:
        AuditHead.objects.create(pk=1, last_hash=GENESIS_HASH)
        head = lock_rows(AuditHead.objects).get(pk=1)
    return head


def _build_entry(
    prev_hash: str, *, actor: Actor, action, obj=None, object_type="", object_id="", before=None, after=None
):
    entry = AuditEntry(
        created_at=timezone.now(),
        actor=actor_user(actor),
        actor_label=actor_label(actor),
        action=action,
        object_type=object_type or (obj._meta.label_lower if obj is not None else ""),
        object_id=object_id or (str(obj.pk) if obj is not None else ""),
        object_repr=str(obj)[:300] if obj is not None else "",
        before=_json_safe(before),
        after=_json_safe(after),
        prev_hash=prev_hash,
    )
    entry.hash = _entry_hash(entry)
    return entry


def _require_transaction() -> None:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit rows must be written inside the transaction of the change they record")


def audit_record(
    *, actor: Actor, action: str, obj=None, object_type: str = "", object_id: str = "", before=None, after=None
):
    """Append one audit row. Must run inside the transaction that makes the change it records."""
    _require_transaction()
    head = _lock_head()
    entry = _build_entry(
        head.last_hash,
        actor=actor,
        action=action,
        obj=obj,
        object_type=object_type,
        object_id=object_id,
        before=before,
        after=after,
    )
    entry.save()
    AuditHead.objects.filter(pk=1).update(last_hash=entry.hash)
    return entry


def audit_record_many(records: list[dict]) -> list[AuditEntry]:
    """Append several rows (each a dict of `audit_record`'s arguments) in a fixed number of queries."""
    _require_transaction()
    if not records:
        return []
    head = _lock_head()
    entries = []
    prev_hash = head.last_hash
    for record in records:
        entry = _build_entry(prev_hash, **record)
        entries.append(entry)
        prev_hash = entry.hash
    AuditEntry.objects.bulk_create(entries)
    AuditHead.objects.filter(pk=1).update(last_hash=prev_hash)
    return entries


def audit_verify() -> list[str]:
    """Walk the chain from the first row; return the problems found (empty when intact)."""
    problems = []
    expected_prev = GENESIS_HASH
    last_hash = GENESIS_HASH
    for entry in AuditEntry.objects.order_by("id").iterator(chunk_size=2000):
        if entry.prev_hash != expected_prev:
            problems.append(f"entry {entry.id}: previous hash does not match entry before it (row missing or edited)")
        if _entry_hash(entry) != entry.hash:
            problems.append(f"entry {entry.id}: content does not match its hash (row edited)")
        expected_prev = entry.hash
        last_hash = entry.hash
    head = AuditHead.objects.filter(pk=1).first()
    if head is not None and head.last_hash != last_hash:
        problems.append("the newest entries are missing: the chain ends before the recorded head")
    return problems


# What "the history of" a question or a capability is. The app that owns the object registers how a key (a
# question code, a capability slug) names it; each app then adds the entries about its rows that belong to that
# object (a question's answers and comments, its chains and runs), so the audit page can show one history
# without importing the apps above it.
_SUBJECT_LOOKUPS: dict[str, Callable[[str], Any]] = {}
_SUBJECT_SCOPES: dict[str, list[Callable[[Any], Q]]] = {}


def register_subject(kind: str, lookup: Callable[[str], Any]) -> None:
    """`lookup(key)` returns the object a key names, or raises `calculet.errors.DomainError` saying why not."""
    _SUBJECT_LOOKUPS[kind] = lookup


def register_subject_scope(kind: str, scope: Callable[[Any], Q]) -> None:
    """`scope(obj)` selects the audit entries about `obj` that one app's rows hold."""
    _SUBJECT_SCOPES.setdefault(kind, []).append(scope)


def entries_about(model: type[models.Model], ids: "models.QuerySet[Any]") -> Q:
    """Entries recorded on rows of `model` whose primary keys `ids` (a one-column queryset) selects."""
    return Q(
        object_type=model._meta.label_lower,
        object_id__in=ids.annotate(audit_object_id=Cast("pk", models.CharField())).values("audit_object_id"),
    )


def subject_history(kind: str, key: str) -> Q:
    """The entries about the object `key` names, from every app that registered a scope for `kind`."""
    subject = _SUBJECT_LOOKUPS[kind](key)
    condition = Q(pk__in=[])
    for scope in _SUBJECT_SCOPES.get(kind, []):
        condition |= scope(subject)
    return condition
