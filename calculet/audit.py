"""The append-only, hash-chained audit log. Every service that changes state calls `audit_record`."""

import hashlib
import json
from typing import Any

from django.db import transaction
from django.utils import timezone

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


def _build_entry(prev_hash: str, *, actor, action, obj=None, object_type="", object_id="", before=None, after=None):
    user = actor if getattr(actor, "is_authenticated", False) else None
    entry = AuditEntry(
        created_at=timezone.now(),
        actor=user,
        actor_label=user.get_username() if user else str(actor or "system"),
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


def audit_record(*, actor, action: str, obj=None, object_type: str = "", object_id: str = "", before=None, after=None):
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
