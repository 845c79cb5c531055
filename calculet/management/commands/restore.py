from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from calculet.backup import BackupError, backup_restore, row_counts


class Command(BaseCommand):
    help = "Replace the database and the artifact store with a backup, then re-verify every artifact digest."

    def add_arguments(self, parser):
        parser.add_argument("backup_dir", type=Path)
        parser.add_argument("--yes", action="store_true", help="confirm that current data will be replaced")

    def handle(self, *args, backup_dir, yes, **options):
        if not yes:
            raise CommandError("restore replaces the current database and artifacts: pass --yes to confirm")
        try:
            problems = backup_restore(backup_dir)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        for problem in problems:
            self.stderr.write(problem)
        if problems:
            raise CommandError(
                f"restored, but {len(problems)} check(s) failed: rows against the backup's counts, artifact digests"
            )
        counts = ", ".join(f"{label} {count}" for label, count in row_counts().items())
        self.stdout.write(f"restored from {backup_dir}, row counts and every artifact digest verified: {counts}")
