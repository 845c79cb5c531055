import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from acceptance.inputs import target_token_name
from acceptance.models import Target, TargetToken
from acceptance.services.agents import target_token_create, target_token_revoke
from acceptance.services.targets import SIMULATOR_SLUG, target_ensure_simulator
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
        create.add_argument("--replace", action="store_true", help="revoke the target's live tokens of this name first")
        create.add_argument("--key-file", help="write the key to this file (mode 0600) instead of printing it")
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
        # The bundled simulator's target is made on first use, as everywhere else.
        if options["slug"] == SIMULATOR_SLUG:
            target = target_ensure_simulator()
        else:
            target = Target.objects.filter(slug=options["slug"]).first()
        if target is None:
            raise CommandError(f"no target {options['slug']}")
        if action == "list":
            for token in target.tokens.order_by("pk"):
                state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "live"
                self.stdout.write(f"{token.pk}\t{token.prefix}…\t{token.name}\t{state}")
            return
        try:
            name = target_token_name(options["name"])
            with transaction.atomic():
                if options["replace"]:
                    for old in target.tokens.filter(name=name, revoked_at__isnull=True):
                        target_token_revoke(actor=ACTOR, token=old)
                        self.stdout.write(f"token {old.pk} of {target.slug} revoked")
                token, key = target_token_create(actor=ACTOR, target=target, name=name)
        except DomainError as error:
            raise CommandError(f"{error.field}: {error.message}") from error
        if options["key_file"]:
            path = Path(options["key_file"])
            path.parent.mkdir(parents=True, exist_ok=True)
            # Made unreadable to others before the key is in it.
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(key + "\n")
            self.stdout.write(f"token {token.pk} for {target.slug}; its key is in {path}")
            return
        self.stdout.write(f"token {token.pk} for {target.slug}; its key, shown only now:")
        self.stdout.write(key)
