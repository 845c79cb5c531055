from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from acceptance.inputs import promotion_request
from acceptance.services import capability_promote
from calculet.actors import Actor, command
from calculet.errors import DomainError
from evidence.models import Capability


class Command(BaseCommand):
    help = "Ask the promotion gate to move a capability to a status; exits non-zero with the reasons when blocked."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("status", help="C0, C1, C2, C3 or C4")
        parser.add_argument("--reason", default="", help="why (required for a demotion)")
        parser.add_argument(
            "--user",
            default="",
            help="act as this user (a PM); default: the shell, as 'manage.py promote_capability'",
        )

    def handle(self, *args, slug, status, reason, user, **options):
        capability = Capability.objects.filter(slug=slug).first()
        if capability is None:
            raise CommandError(f"No capability {slug!r}.")
        actor: Actor = command("promote_capability")
        if user:
            person = get_user_model().objects.filter(username=user).first()
            if person is None:
                raise CommandError(f"No user {user!r}.")
            actor = person
        try:
            attempt = capability_promote(actor=actor, capability=capability, request=promotion_request(status, reason))
        except DomainError as error:
            raise CommandError(f"{error.field or 'error'}: {error.message}") from error
        if not attempt.allowed:
            for item in attempt.reasons:
                self.stderr.write(f"{item['code']}: {item['message']}")
            raise CommandError(
                f"blocked: {slug} stays {attempt.from_status} (attempt {attempt.pk}, policy {attempt.policy_version})"
            )
        self.stdout.write(f"{slug}: {attempt.from_status} -> {attempt.to_status} (attempt {attempt.pk})")
