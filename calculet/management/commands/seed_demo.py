from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from calculet.demo import CHAIN_WAIT_SECONDS, DemoError, demo_seed
from calculet.errors import DomainError


class Command(BaseCommand):
    help = "Build the demo story (idempotent) and print its logins and the vendor's API token."

    def add_arguments(self, parser):
        parser.add_argument(
            "--wait",
            type=float,
            default=CHAIN_WAIT_SECONDS,
            help="Seconds to wait for the demo's chains on the simulator target (default %(default)s).",
        )

    def handle(self, *args, **options):
        try:
            report = demo_seed(wait_seconds=options["wait"])
        except (DemoError, DomainError) as exc:
            raise CommandError(str(exc)) from exc
        for step in report.steps:
            self.stdout.write(f"  {step}")
        if report.still_running:
            self.stdout.write(
                "\nStill running, so the promotions that need their verdicts were not asked; run seed_demo "
                "again once they have finished:"
            )
            for line in report.still_running:
                self.stdout.write(f"  {line}")
        base_url = settings.CALCULET_BASE_URL.rstrip("/")
        self.stdout.write(
            f"\nDemo ready at {base_url}/\n"
            f"  PM login:      {report.pm_username} / {report.password}\n"
            f"  vendor login:  {report.vendor_username} / {report.password} (read-only pages)\n"
            f"  vendor token:  {report.vendor_token}\n"
            f"  try:           curl -H 'Authorization: Token {report.vendor_token}' "
            f"{base_url}/api/v1/questions/\n"
        )
