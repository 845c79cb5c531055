from django.core.management.base import BaseCommand, CommandError

from acceptance.inputs import target_token_name
from acceptance.models import Target, TargetToken
from acceptance.services.agents import target_token_create, target_token_revoke
from calculet.actors import command
from calculet.errors import DomainError

ACTOR = command("target_token")


class Command(BaseCommand):
    help = (
        "Make, list or revoke the tokens a target's calculet-agent holds (docs/deploy.md). A new token's key is "
        "printed once; only its hash is kept."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="a new token for the target; prints its key")
        create.add_argument("slug")
        create.add_argument("--name", required=True, help="what the token is for (the board's host)")
        listing = actions.add_parser("list", help="the target's tokens")
        listing.add_argument("slug")
        revoke = actions.add_parser("revoke", help="revoke a token by its id")
        revoke.add_argument("token_id", type=int)

    def handle(self, *args, action, **options):
        if action == "revoke":
            token = TargetToken.objects.filter(pk=options["token_id"]).first()
            if token is None:
                raise CommandError(f"no target token {options['token_id']}")
            token = target_token_revoke(actor=ACTOR, token=token)
            self.stdout.write(f"token {token.pk} of {token.target.slug} revoked at {token.revoked_at:%Y-%m-%d %H:%M}")
            return
        target = Target.objects.filter(slug=options["slug"]).first()
        if target is None:
            raise CommandError(f"no target {options['slug']}")
        if action == "list":
            for token in target.tokens.order_by("pk"):
                state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "live"
                self.stdout.write(f"{token.pk}\t{token.prefix}…\t{token.name}\t{state}")
            return
        try:
            token, key = target_token_create(actor=ACTOR, target=target, name=target_token_name(options["name"]))
        except DomainError as error:
            raise CommandError(f"{error.field}: {error.message}") from error
        self.stdout.write(f"token {token.pk} for {target.slug}; its key, shown only now:")
        self.stdout.write(key)
