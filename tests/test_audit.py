import io
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from calculet import labels
from calculet.actors import SYSTEM
from calculet.audit import audit_record, audit_verify
from calculet.models import AuditEntry, AuditImmutableError

pytestmark = pytest.mark.django_db


@pytest.fixture
def entries():
    with transaction.atomic():
        return [
            audit_record(actor=SYSTEM, action="thing.change", object_type="demo", object_id=str(n), after={"n": n})
            for n in range(5)
        ]


def verify() -> str:
    out = io.StringIO()
    call_command("verify_audit", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def raw(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_the_chain_verifies(entries):
    assert audit_verify() == []
    assert "audit chain intact: 5 entries" in verify()
    assert [e.prev_hash for e in entries[1:]] == [e.hash for e in entries[:-1]]


def test_an_edited_row_is_detected(entries):
    raw("UPDATE calculet_auditentry SET object_repr = %s WHERE id = %s", ["forged", entries[2].pk])
    with pytest.raises(CommandError) as error:
        verify()
    assert error.value.returncode != 0
    assert audit_verify() == [f"entry {entries[2].pk}: content does not match its hash (row edited)"]


def test_an_edited_row_with_a_recomputed_hash_still_breaks_the_chain(entries):
    raw("UPDATE calculet_auditentry SET hash = %s WHERE id = %s", ["f" * 64, entries[1].pk])
    problems = audit_verify()
    assert f"entry {entries[1].pk}: content does not match its hash (row edited)" in problems
    assert any(p.startswith(f"entry {entries[2].pk}: previous hash") for p in problems)


def test_a_deleted_row_is_detected(entries):
    raw("DELETE FROM calculet_auditentry WHERE id = %s", [entries[2].pk])
    with pytest.raises(CommandError) as error:
        verify()
    assert error.value.returncode != 0
    assert audit_verify() == [
        f"entry {entries[3].pk}: previous hash does not match entry before it (row missing or edited)"
    ]


def test_a_deleted_newest_row_is_detected(entries):
    raw("DELETE FROM calculet_auditentry WHERE id = %s", [entries[-1].pk])
    with pytest.raises(CommandError):
        verify()
    assert audit_verify() == ["the newest entries are missing: the chain ends before the recorded head"]


def test_the_model_refuses_to_change_or_delete_an_entry(entries):
    entry = AuditEntry.objects.get(pk=entries[0].pk)
    entry.object_repr = "forged"
    with pytest.raises(AuditImmutableError):
        entry.save()
    with pytest.raises(AuditImmutableError):
        entry.delete()
    with pytest.raises(AuditImmutableError):
        AuditEntry.objects.filter(pk=entry.pk).update(object_repr="forged")
    with pytest.raises(AuditImmutableError):
        AuditEntry.objects.filter(pk=entry.pk).delete()
    with pytest.raises(AuditImmutableError):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.count() == 5
    assert AuditEntry.objects.get(pk=entry.pk).object_repr == ""
    assert audit_verify() == []


def test_every_action_the_services_record_has_a_label():
    """The audit log names each action in the reader's language: none recorded without a label."""
    root = Path(settings.BASE_DIR)
    recorded = {
        action
        for app in ("calculet", "vendor", "evidence", "acceptance")
        for path in (root / app).rglob("*.py")
        for action in re.findall(r'action="([a-z_]+\.[a-z_]+)"', path.read_text(encoding="utf-8"))
    }
    assert recorded
    assert sorted(action for action in recorded if labels.label("audit_action", action) == action) == []
