from django.core.management.base import BaseCommand

from acceptance.services import runs_sweep


class Command(BaseCommand):
    help = "Re-send runs whose worker or message was lost (what Celery beat runs every ACCEPTANCE_SWEEP_INTERVAL)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--resend-after",
            type=int,
            default=None,
            help="re-send queued runs sent this many seconds ago or more (default ACCEPTANCE_QUEUED_RESEND_AFTER)",
        )

    def handle(self, *args, resend_after, **options):
        report = runs_sweep(queued_resend_after=resend_after)
        self.stdout.write(
            f"requeued {report.requeued} (lease expired), gave up on {report.gave_up}, "
            f"re-sent {report.resent} (message lost), dispatched {report.dispatched} (target back), "
            f"timed out {report.timed_out} (waited too long for their target), "
            f"removed {report.removed_dirs} left-over run directories, "
            f"demoted {report.demoted} capabilities (proof cannot run again)"
        )
