"""Only the promotion gate writes a capability's status.

The gate runs its write inside `gate_writes()`; any other save, `update()`, `bulk_update()` or upserting
`bulk_create()` that touches the status raises. Raw SQL and a new row's initial status (set by the seed
import) are outside this guard.
"""

from contextlib import contextmanager
from contextvars import ContextVar

_gate_active: ContextVar[bool] = ContextVar("capability_gate_active", default=False)


class StatusWriteError(Exception):
    """A capability status was changed outside the promotion gate."""


@contextmanager
def gate_writes():
    token = _gate_active.set(True)
    try:
        yield
    finally:
        _gate_active.reset(token)


def check_status_write() -> None:
    if not _gate_active.get():
        raise StatusWriteError("A capability's status changes only through the promotion gate.")
