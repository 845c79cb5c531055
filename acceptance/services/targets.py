"""Execution targets: registration, worker heartbeats, health, maintenance and the periodic health job.

A target receives runs only while it is out of maintenance, its last health check did not fail, and a worker
consuming its queue has reported within ACCEPTANCE_TARGET_OFFLINE_AFTER seconds. Runs for a
target that cannot take them wait as `pending` and are sent when it can again.
"""

import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from acceptance import stages
from acceptance.models import Run, Target
from acceptance.selectors import target_health_state
from acceptance.services.runs.state import run_state_move
from calculet.actors import SYSTEM, Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError
from npu_sim import device as npu_device

SIMULATOR_SLUG = "simulator"
# Stored in English; pages and e-mails show it translated (the "target_name" labels, acceptance/apps.py).
SIMULATOR_NAME = "Bundled NPU simulator"
VERSION_FIELDS = ["calrt_version", "driver_version", "firmware_version", "chip"]


def _snapshot(target: Target) -> dict:
    return {
        "slug": target.slug,
        "kind": target.kind,
        "queue": target.queue,
        "calrt_version": target.calrt_version,
        "driver_version": target.driver_version,
        "firmware_version": target.firmware_version,
        "chip": target.chip,
        "runner_command": target.runner_command,
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
            audit_record(actor=SYSTEM, action="target.register", obj=target, after=_snapshot(target))
            return target
    except IntegrityError:
        return Target.objects.get(slug=SIMULATOR_SLUG)


def target_register(
    *,
    actor: Actor,
    slug: str,
    kind: str,
    calrt_version: str,
    driver_version: str,
    firmware_version: str,
    chip: str,
    name: str = "",
    queue: str = "",
    runner_command: str = "",
) -> Target:
    """Create a target, or update the versions of an existing one (its kind and queue never change).

    Preconditions: `slug` is a slug other than "default"; `kind` is simulator or hardware; every version
    is given; a hardware target has a runner command, given now or registered before (a hardware target never
    falls back to the bundled simulator); a simulator target has none. Changed versions make the artifact
    stage and everything after it stale on this target's chains (compatibility is checked against them), and
    those chains move on.
    """
    from acceptance.services.chains import chains_lock_for_target, chains_refresh

    if not slug or slugify(slug) != slug or slug == "default":
        raise DomainError("A target slug is lower-case letters, digits and dashes, and not 'default'.", field="slug")
    if kind not in (Target.SIMULATOR, Target.HARDWARE):
        raise DomainError("A target's kind is simulator or hardware.", field="kind")
    versions = {
        "calrt_version": calrt_version,
        "driver_version": driver_version,
        "firmware_version": firmware_version,
        "chip": chip,
    }
    for field, value in versions.items():
        if not str(value or "").strip():
            raise DomainError(f"Give the target's {field.replace('_', ' ')}.", field=field)
    runner_command = (runner_command or "").strip()
    if kind == Target.SIMULATOR and runner_command:
        raise DomainError(
            "A simulator target runs the bundled simulator; only a hardware target has a runner command.",
            field="runner_command",
        )
    with transaction.atomic():
        target = lock_rows(Target.objects).filter(slug=slug).first()
        if kind == Target.HARDWARE and not (runner_command or (target is not None and target.runner_command)):
            raise DomainError(
                "A hardware target needs the command of its hardware runner: without one it cannot run anything, "
                "and it never falls back to the bundled simulator.",
                field="runner_command",
            )
        if target is None:
            target = Target.objects.create(
                slug=slug,
                name=name or slug,
                kind=kind,
                queue=queue or slug,
                runner_command=runner_command,
                **{k: v.strip() for k, v in versions.items()},
            )
            audit_record(actor=actor, action="target.register", obj=target, after=_snapshot(target))
            return target
        if target.kind != kind:
            raise DomainError(f"Target {slug} is a {target.kind} target; its kind does not change.", field="kind")
        before = _snapshot(target)
        changed = [field for field, value in versions.items() if getattr(target, field) != value.strip()]
        for field in changed:
            setattr(target, field, versions[field].strip())
        if name and name != target.name:
            target.name = name
            changed.append("name")
        if runner_command and runner_command != target.runner_command:
            target.runner_command = runner_command
            changed.append("runner_command")
        if not changed:
            return target
        target.save(update_fields=changed)
        # The lock order: the target's questions, chains and runs are locked before the audit head.
        to_refresh = chains_lock_for_target(target) if set(changed) & set(VERSION_FIELDS) else None
        audit_record(actor=actor, action="target.update", obj=target, before=before, after=_snapshot(target))
        if to_refresh is not None:
            chains_refresh(*to_refresh, target, actor=actor)
    return target


def target_accepts_runs(target: Target, now: datetime.datetime | None = None, *, claiming: bool = False) -> bool:
    """Whether a chain run may be sent to the target now: it is out of maintenance, its last health check did
    not fail, and a worker serving it has reported lately. `claiming`: whether a worker that took one of its
    runs may start it — that worker is the live one."""
    if target.maintenance or target.last_health_check_passed is False:
        return False
    if claiming:
        return True
    return target_health_state(target, now or timezone.now())[0] == Target.OK


def _set_health(target: Target, now: datetime.datetime) -> bool:
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
            _set_health(target, now)
            touched.append(target)
        for target in touched:
            runs_dispatch_pending(target)
    return touched


def targets_refresh_health() -> None:
    """Mark targets whose workers fell silent offline (the sweeper calls this)."""
    now = timezone.now()
    with transaction.atomic():
        for target in lock_rows(Target.objects, skip_locked=True).order_by("pk"):
            _set_health(target, now)


def runs_dispatch_pending(target: Target) -> int:
    """Send the target's pending runs if it accepts runs now; returns how many were sent."""
    from acceptance.services.dispatch import run_send

    if not target_accepts_runs(target):
        return 0
    sent = 0
    with transaction.atomic():
        for run in lock_rows(Run.objects, skip_locked=True).filter(target=target, state=stages.PENDING):
            run_state_move(run, stages.QUEUED)
            run_send(run, resend=True)
            sent += 1
    return sent


def target_set_maintenance(*, actor: Actor, target: Target, maintenance: bool, reason: str = "") -> Target:
    """Take a target out of service, or bring it back: then a health check is queued and its pending runs are
    sent (a target whose last health check failed keeps them until one passes)."""
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


def target_health_check_start(target: Target, *, actor: Actor = SYSTEM) -> Run | None:
    """Queue the target's health job (a known-good package through the runner protocol) unless one is
    already waiting or running. Health runs go even to a degraded target: passing one is how it recovers."""
    from acceptance.services.dispatch import run_send

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
            params={},
            inputs={"target": locked.as_job_target()},
            requested_by=actor_user(actor),
        )
        run_state_move(run, stages.QUEUED)
        audit_record(actor=actor, action="run.create", obj=run, after={"stage": stages.HEALTH})
        run_send(run)
    return run


def targets_health_check() -> list[Run]:
    """The periodic job: a health run on every target a worker serves and not in maintenance."""
    started = []
    now = timezone.now()
    for target in Target.objects.filter(maintenance=False).order_by("pk"):
        if target_health_state(target, now)[0] == Target.OFFLINE:
            continue
        run = target_health_check_start(target)
        if run is not None:
            started.append(run)
    return started


def target_health_record(target: Target, run: Run) -> None:
    """Store a finished health run's verdict on its target. Runs inside the run's finishing transaction."""
    now = timezone.now()
    locked = lock_rows(Target.objects).get(pk=target.pk)
    before = {"last_health_check_passed": locked.last_health_check_passed}
    locked.last_health_check_at = now
    locked.last_health_check_passed = run.verdict == stages.PASS
    locked.last_health_run = run
    locked.save(update_fields=["last_health_check_at", "last_health_check_passed", "last_health_run"])
    if before["last_health_check_passed"] != locked.last_health_check_passed:
        audit_record(
            actor=SYSTEM,
            action="target.health_check",
            obj=locked,
            before=before,
            after={"last_health_check_passed": locked.last_health_check_passed, "run": run.pk, "reason": run.reason},
        )
    _set_health(locked, now)
    if locked.last_health_check_passed:
        transaction.on_commit(lambda: runs_dispatch_pending(locked))
