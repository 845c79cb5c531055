"""How a run's state may move: the table every write of `Run.state` is checked against. No ORM here.

`acceptance.services.runs.state.run_state_move` is the only code that writes a run's state; it refuses any
move that is not in this table.
"""

from acceptance.stages import ERROR, FAILED, PASSED, PENDING, QUEUED, RUNNING, STALE

# A new run is `queued` (sent to its target's queue) or `pending` (its target cannot take runs now).
RUN_INITIAL_STATES = frozenset({QUEUED, PENDING})

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    # Its target takes runs again (queued); it waited too long for a target that cannot take it (error); the
    # chain's inputs changed (stale).
    PENDING: frozenset({QUEUED, ERROR, STALE}),
    # A worker claims it (running); its target stopped taking runs before it started (pending); its attempts
    # are used up or it waited too long for a target that cannot take it (error); the chain's inputs changed
    # (stale).
    QUEUED: frozenset({RUNNING, PENDING, ERROR, STALE}),
    # The verdict of the attempt holding it (passed, failed, error); the chain's inputs changed (stale).
    # Once its lease expired: a new attempt (running), sent again (queued), its target stopped taking runs
    # (pending), or given up (error).
    RUNNING: frozenset({PASSED, FAILED, ERROR, STALE, RUNNING, QUEUED, PENDING}),
    # Finished runs never move: a re-run is a new run.
    PASSED: frozenset(),
    FAILED: frozenset(),
    ERROR: frozenset(),
    STALE: frozenset(),
}

# These moves take a running run away from the attempt holding it, so they need that attempt's lease to have
# expired: one attempt at a time.
RUN_MOVES_AFTER_LEASE = frozenset({(RUNNING, RUNNING), (RUNNING, QUEUED), (RUNNING, PENDING)})


def run_can_move(current: str | None, target: str) -> bool:
    """Whether a run in state `current` (None: not stored yet) may move to `target`."""
    if current is None:
        return target in RUN_INITIAL_STATES
    return target in RUN_TRANSITIONS.get(current, frozenset())
