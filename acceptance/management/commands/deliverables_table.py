from django.core.management.base import BaseCommand

from acceptance import deliverables_doc


class Command(BaseCommand):
    help = (
        "Print docs/acceptance.md's table of every question's deliverables as the data gives it "
        "(what accepts each and what a wrong delivery gets); --write puts it into the document."
    )

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help="rewrite the table in docs/acceptance.md")

    def handle(self, *args, write, **options):
        if not write:
            self.stdout.write(deliverables_doc.table())
            return
        path = deliverables_doc.DOC
        path.write_text(deliverables_doc.rewritten(path.read_text(encoding="utf-8")), encoding="utf-8")
        self.stdout.write(f"wrote the deliverables table into {path}")
