from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evidence.seed.importer import DEFAULT_PATH, ChecklistImportError, checklist_import
from evidence.seed.parser import ChecklistParseError


class Command(BaseCommand):
    help = "Import the checklist document (default: the bundled one); running it again changes nothing."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", default=str(DEFAULT_PATH), help="the checklist Markdown file")

    def handle(self, *args, **options):
        path = Path(options["path"])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {path}: {error}") from error
        try:
            report = checklist_import(text)
        except ChecklistParseError as error:
            raise CommandError(f"{path} was not imported, nothing changed:\n{error}") from error
        except ChecklistImportError as error:
            raise CommandError(f"{path} was not imported, nothing changed: {error}") from error
        for line in report.lines():
            self.stdout.write(line)
        if report.has_changes:
            self.stdout.write(
                f"imported {path}: {len(report.added)} added, {len(report.changed)} changed, "
                f"{len(report.removed)} removed"
            )
        else:
            self.stdout.write(f"{path}: already up to date, nothing changed")
