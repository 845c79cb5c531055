import datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from calculet.errors import DomainError
from vendor.inputs import member_draft
from vendor.models import Membership
from vendor.services.organisations import api_user_create


class Command(BaseCommand):
    help = "Create a user with a role in an organisation and print an API token (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--org", required=True, help="organisation slug")
        parser.add_argument("--role", required=True, choices=[code for code, _ in Membership.ROLES])
        parser.add_argument("--create-org", action="store_true", help="create the organisation if it is missing")
        parser.add_argument("--org-name", default="", help="name of an organisation created with --create-org")
        parser.add_argument("--days", type=int, default=90, help="days until the token expires (at most 366)")

    def handle(self, *args, username, org, role, create_org, org_name, days, **options):
        try:
            _, key = api_user_create(
                member_draft(username, org, role, create_org, org_name=org_name),
                token_name="create_api_user",
                expires_at=timezone.now() + datetime.timedelta(days=days),
            )
        except DomainError as error:
            raise CommandError(f"{error.field}: {error.message}" if error.field else error.message) from error
        self.stdout.write(key)
