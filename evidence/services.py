"""Writing evidence that is not the seed's: what runs measured, static checks found and document reviews
recorded. `evidence_record` is the one writer of such rows."""

from collections.abc import Iterable, Mapping

from django.db import transaction
from django.utils.translation import gettext_noop

from calculet.actors import SYSTEM, Actor
from calculet.audit import audit_record
from calculet.errors import DomainError
from evidence.grades import GRADES
from evidence.models import Capability, EvidenceGrade, EvidenceItem

RECORDED_ORIGINS = (EvidenceItem.RUN, EvidenceItem.CHECK, EvidenceItem.REVIEW)
VERSION_KEYS = ("calrt", "driver", "firmware", "chip")


def evidence_record(
    *,
    origin: str,
    grade: str,
    conclusion: str,
    organisation,
    capabilities: Iterable[Capability] = (),
    versions: Mapping[str, str] | None = None,
    deliverable=None,
    answer=None,
    code_prefix: str,
    source_text: str = "",
    explanation: str = "",
    detail: Mapping | None = None,
    actor: Actor = SYSTEM,
) -> EvidenceItem:
    """Store one evidence row with its grade, link it to the capabilities it is about, and audit it.

    Preconditions: `origin` is run, check or review (the seed's rows come only from the import); `grade` is
    one of E0–E4; `versions` names only calrt, driver, firmware and chip. The code is `code_prefix` followed
    by the row's own number, so it is unique. `explanation` is text for people, cut at 2,000 characters;
    `detail` is stored whole (a check's findings, files and output tails). Runs in the caller's transaction
    when there is one.
    """
    if origin not in RECORDED_ORIGINS:
        raise DomainError(
            gettext_noop("Evidence of origin %(origin)r is not recorded here."),
            field="origin",
            params={"origin": origin},
        )
    if grade not in GRADES:
        raise DomainError(
            gettext_noop("Unknown evidence grade %(grade)r; one of: %(grades)s."),
            field="grade",
            params={"grade": grade, "grades": list(GRADES)},
        )
    versions = {key: str(value) for key, value in (versions or {}).items() if value}
    unknown = sorted(set(versions) - set(VERSION_KEYS))
    if unknown:
        raise DomainError(
            gettext_noop("Unknown version key %(key)r; one of: %(keys)s."),
            field="versions",
            params={"key": unknown[0], "keys": list(VERSION_KEYS)},
        )
    with transaction.atomic():
        item = EvidenceItem.objects.create(
            code=f"{code_prefix}-pending",
            origin=origin,
            conclusion=conclusion,
            source_text=source_text,
            grade_text=grade,
            explanation=explanation[:2000],
            detail=dict(detail or {}),
            organisation=organisation,
            versions=versions,
            deliverable=deliverable,
            answer=answer,
        )
        item.code = f"{code_prefix}-{item.pk}"
        item.save(update_fields=["code"])
        EvidenceGrade.objects.create(item=item, grade=grade)
        capabilities = list(capabilities)
        for capability in capabilities:
            capability.evidence.add(item)
        audit_record(
            actor=actor,
            action="evidence.record",
            obj=item,
            after={
                "code": item.code,
                "origin": origin,
                "grade": grade,
                "organisation": organisation.slug if organisation else None,
                "capabilities": [capability.slug for capability in capabilities],
                "deliverable": deliverable.pk if deliverable else None,
                "answer": answer.pk if answer else None,
                "versions": versions,
            },
        )
    return item


def evidence_lapse(items, *, actor: Actor = SYSTEM, reason: str) -> int:
    """Mark evidence rows no longer current: the versions they were measured or checked on are no longer the
    target's, or the artifact they checked was superseded. They then count as E3 (to be checked again). One
    audit row per row that lapses; returns how many lapsed."""
    lapsed = 0
    with transaction.atomic():
        for item in items.filter(current=True).exclude(origin=EvidenceItem.SEED).select_for_update(of=("self",)):
            item.current = False
            item.save(update_fields=["current", "updated_at"])
            audit_record(
                actor=actor, action="evidence.lapse", obj=item, before={"current": True}, after={"reason": reason}
            )
            lapsed += 1
    return lapsed


CAPABILITY_TEXT_FIELDS = ("title", "description", "scope", "position")


def capability_update(
    *, actor: Actor, capability: Capability, changes: Mapping, questions=None, evidence=None, deliverables=None
) -> Capability:
    """Change a capability's own text and its links to questions, evidence and deliverables, with one audit row
    naming what changed. The status is not among them: only the promotion gate moves it.

    Preconditions: `changes` names only title, description, scope and position (DomainError otherwise, on the
    field); the title is not blank. `questions`, `evidence` and `deliverables`, when given, are the new sets of
    linked rows.
    """
    unknown = sorted(set(changes) - set(CAPABILITY_TEXT_FIELDS))
    if unknown:
        raise DomainError(
            gettext_noop("%(field)s is not changed here."), field=unknown[0], params={"field": unknown[0]}
        )
    if "title" in changes and not str(changes["title"] or "").strip():
        raise DomainError(gettext_noop("A capability needs a title."), field="title")
    with transaction.atomic():
        locked = Capability.objects.select_for_update(of=("self",)).get(pk=capability.pk)
        before: dict = {}
        after: dict = {}
        for field, value in changes.items():
            if getattr(locked, field) != value:
                before[field], after[field] = getattr(locked, field), value
                setattr(locked, field, value)
        if after:
            locked.save(update_fields=list(after))
        for name, rows in (("questions", questions), ("evidence", evidence), ("deliverables", deliverables)):
            if rows is None:
                continue
            relation = getattr(locked, name)
            old = set(relation.values_list("pk", flat=True))
            new = {row.pk for row in rows}
            if old != new:
                relation.set(new)
                before[name], after[name] = sorted(old), sorted(new)
        if after:
            audit_record(actor=actor, action="capability.update", obj=locked, before=before, after=after)
    return locked
