import argparse

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from acceptance.inputs import SCHEDULE_NOT_A_NUMBER, schedule_number
from acceptance.models import Target
from acceptance.services import target_set_health_schedule
from calculet.actors import Actor, command
from calculet.errors import DomainError

ACTOR = command("target_health_schedule")


def schedule_argument(field: str):
    """The argparse type of one schedule option: empty or a whole number; the refusal names the target's field."""

    def parse(text: str) -> int | None:
        try:
            return schedule_number(text)
        except ValueError:
            raise argparse.ArgumentTypeError(SCHEDULE_NOT_A_NUMBER % {"field": field}) from None

    return parse


class Command(BaseCommand):
    help = (
        "Set how often a target's health check is due: every N runner-stage runs and every H hours since the last "
        "one (an empty value: the settings' default). Prints the schedule in force."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument(
            "--every-runs",
            type=schedule_argument("health_check_every_runs"),
            default="",
            help="runs between checks; empty for the default",
        )
        parser.add_argument(
            "--every-hours",
            type=schedule_argument("health_check_every_hours"),
            default="",
            help="hours between checks; empty for the default",
        )
        parser.add_argument(
            "--user", default="", help="the PM or operator it is set as; without it, as this command (the shell's)"
        )

    def handle(self, *args, slug, every_runs, every_hours, user, **options):
        target = Target.objects.filter(slug=slug).first()
        if target is None:
            raise CommandError(f"no target {slug}")
        actor: Actor = ACTOR
        if user:
            actor = get_user_model().objects.filter(username=user).first()
            if actor is None:
                raise CommandError(f"no user {user!r}")
        try:
            target = target_set_health_schedule(
                actor=actor,
                target=target,
                every_runs=every_runs,
                every_hours=every_hours,
            )
        except DomainError as error:
            raise CommandError(f"{error.field or 'error'}: {error.english}") from error
        runs = target.health_check_every_runs or settings.ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS
        hours = target.health_check_every_hours or settings.ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS
        self.stdout.write(f"{slug}: a health check every {runs} runs or {hours} h")
