"""The sweeper: PostgreSQL is the source of truth for runs, so whatever the broker or a worker lost is found
here and sent again. Celery beat runs it every ACCEPTANCE_SWEEP_INTERVAL seconds; `manage.py sweep_runs`
runs it by hand."""

import logging
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from acceptance import stages
from acceptance.models import Run, Target
from acceptance.selectors import target_health_state
from acceptance.services.dispatch import queue_length, run_send
from acceptance.services.locking import run_lock
from acceptance.services.promotion import capabilities_reverify_unrunnable
from acceptance.services.runs.finishing import run_give_up, run_time_out
from acceptance.services.runs.running import run_dir_prefix
from acceptance.services.runs.state import run_state_move
from acceptance.services.targets import runs_dispatch_pending, target_accepts_runs, targets_refresh_health
from calculet.db import lock_rows
from calculet.jobs import job_finished

SWEEPER = "sweeper"

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    requeued: int = 0
    gave_up: int = 0
    resent: int = 0
    dispatched: int = 0
    removed_dirs: int = 0
    demoted: int = 0
    timed_out: int = 0


def run_dirs_sweep() -> int:
    """Remove the working directories that attempts which lost their worker left under this host's
    ACCEPTANCE_RUN_DIR (a killed worker cannot remove its own); returns how many. Only this database's runs'
    directories are looked at (`run_dir_prefix`): another setup may share the folder.

    A directory exists only while its attempt holds the run, and the run is `running` from its claim, which
    commits before the directory is made. So the directories are listed first and the runs read second:
    a run found `running` keeps all of its directories (one may be a lost attempt's, removed once the run
    moves on); any other run's are left over.
    """
    found: dict[int, list[Path]] = {}
    prefix = run_dir_prefix()
    for path in Path(settings.ACCEPTANCE_RUN_DIR).glob(f"{prefix}*-*"):
        run_number = path.name.removeprefix(prefix).split("-", 1)[0]
        if run_number.isdigit() and path.is_dir() and not path.is_symlink():
            found.setdefault(int(run_number), []).append(path)
    running = set(Run.objects.filter(pk__in=found, state=stages.RUNNING).values_list("pk", flat=True))
    removed = 0
    for run_id, paths in found.items():
        if run_id in running:
            continue
        for path in paths:
            try:
                shutil.rmtree(path)
            except OSError:  # a runner running as the worker's own user may have locked itself a directory
                logger.exception("could not remove the left-over run directory %s", path)
                continue
            removed += 1
    return removed


def target_unable_reason(target: Target, now: datetime) -> str | None:
    """Why the target cannot take runs now (a sentence), or None when it can."""
    if target.maintenance:
        return "it is in maintenance"
    if target_accepts_runs(target, now):
        return None
    return target_health_state(target, now)[1]


def runs_time_out_waiting(now: datetime) -> int:
    """End in error the chain runs that have waited (queued or pending, `waiting_since`) longer than
    ACCEPTANCE_RUN_QUEUE_TIMEOUT for a target that cannot take them now; returns how many. A health run is left
    waiting: it is the first thing the target does when it can again."""
    cutoff = now - timedelta(seconds=settings.ACCEPTANCE_RUN_QUEUE_TIMEOUT)
    waiting = Run.objects.filter(chain__isnull=False, state__in=stages.WAITING_STATES).filter(
        Q(waiting_since__lt=cutoff) | Q(waiting_since__isnull=True, created_at__lt=cutoff)
    )
    ended = 0
    for target in Target.objects.filter(pk__in=waiting.values("target_id")).order_by("pk"):
        why = target_unable_reason(target, now)
        if why is None:
            continue
        for run_id in waiting.filter(target=target).order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                run = run_lock(run_id, skip_locked=True)
                if run is None or run.state not in stages.WAITING_STATES:
                    continue
                waited = now - (run.waiting_since or run.created_at)
                if now - waited >= cutoff:
                    continue  # taken and sent back to wait afresh since it was listed
                run_time_out(
                    run,
                    f"the run waited {int(waited.total_seconds() // 60)} min for {target.slug}, which cannot take "
                    f"runs: {why}; it was not run",
                )
                ended += 1
    return ended


def runs_sweep(*, queued_resend_after: int | None = None) -> SweepReport:
    """One sweep.

    - A `running` run whose lease expired lost its worker: it goes back to `queued` and is sent again, or,
      after ACCEPTANCE_RUN_MAX_ATTEMPTS attempts, ends as an infrastructure error (a poison run is not looped).
    - `queued` runs sent more than `queued_resend_after` seconds ago (ACCEPTANCE_QUEUED_RESEND_AFTER) are sent
      again when their target accepts runs and its queue is empty: their message was lost (a broker restart or
      flush). A duplicate message is harmless: the claim lets one attempt through.
    - `pending` runs go to targets that accept runs again.
    - Chain runs that waited longer than ACCEPTANCE_RUN_QUEUE_TIMEOUT for a target that cannot take them end in
      error saying why (`runs_time_out_waiting`).
    - Working directories left on this host by lost attempts are removed (`run_dirs_sweep`).
    - A capability whose proof waits to run again on a target that takes no runs is re-verified on the
      evidence there is, and demoted when that has lapsed (`capabilities_reverify_unrunnable`).
    - Its end is recorded (`job_finished`): `/readyz` and `ops_status` fail once the last sweep is older than
      ACCEPTANCE_SWEEP_STALE_AFTER, which is how a stopped beat shows.
    """
    report = SweepReport()
    targets_refresh_health()
    now = timezone.now()
    expired = Run.objects.filter(state=stages.RUNNING, lease_expires_at__lt=now).order_by("pk")
    for run_id in expired.values_list("pk", flat=True):
        with transaction.atomic():  # one run at a time, each locked in the lock order
            run = run_lock(run_id, skip_locked=True)
            if run is None or run.state != stages.RUNNING or not run.lease_expires_at or run.lease_expires_at >= now:
                continue
            if run.attempt >= settings.ACCEPTANCE_RUN_MAX_ATTEMPTS:
                run_give_up(run, SWEEPER)
                report.gave_up += 1
                continue
            run_state_move(run, stages.QUEUED)
            run_send(run, resend=True, lost_worker=True)
            report.requeued += 1
    resend_after = settings.ACCEPTANCE_QUEUED_RESEND_AFTER if queued_resend_after is None else queued_resend_after
    cutoff = now - timedelta(seconds=resend_after)
    waiting = Target.objects.filter(runs__state=stages.QUEUED, runs__sent_at__lte=cutoff).distinct()
    for target in waiting:
        if not target_accepts_runs(target, now) or queue_length(target.queue) > 0:
            continue
        with transaction.atomic():
            runs = lock_rows(Run.objects, skip_locked=True).filter(
                target=target, state=stages.QUEUED, sent_at__lte=cutoff
            )
            for run in runs.select_related("target"):
                run.sent_at = now
                run.send_count += 1
                run.save(update_fields=["sent_at", "send_count"])
                run_send(run, resend=True)
                report.resent += 1
    for target in Target.objects.filter(runs__state=stages.PENDING).distinct():
        report.dispatched += runs_dispatch_pending(target)
    report.timed_out = runs_time_out_waiting(now)
    report.removed_dirs = run_dirs_sweep()
    report.demoted = len(capabilities_reverify_unrunnable())
    job_finished(SWEEPER)
    return report
