"""Registering an execution target and changing its versions or runner. Changed versions make the artifact
stage and everything after it stale on the target's chains, so this sits above the chains' services, which
themselves send runs to targets.

What an agent's host says of its target (docs/deploy.md, "What the host says") is not taken on its word: a
board's first agent registration, and any runner, digest, chip or version an agent sends that differs from the
target's, wait for a PM's or operator's approval (`target_registration_approve`), the target out of rotation
meanwhile.
"""

import re

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext_noop

from acceptance.models import Target
from acceptance.services.chains import chains_lock_for_target, chains_refresh
from acceptance.services.targets import runs_dispatch_pending, target_health_refresh, target_snapshot
from calculet.actors import Actor, Machine
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.sentences import Labelled
from vendor.access import may_approve_moves

VERSION_FIELDS = ["calrt_version", "driver_version", "firmware_version", "chip"]
# What an agent may say of its target, each held for approval when it differs; the runner's only for a board.
AGENT_FIELDS = ["runner_command", "runner_digest", *VERSION_FIELDS]
SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
    runner_digest: str = "",
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
    if kind == Target.SIMULATOR and (runner_command or runner_digest):
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
                runner_digest=runner_digest,
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
        if runner_digest and runner_digest != target.runner_digest:
            target.runner_digest = runner_digest
            changed.append("runner_digest")
        if not changed:
            return target
        target.save(update_fields=changed)
        # The lock order: the target's questions, chains and runs are locked before the audit head.
        to_refresh = chains_lock_for_target(target) if set(changed) & set(VERSION_FIELDS) else None
        audit_record(actor=actor, action="target.update", obj=target, before=before, after=target_snapshot(target))
        if to_refresh is not None:
            chains_refresh(*to_refresh, target, actor=actor)
    return target


def target_registration_propose(*, target: Target, agent_id: int, host: str, sent: dict[str, str]) -> Target:
    """What agent `agent_id` on `host` registered of the target (`sent`: the AGENT_FIELDS it gave, the
    runner's only for a board) held for approval when it needs one: a board's first agent registration, or
    any field that differs from the target's. Nothing of it is applied here; the target is out of rotation
    until `target_registration_approve` (`acceptance.selectors.target_health_state`). A registration that
    needs no approval withdraws one still waiting. Audited when what waits changes."""
    digest = sent.get("runner_digest", "")
    if digest and not SHA256.match(digest):
        raise DomainError(
            gettext_noop("A runner digest is the 64 lower-case hex digits of a SHA-256."), field="runner_digest"
        )
    with transaction.atomic():
        locked = lock_rows(Target.objects).get(pk=target.pk)
        changes = {
            field: [getattr(locked, field), value] for field, value in sent.items() if getattr(locked, field) != value
        }
        first = locked.kind == Target.HARDWARE and locked.registration_approved_at is None
        pending = {}
        if first or changes:
            pending = {"agent": agent_id, "host": host, "first": first, "changes": changes}
            pending["reason"] = registration_reason(pending)
        if pending == locked.registration_pending:
            return locked
        before = locked.registration_pending
        locked.registration_pending = pending
        locked.save(update_fields=["registration_pending"])
        target_health_refresh(locked, timezone.now())
        action = "target.registration_pending" if pending else "target.registration_withdrawn"
        audit_record(actor=Machine(f"agent {host}"), action=action, obj=locked, before=before, after=pending)
    return locked


def registration_reason(pending: dict) -> str:
    """Why the target is out of rotation while `pending` waits: what the agent sent, field by field."""
    what = "the first registration" if pending["first"] else "the registration"
    reason = f"out of rotation until a PM or operator approves {what} agent {pending['host']} sent"
    if pending["changes"]:
        changed = "; ".join(f"{field} {old or '(none)'} -> {new}" for field, (old, new) in pending["changes"].items())
        reason = f"{reason}: {changed}"
    return reason[:500]


def target_registration_approve(*, actor: Actor, target: Target) -> Target:
    """A PM or operator approves what an agent registered and waits: its values become the target's (changed
    versions make the chains' stages stale, as a registration by hand does), the target is back in rotation
    and its pending runs are sent. ForbiddenError for anyone else; ConflictError when nothing waits.
    Audited."""
    if not may_approve_moves(actor):
        raise ForbiddenError(
            gettext_noop("Only a PM or an operator of the integration team approves a target's registration.")
        )
    with transaction.atomic():
        locked = lock_rows(Target.objects).get(pk=target.pk)
        pending = locked.registration_pending
        if not pending:
            raise ConflictError(
                gettext_noop("No agent registration of target %(target)s waits for approval."),
                field="target",
                params={"target": locked.slug},
            )
        sent = {field: new for field, (_old, new) in pending["changes"].items()}
        target_register(
            actor=actor,
            slug=locked.slug,
            kind=locked.kind,
            **{field: sent.get(field, getattr(locked, field)) for field in VERSION_FIELDS},
            runner_command=sent.get("runner_command", ""),
            runner_digest=sent.get("runner_digest", ""),
        )
        locked = lock_rows(Target.objects).get(pk=target.pk)
        locked.registration_pending = {}
        locked.registration_approved_at = timezone.now()
        locked.save(update_fields=["registration_pending", "registration_approved_at"])
        target_health_refresh(locked, timezone.now())
        audit_record(actor=actor, action="target.registration_approve", obj=locked, before=pending, after=sent)
        transaction.on_commit(lambda: runs_dispatch_pending(locked))
    return locked
