import os
import shlex
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from acceptance.models import Target
from acceptance.services import target_ensure_simulator, target_register
from calculet.actors import command
from calculet.errors import DomainError


class Command(BaseCommand):
    help = (
        "Join this host to calculet as the worker of one target: register the target (or update its versions) "
        "and become a Celery worker consuming its queue, one run at a time."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug", help="the target's slug; 'simulator' serves the bundled simulator")
        parser.add_argument(
            "--kind", choices=[Target.SIMULATOR, Target.HARDWARE], help="for a new target (default hardware)"
        )
        parser.add_argument("--name", default="")
        parser.add_argument("--calrt", default="")
        parser.add_argument("--driver", default="")
        parser.add_argument("--firmware", default="")
        parser.add_argument("--chip", default="")
        parser.add_argument(
            "--runner-command",
            default="",
            help="hardware: the command of the board's runner (default ACCEPTANCE_RUNNER_COMMAND); a hardware "
            "target refuses to start without one",
        )
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument("--dry-run", action="store_true", help="register and print the worker command only")

    def handle(
        self, *args, slug, kind, name, calrt, driver, firmware, chip, runner_command, concurrency, dry_run, **options
    ):
        if slug == "simulator" and not (calrt or driver or firmware or chip):
            target = target_ensure_simulator()
        else:
            existing = Target.objects.filter(slug=slug).first()
            kind = kind or (existing.kind if existing else Target.HARDWARE)
            if kind == Target.HARDWARE:
                runner_command = runner_command or settings.ACCEPTANCE_RUNNER_COMMAND
            try:
                target = target_register(
                    actor=command("serve_target"),
                    slug=slug,
                    kind=kind,
                    name=name,
                    runner_command=runner_command,
                    calrt_version=calrt or (existing.calrt_version if existing else ""),
                    driver_version=driver or (existing.driver_version if existing else ""),
                    firmware_version=firmware or (existing.firmware_version if existing else ""),
                    chip=chip or (existing.chip if existing else ""),
                )
            except DomainError as error:
                raise CommandError(f"{error.field}: {error.message}") from error
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "calculet",
            "worker",
            "--queues",
            target.queue,
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--prefetch-multiplier",
            "1",
            "--hostname",
            f"{target.slug}@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "info",
        ]
        self.stdout.write(f"target {target.slug} ({target.kind}) on queue {target.queue}: {shlex.join(argv)}")
        if dry_run:
            return
        self.stdout.flush()
        os.execv(sys.executable, argv)
