from django.core.management.base import BaseCommand, CommandError

from calculet.demo import DemoError, demo_seed


class Command(BaseCommand):
    help = "Build the demo story (idempotent) and print its logins and the vendor's API token."

    def handle(self, *args, **options):
        try:
            report = demo_seed()
        except DemoError as exc:
            raise CommandError(str(exc)) from exc
        for step in report.steps:
            self.stdout.write(f"  {step}")
        self.stdout.write(
            "\nDemo ready at http://127.0.0.1:8000/\n"
            f"  PM login:      {report.pm_username} / {report.password}\n"
            f"  vendor login:  {report.vendor_username} / {report.password} (read-only pages)\n"
            f"  vendor token:  {report.vendor_token}\n"
            f"  try:           curl -H 'Authorization: Token {report.vendor_token}' "
            "http://127.0.0.1:8000/api/v1/questions/\n"
        )
