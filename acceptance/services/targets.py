"""Execution targets: the bundled simulator's, worker heartbeats, health, maintenance and the periodic health
job. Registering a target and changing its versions is `registration.py`.

A target receives runs only while it is out of maintenance, its last health check did not fail, and a worker
consuming its queue has reported within ACCEPTANCE_TARGET_OFFLINE_AFTER seconds. Runs for a
target that cannot take them wait as `pending` and are sent when it can again.

Boards are looked after as a lab does: a health check is due every N runner-stage runs and every H hours since
the last one (`target_health_check_due`), and is started at once after a run ended in an infrastructure error.
A failed check takes the target out of rotation, its reason shown, until one passes.
"""

import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from acceptance import stages
from acceptance.inputs import SCHEDULE_NOT_A_NUMBER
from acceptance.models import Run, Target
from acceptance.selectors import target_health_state
from acceptance.services.dispatch import run_send
from acceptance.services.runs.state import run_state_move
from calculet.actors import SYSTEM, Actor, Machine, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError
from npu_sim import device as npu_device
from vendor.access import may_approve_moves

SIMULATOR_SLUG = "simulator"
# Stored in English; pages and e-mails show it translated (the "target_name" labels, acceptance/apps.py).
SIMULATOR_NAME = "Bundled NPU simulator"


def target_snapshot(target: Target) -> dict:
    return {
        "slug": target.slug,
        "kind": target.kind,
        "queue": target.queue,
        "calrt_version": target.calrt_version,
        "driver_version": target.driver_version,
        "firmware_version": target.firmware_version,
        "chip": target.chip,
        "runner_command": target.runner_command,
        "runner_digest": target.runner_digest,
        "maintenance": target.maintenance,
        "health": target.health,
    }


def target_ensure_simulator() -> Target:
    """The bundled simulator's target, created on first use with the simulator's own versions."""
    target = Target.objects.filter(slug=SIMULATOR_SLUG).first()
    if target is not None:
        return target
    try:
        with transaction.atomic():
            target = Target.objects.create(
                slug=SIMULATOR_SLUG,
                name=SIMULATOR_NAME,
                kind=Target.SIMULATOR,
                queue=SIMULATOR_SLUG,
                calrt_version=npu_device.CALRT_VERSION,
                driver_version=npu_device.DRIVER_VERSION,
                firmware_version=npu_device.FIRMWARE_VERSION,
                chip="calculet-2c",
            )
            audit_record(actor=SYSTEM, action="target.register", obj=target, after=target_snapshot(target))
            return target
    except IntegrityError:
        return Target.objects.get(slug=SIMULATOR_SLUG)


def target_accepts_runs(target: Target, now: datetime.datetime | None = None, *, claiming: bool = False) -> bool:
    """Whether a chain run may be sent to the target now: it is out of maintenance, no agent registration of it
    waits for approval, its last health check did not fail, and a worker serving it has reported lately.
    `claiming`: whether a worker that took one of its runs may start it — that worker is the live one."""
    if target.maintenance or target.registration_pending or target.last_health_check_passed is False:
        return False
    if claiming:
        return True
    return target_health_state(target, now or timezone.now())[0] == Target.OK


def target_health_refresh(target: Target, now: datetime.datetime) -> bool:
    """Store the target's derived health; True when it changed."""
    health, reason = target_health_state(target, now)
    if (health, reason[:500]) == (target.health, target.health_reason):
        return False
    before = {"health": target.health, "health_reason": target.health_reason}
    target.health, target.health_reason = health, reason[:500]
    target.save(update_fields=["health", "health_reason"])
    if health != before["health"]:
        audit_record(
            actor=SYSTEM,
            action="target.health",
            obj=target,
            before=before,
            after={"health": health, "reason": reason},
        )
    return True


def target_heartbeat(*, queues: list[str], worker: str) -> list[Target]:
    """A worker consuming `queues` is alive: refresh the targets served by them, and send their pending runs."""
    now = timezone.now()
    touched = []
    with transaction.atomic():
        for target in lock_rows(Target.objects).filter(queue__in=queues).order_by("pk"):
            target.last_heartbeat_at = now
            target.last_heartbeat_worker = worker[:200]
            target.save(update_fields=["last_heartbeat_at", "last_heartbeat_worker"])
            target_health_refresh(target, now)
            touched.append(target)
        for target in touched:
            runs_dispatch_pending(target)
    return touched


def targets_refresh_health() -> None:
    """Mark targets whose workers fell silent offline (the sweeper calls this)."""
    now = timezone.now()
    with transaction.atomic():
        for target in lock_rows(Target.objects, skip_locked=True).order_by("pk"):
            target_health_refresh(target, now)


def runs_dispatch_pending(target: Target) -> int:
    """Send the target's pending runs if it accepts runs now; returns how many were sent."""
    if not target_accepts_runs(target):
        return 0
    sent = 0
    with transaction.atomic():
        for run in lock_rows(Run.objects, skip_locked=True).filter(target=target, state=stages.PENDING):
            run_state_move(run, stages.QUEUED)
            run_send(run, resend=True)
            sent += 1
    return sent


def _check_may_look_after(actor: Actor) -> None:
    """Maintenance and the health check schedule are the integration team's PMs' and operators' (as approving a
    registration is), or the product's and the server's shell's (a Machine)."""
    if not isinstance(actor, Machine) and not may_approve_moves(actor):
        raise ForbiddenError(
            gettext_noop(
                "Only a PM or an operator of the integration team looks after a target's maintenance and health checks."
            )
        )


def target_set_maintenance(*, actor: Actor, target: Target, maintenance: bool, reason: str = "") -> Target:
    """Take a target out of service, or bring it back: then a health check is queued and its pending runs are
    sent (a target whose last health check failed keeps them until one passes). ForbiddenError for anyone but
    a PM, an operator or a Machine."""
    _check_may_look_after(actor)
    with transaction.atomic():
        locked = lock_rows(Target.objects).get(pk=target.pk)
        if locked.maintenance == maintenance:
            return locked
        locked.maintenance = maintenance
        locked.save(update_fields=["maintenance"])
        audit_record(
            actor=actor,
            action="target.maintenance",
            obj=locked,
            before={"maintenance": not maintenance},
            after={"maintenance": maintenance, "reason": reason},
        )
        if not maintenance:
            target_health_check_start(locked, actor=actor)
            transaction.on_commit(lambda: runs_dispatch_pending(locked))
    return locked


def target_health_check_start(target: Target, *, actor: Actor = SYSTEM, why: str = "") -> Run | None:
    """Queue the target's health job (a known-good package through the runner protocol) unless one is
    already waiting or running; `why` (a sentence) is in its audit row. Health runs go even to a degraded
    target, and before any other run waiting for it: passing one is how it recovers."""
    with transaction.atomic():
        locked = lock_rows(Target.objects).get(pk=target.pk)
        if locked.maintenance:
            return None
        if Run.objects.filter(target=locked, stage=stages.HEALTH, state__in=stages.ACTIVE_STATES).exists():
            return None
        run = Run(
            stage=stages.HEALTH,
            target=locked,
            inputs_digest="",
            inputs={"target": locked.as_job_target()},
            requested_by=actor_user(actor),
            priority=stages.PRIORITY_HEALTH,
        )
        run_state_move(run, stages.QUEUED)
        audit_record(actor=actor, action="run.create", obj=run, after={"stage": stages.HEALTH, "why": why})
        run_send(run)
    return run


def target_health_check_due(target: Target, now: datetime.datetime) -> str | None:
    """Why the target's health check is due now (a sentence), or None: it was never checked, or its last check
    failed (it is out of rotation, and checked again at each look so that it comes back once the board is
    fixed), or `health_check_every_hours` have passed, or `health_check_every_runs` runner-stage runs have
    finished on it, since the last one (ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS / _RUNS when the target sets none)."""
    if target.last_health_check_at is None:
        return "the target has had no health check yet"
    if target.last_health_check_passed is False:
        return "the last health check failed: the target is out of rotation until one passes"
    every_hours = target.health_check_every_hours or settings.ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS
    hours = (now - target.last_health_check_at).total_seconds() / 3600
    if hours >= every_hours:
        return f"{int(hours)} h since the last health check (one every {every_hours} h)"
    every_runs = target.health_check_every_runs or settings.ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS
    runs = Run.objects.filter(
        target=target,
        stage__in=stages.RUNNER_STAGES,
        state__in=[stages.PASSED, stages.FAILED, stages.ERROR],
        finished_at__gt=target.last_health_check_at,
    ).count()
    if runs >= every_runs:
        return f"{runs} runs since the last health check (one every {every_runs} runs)"
    return None


def targets_health_check() -> list[Run]:
    """The periodic job: a health run on every target a worker serves, not in maintenance, whose check is due."""
    started = []
    now = timezone.now()
    for target in Target.objects.filter(maintenance=False).order_by("pk"):
        if target_health_state(target, now)[0] == Target.OFFLINE:
            continue
        why = target_health_check_due(target, now)
        run = target_health_check_start(target, why=why) if why else None
        if run is not None:
            started.append(run)
    return started


def target_after_run(target_id: int, *, errored_run: int | None = None) -> Run | None:
    """After a runner-stage run finished on the target (after its commit): its health check is started when
    the run ended in an infrastructure error (`errored_run`), or when the check is due. A target never checked
    is left to the periodic job, which starts its first check only once an agent or worker serves it."""
    target = Target.objects.get(pk=target_id)
    if errored_run is not None:
        why = f"run {errored_run} ended in an infrastructure error"
    elif target.last_health_check_at is None:
        return None
    else:
        why = target_health_check_due(target, timezone.now()) or ""
    return target_health_check_start(target, why=why) if why else None


def target_set_health_schedule(
    *, actor: Actor, target: Target, every_runs: int | None, every_hours: int | None
) -> Target:
    """Set how often the target's health check is due (None: the settings' defaults). Each is at least 1
    (DomainError naming the field otherwise, and nothing is written). ForbiddenError for anyone but a PM, an
    operator or a Machine. Audited."""
    _check_may_look_after(actor)
    for field, value in (("health_check_every_runs", every_runs), ("health_check_every_hours", every_hours)):
        if value is not None and value < 1:
            raise DomainError(SCHEDULE_NOT_A_NUMBER, field=field, params={"field": field})
    with transaction.atomic():
        locked = lock_rows(Target.objects).get(pk=target.pk)
        before = {"every_runs": locked.health_check_every_runs, "every_hours": locked.health_check_every_hours}
        after = {"every_runs": every_runs, "every_hours": every_hours}
        if before == after:
            return locked
        locked.health_check_every_runs, locked.health_check_every_hours = every_runs, every_hours
        locked.save(update_fields=["health_check_every_runs", "health_check_every_hours"])
        audit_record(actor=actor, action="target.health_schedule", obj=locked, before=before, after=after)
    return locked


def target_health_record(target: Target, run: Run) -> None:
    """Store a finished health run's verdict on its target. Runs inside the run's finishing transaction."""
    now = timezone.now()
    locked = lock_rows(Target.objects).get(pk=target.pk)
    before = {"last_health_check_passed": locked.last_health_check_passed}
    locked.last_health_check_at = now
    locked.last_health_check_passed = run.verdict == stages.PASS
    locked.last_health_run = run
    locked.last_health_check_reason = "" if locked.last_health_check_passed else run.reason[:400]
    locked.save(
        update_fields=[
            "last_health_check_at",
            "last_health_check_passed",
            "last_health_run",
            "last_health_check_reason",
        ]
    )
    if before["last_health_check_passed"] != locked.last_health_check_passed:
        audit_record(
            actor=SYSTEM,
            action="target.health_check",
            obj=locked,
            before=before,
            after={"last_health_check_passed": locked.last_health_check_passed, "run": run.pk, "reason": run.reason},
        )
    target_health_refresh(locked, now)
    if locked.last_health_check_passed:
        transaction.on_commit(lambda: runs_dispatch_pending(locked))
