from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from calculet.backup import BackupError, backup_create


class Command(BaseCommand):
    help = "Back up the database and the artifact store together into a new directory."

    def add_arguments(self, parser):
        parser.add_argument("out_dir", type=Path)

    def handle(self, *args, out_dir, **options):
        try:
            manifest = backup_create(out_dir)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{label} {count}" for label, count in manifest["counts"].items())
        self.stdout.write(f"backup written to {out_dir}: {counts}")
