from django.core.management.base import BaseCommand

from acceptance import proof_matrix


class Command(BaseCommand):
    help = (
        "Run every probed capability's package and its five wrong ones (stock, declared but not computed, "
        "corrupted weights, relabelled, wrong golden) through the chain's stages on the simulator and print the "
        "matrix; --write puts it into docs/acceptance.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help="rewrite the matrix in docs/acceptance.md")

    def handle(self, *args, write, **options):
        generated = proof_matrix.table(proof_matrix.matrix())
        if not write:
            self.stdout.write(generated)
            return
        path = proof_matrix.DOC
        path.write_text(proof_matrix.rewritten(path.read_text(encoding="utf-8"), generated), encoding="utf-8")
        self.stdout.write(f"wrote the proof matrix into {path}")
