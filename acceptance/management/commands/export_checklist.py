from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import translation

from acceptance.selectors import checklist_download
from evidence.exporter import EXPORT_FORMATS


class Command(BaseCommand):
    # Here, not in evidence: the chains' progress and what the runs prove are acceptance's, which evidence
    # cannot import (the apps are layered acceptance over evidence over vendor).
    help = "Write the checklist with live states and statuses as JSON, Markdown or CSV."

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=sorted(EXPORT_FORMATS), default="json")
        parser.add_argument("--out", help="write to this file instead of standard output")
        parser.add_argument(
            "--language",
            choices=[code for code, _name in settings.LANGUAGES],
            default=settings.LANGUAGE_CODE,
            help="the language of the Markdown's headings and states (default: %(default)s)",
        )

    def handle(self, *args, **options):
        with translation.override(options["language"]):
            text = checklist_download(options["format"])
        if not options["out"]:
            self.stdout.write(text, ending="")
            return
        try:
            Path(options["out"]).write_text(text, encoding="utf-8")
        except OSError as error:
            raise CommandError(f"cannot write {options['out']}: {error}") from error
        self.stderr.write(f"wrote {options['out']}")
