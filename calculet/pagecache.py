"""Rendered parts of the busiest pages, kept while the data they show has not changed.

A part is stored under the database's snapshot, read before anything the part shows: PostgreSQL's
`pg_current_snapshot()` says which transactions have committed, so two requests that read the same snapshot
see the same rows. Any commit, from any process, changes it, and the next request renders afresh; a part is
never older than what its reader could read. Whatever else a part depends on (the language, the reader's
role, today's date) is part of its key.

SQLite has no such snapshot, and inside a transaction the snapshot does not change with the transaction's
own writes: there every part is rendered every time.
"""

import hashlib
import threading
from collections.abc import Callable, Iterable

from django.core.cache import cache
from django.db import connection
from django.utils.translation import get_language

PART_SECONDS = 300  # how long an unchanged page's parts are kept
_RENDER_LOCKS = [threading.RLock() for _ in range(64)]  # reentrant: a part may hold another part


def data_version() -> str | None:
    """The snapshot a cached part is keyed on, or None where parts are not cached. Read it before the data."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_snapshot()::text")
        (snapshot,) = cursor.fetchone()
    # Databases of one server share their snapshots; each keeps its own parts.
    return f"{connection.settings_dict['NAME']}@{snapshot}"


def cached_part(name: str, version: str | None, vary: Iterable, render: Callable[[], str]) -> str:
    """The part `name` as `render()` makes it, from the cache when it was made at `version` for the same
    `vary` values and language. No version (None, or a template's missing variable) renders it afresh."""
    if not version:
        return render()
    digest = hashlib.sha256(repr((name, version, get_language(), *vary)).encode()).digest()
    key = "part:" + digest.hex()
    html = cache.get(key)
    if html is not None:
        return html
    # After a commit every thread of the process asks for the same new part at once: one renders it, the
    # others wait for it instead of rendering it too.
    with _RENDER_LOCKS[digest[0] % len(_RENDER_LOCKS)]:
        html = cache.get(key)
        if html is None:
            html = render()
            cache.set(key, html, PART_SECONDS)
    return html
