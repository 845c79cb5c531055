from django.core.management.base import BaseCommand

from acceptance.models import Chain
from acceptance.services import chain_start_for_answer


class Command(BaseCommand):
    help = (
        "Start the current answer of every chain on every target, e.g. after a hardware target joined. "
        "Idempotent: stages already passed on the same inputs are not run again."
    )

    def handle(self, *args, **options):
        answer_ids = sorted(set(Chain.objects.values_list("answer_id", flat=True)))
        for answer_id in answer_ids:
            chain_start_for_answer(answer_id)
        self.stdout.write(f"{len(answer_ids)} answer(s) started on every target")
