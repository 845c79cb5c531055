from django.core.management.base import BaseCommand, CommandError

from calculet.audit import audit_verify
from calculet.models import AuditEntry


class Command(BaseCommand):
    help = "Check the audit log's hash chain; exit non-zero when a row was edited or removed."

    def handle(self, *args, **options):
        problems = audit_verify()
        for problem in problems:
            self.stderr.write(problem)
        if problems:
            raise CommandError(f"audit chain broken: {len(problems)} problem(s)")
        self.stdout.write(f"audit chain intact: {AuditEntry.objects.count()} entries")
