"""Claiming a run for one attempt.

A run is claimed under `select_for_update` only while it is `queued`, or `running` with an expired lease; the
claim raises `attempt` and sets a lease that the attempt renews while it works (`reporting`).
"""

import os
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from acceptance import stages
from acceptance.models import Run
from acceptance.services.locking import run_lock
from acceptance.services.runs.finishing import run_give_up
from acceptance.services.runs.state import run_state_move
from acceptance.services.targets import target_accepts_runs

CLAIMED = "claimed"
HELD = "held"
GONE = "gone"


def worker_label() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"


def run_claim(run_id: int, worker: str, *, skip_locked: bool = False) -> tuple[str, Run | None]:
    """Take the run for one attempt: (CLAIMED, run), (HELD, run) while another attempt's lease is live, or
    (GONE, run-or-None) when there is nothing to do (finished, stale, waiting for its target, or given up).
    `skip_locked`: a run another transaction holds is GONE for this claim rather than waited for."""
    now = timezone.now()
    with transaction.atomic():
        run = run_lock(run_id, skip_locked=skip_locked)
        if run is None:
            return GONE, None
        if run.state == stages.RUNNING and run.lease_expires_at is not None and run.lease_expires_at > now:
            return HELD, run
        if run.state not in (stages.QUEUED, stages.RUNNING):
            return GONE, run
        # A health run goes to a target whose last check failed (passing one is how it recovers), never to
        # one whose registration waits for approval: nothing runs on what the team has not approved.
        exempt = run.stage == stages.HEALTH and not run.target.registration_pending
        if not exempt and not target_accepts_runs(run.target, now, claiming=True):
            run_state_move(run, stages.PENDING)
            return GONE, run
        if run.attempt >= settings.ACCEPTANCE_RUN_MAX_ATTEMPTS:
            run_give_up(run, worker)
            return GONE, run
        run_state_move(run, stages.RUNNING, worker=worker)
        return CLAIMED, run


def run_claim_when_free(run_id: int, worker: str) -> Run | None:
    """Claim the run, waiting out a live lease once: a redelivered message after a worker died finds the dead
    attempt's lease still running for up to ACCEPTANCE_RUN_LEASE_SECONDS."""
    deadline = time.monotonic() + settings.ACCEPTANCE_RUN_LEASE_SECONDS + 2
    while True:
        status, run = run_claim(run_id, worker)
        if status == CLAIMED:
            return run
        if status == GONE or time.monotonic() > deadline:
            return None
        time.sleep(1)
