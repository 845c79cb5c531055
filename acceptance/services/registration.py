"""Registering an execution target and changing its versions or runner. Changed versions make the artifact
stage and everything after it stale on the target's chains, so this sits above the chains' services, which
themselves send runs to targets."""

from django.db import transaction
from django.utils.text import slugify
from django.utils.translation import gettext_noop

from acceptance.models import Target
from acceptance.services.chains import chains_lock_for_target, chains_refresh
from acceptance.services.targets import target_snapshot
from calculet.actors import Actor
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError
from calculet.sentences import Labelled

VERSION_FIELDS = ["calrt_version", "driver_version", "firmware_version", "chip"]


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
    if not slug or slugify(slug) != slug or slug == "default":
        raise DomainError(
            gettext_noop("A target slug is lower-case letters, digits and dashes, and not 'default'."),
            field="slug",
        )
    if kind not in (Target.SIMULATOR, Target.HARDWARE):
        raise DomainError(gettext_noop("A target's kind is simulator or hardware."), field="kind")
    versions = {
        "calrt_version": calrt_version,
        "driver_version": driver_version,
        "firmware_version": firmware_version,
        "chip": chip,
    }
    for field, value in versions.items():
        if not str(value or "").strip():
            raise DomainError(
                gettext_noop("Give the target's %(field)s."), field=field, params={"field": field.replace("_", " ")}
            )
    runner_command = (runner_command or "").strip()
    if kind == Target.SIMULATOR and runner_command:
        raise DomainError(
            gettext_noop("A simulator target runs the bundled simulator; only a hardware target has a runner command."),
            field="runner_command",
        )
    with transaction.atomic():
        target = lock_rows(Target.objects).filter(slug=slug).first()
        if kind == Target.HARDWARE and not (runner_command or (target is not None and target.runner_command)):
            raise DomainError(
                gettext_noop(
                    "A hardware target needs the command of its hardware runner: without one it cannot run anything, "
                    "and it never falls back to the bundled simulator."
                ),
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
            audit_record(actor=actor, action="target.register", obj=target, after=target_snapshot(target))
            return target
        if target.kind != kind:
            raise DomainError(
                gettext_noop("Target %(slug)s is a %(kind)s target; its kind does not change."),
                field="kind",
                params={"slug": slug, "kind": Labelled("target_kind", target.kind)},
            )
        before = target_snapshot(target)
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
        audit_record(actor=actor, action="target.update", obj=target, before=before, after=target_snapshot(target))
        if to_refresh is not None:
            chains_refresh(*to_refresh, target, actor=actor)
    return target
