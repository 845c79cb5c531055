from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from acceptance.selectors import runs_stuck, targets_unhealthy
from acceptance.services.sweeper import SWEEPER
from calculet.jobs import job_last_finished, job_staleness


class Command(BaseCommand):
    help = (
        "List stuck runs, unhealthy targets and a sweeper that stopped; exit non-zero when there are any "
        "(for monitoring)."
    )

    def handle(self, *args, **options):
        now = timezone.now()
        stuck = list(runs_stuck(now))
        unhealthy = targets_unhealthy(now)
        sweeper = job_staleness(SWEEPER, stale_after=settings.ACCEPTANCE_SWEEP_STALE_AFTER, now=now)
        for run in stuck:
            question = run.chain.question.code if run.chain else "health check"
            if run.state == "running":
                state = f"running, its lease expired at {run.lease_expires_at:%Y-%m-%d %H:%M:%S}"
            else:
                state = f"{run.state} since {run.sent_at:%Y-%m-%d %H:%M:%S}"
            self.stdout.write(
                f"stuck run {run.pk}: {question} {run.stage} on {run.target.slug}, {state}, attempt {run.attempt}"
            )
        for target, health, reason in unhealthy:
            state = "maintenance" if target.maintenance else health
            heartbeat = f"{target.last_heartbeat_at:%Y-%m-%d %H:%M:%S}" if target.last_heartbeat_at else "never"
            self.stdout.write(
                f"target {target.slug} ({target.kind}, queue {target.queue}): {state}; last heartbeat {heartbeat}"
                + (f"; {reason}" if reason else "")
            )
        if sweeper is not None:
            self.stdout.write(f"sweeper: {sweeper}; is beat running?")
        if stuck or unhealthy or sweeper:
            raise CommandError(
                f"{len(stuck)} stuck run(s), {len(unhealthy)} unhealthy target(s)"
                + (", the sweeper stopped" if sweeper else "")
            )
        last_sweep = job_last_finished(SWEEPER)
        self.stdout.write(
            "no stuck runs; every target healthy; the sweeper runs "
            f"(last finished {(now - last_sweep).total_seconds():.0f} s ago, at {last_sweep:%Y-%m-%d %H:%M:%S} UTC)"
        )
