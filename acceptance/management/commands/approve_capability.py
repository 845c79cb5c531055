from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from acceptance.inputs import approval_request
from acceptance.services.approvals import capability_approve
from calculet.errors import DomainError
from evidence.models import Capability


class Command(BaseCommand):
    help = (
        "Approve, as a member of the integration team, moving a capability whose moves need two approvals to a "
        "status, on the evidence the move rests on now; exits non-zero naming what refused it."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("status", help="C0, C1, C2, C3 or C4: the move approved")
        parser.add_argument("--user", required=True, help="the approving PM or operator: each approves as themselves")
        parser.add_argument("--note", default="", help="what the approver checked")

    def handle(self, *args, slug, status, user, note, **options):
        capability = Capability.objects.filter(slug=slug).first()
        if capability is None:
            raise CommandError(f"No capability {slug!r}.")
        actor = get_user_model().objects.filter(username=user).first()
        if actor is None:
            raise CommandError(f"No user {user!r}.")
        try:
            approval = capability_approve(actor=actor, capability=capability, request=approval_request(status, note))
        except DomainError as error:
            for item in error.reasons:
                self.stderr.write(f"{item['code']}: {item['message']}")
            raise CommandError(f"{error.field or 'error'}: {error.message}") from error
        runs = ", ".join(str(run.pk) for run in approval.runs.order_by("pk")) or "none"
        self.stdout.write(
            f"{slug}: {approval.from_status} -> {approval.to_status} approved by {user} "
            f"(approval {approval.pk}; answer {approval.answer_id or 'none'}, runs {runs})"
        )
