"""Row locks for services that move state."""

from django.db.models import Manager, QuerySet


def lock_rows(rows: Manager | QuerySet, *, skip_locked: bool = False) -> QuerySet:
    """Lock the rows a query returns until the transaction ends.

    FOR NO KEY UPDATE, not FOR UPDATE: PostgreSQL checks Django's deferred foreign keys at commit with
    FOR KEY SHARE locks on the referenced rows, which FOR UPDATE would block, deadlocking two services
    that each hold one lock and wait for the other's row (the audit head against a capability, say).
    Only the model's own rows are locked (`of=self`); a locking query must not join a foreign key that a
    concurrent transaction may change, as PostgreSQL's re-check of the join then drops the row.
    """
    return rows.all().select_for_update(no_key=True, of=("self",), skip_locked=skip_locked)
