from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from acceptance.selectors import runs_stuck, targets_unhealthy


class Command(BaseCommand):
    help = "List stuck runs and unhealthy targets; exit non-zero when there are any (for monitoring)."

    def handle(self, *args, **options):
        now = timezone.now()
        stuck = list(runs_stuck(now))
        unhealthy = targets_unhealthy(now)
        for run in stuck:
            question = run.chain.question.code if run.chain else "health check"
            since = run.lease_expires_at if run.state == "running" else run.sent_at
            self.stdout.write(
                f"stuck run {run.pk}: {question} {run.stage} on {run.target.slug}, {run.state} since "
                f"{since:%Y-%m-%d %H:%M:%S}, attempt {run.attempt}"
            )
        for target, health, reason in unhealthy:
            state = "maintenance" if target.maintenance else health
            heartbeat = f"{target.last_heartbeat_at:%Y-%m-%d %H:%M:%S}" if target.last_heartbeat_at else "never"
            self.stdout.write(
                f"target {target.slug} ({target.kind}, queue {target.queue}): {state}; last heartbeat {heartbeat}"
                + (f"; {reason}" if reason else "")
            )
        if stuck or unhealthy:
            raise CommandError(f"{len(stuck)} stuck run(s), {len(unhealthy)} unhealthy target(s)")
        self.stdout.write("no stuck runs; every target healthy")
