from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from acceptance.models import Target
from acceptance.services import target_registration_approve
from calculet.errors import DomainError


class Command(BaseCommand):
    help = (
        'Show or approve what a target\'s calculet-agent registered (docs/deploy.md, "What the host says"): '
        "until a PM or operator approves it the target is out of rotation."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        show = actions.add_parser("show", help="what waits for approval")
        show.add_argument("slug")
        approve = actions.add_parser("approve", help="approve it: the values become the target's")
        approve.add_argument("slug")
        approve.add_argument("--user", required=True, help="the approving PM or operator")

    def handle(self, *args, action, slug, **options):
        target = Target.objects.filter(slug=slug).first()
        if target is None:
            raise CommandError(f"no target {slug}")
        if action == "show":
            pending = target.registration_pending
            self.stdout.write(pending["reason"] if pending else f"{slug}: no registration waits for approval")
            return
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        try:
            target_registration_approve(actor=user, target=target)
        except DomainError as error:
            raise CommandError(f"{error.field or 'error'}: {error.message}") from error
        self.stdout.write(f"{slug}: registration approved by {user.get_username()}; back in rotation")
