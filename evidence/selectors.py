"""Reads of the evidence register and the capabilities, for the pages and the API alike."""

from dataclasses import dataclass

from django.db.models import Count, IntegerField, OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_noop

from calculet.errors import DomainError, NotFoundError
from evidence.models import (
    Archive,
    Capability,
    EvidenceGrade,
    EvidenceItem,
    EvidenceTable,
    PathAlias,
    SourceReference,
)
from vendor.access import objects_for_user
from vendor.models import Question


def visible_evidence(user) -> QuerySet[EvidenceItem]:
    """The evidence the user may read: the seed's, and what their own organisation's runs, checks and reviews
    produced (`vendor.access.VISIBILITY`); the integration team reads all of it."""
    return objects_for_user(user, EvidenceItem.objects)


def evidence_list(*, user) -> QuerySet[EvidenceItem]:
    return (
        visible_evidence(user)
        .select_related("table")
        .prefetch_related(
            "grades", "statuses", Prefetch("sources", queryset=SourceReference.objects.select_related("alias"))
        )
    )


def seed_evidence_list(*, user) -> QuerySet[EvidenceItem]:
    """The checklist's own evidence items: the register's rows (the evidence of runs, checks and reviews is
    grouped under them)."""
    return evidence_list(user=user).filter(origin=EvidenceItem.SEED)


def run_evidence_under(items: list[EvidenceItem], *, user) -> dict[int, list[Capability]]:
    """For each seed item, the capabilities citing it that runs, checks or reviews the user may read have given
    evidence to, each with `run_count` and its newest item's `newest_code` and `newest_grade`. Two queries,
    however many runs."""
    through = Capability.evidence.through
    pairs = list(
        through.objects.filter(evidenceitem_id__in=[item.pk for item in items]).values_list(
            "evidenceitem_id", "capability_id"
        )
    )
    if not pairs:
        return {}
    runs = visible_evidence(user).filter(capabilities=OuterRef("pk")).exclude(origin=EvidenceItem.SEED)
    counted = runs.order_by().values("capabilities").annotate(n=Count("pk")).values("n")
    newest = runs.order_by("-pk")
    capabilities = {
        capability.pk: capability
        for capability in Capability.objects.filter(pk__in={capability_id for _item, capability_id in pairs})
        .annotate(
            run_count=Coalesce(Subquery(counted, output_field=IntegerField()), 0),
            newest_code=Subquery(newest.values("code")[:1]),
            newest_grade=Subquery(newest.values("grade_text")[:1]),
        )
        .filter(run_count__gt=0)
        .order_by("slug")
    }
    grouped: dict[int, list[Capability]] = {}
    for item_id, capability_id in pairs:
        if capability_id in capabilities:
            grouped.setdefault(item_id, []).append(capabilities[capability_id])
    for group in grouped.values():
        group.sort(key=lambda capability: capability.slug)
    return grouped


def run_evidence_without_seed_item(*, user) -> int:
    """Evidence of runs, checks and reviews the user may read whose capabilities cite none of the checklist's
    items: the register's "from runs" group."""
    cited = Capability.objects.filter(evidence__origin=EvidenceItem.SEED)
    return visible_evidence(user).exclude(origin=EvidenceItem.SEED).exclude(capabilities__in=cited).count()


def capability_list(*, user, question: str | None = None) -> QuerySet[Capability]:
    """Capabilities, each with the questions and the evidence codes the user may see; with `question`, those
    linked to that question if the user may see it (none otherwise)."""
    visible_questions = objects_for_user(user, Question.objects)
    capabilities = Capability.objects.prefetch_related(
        Prefetch("questions", queryset=visible_questions.only("id", "code").order_by("number")),
        Prefetch("evidence", queryset=visible_evidence(user).only("id", "code").order_by("code")),
    )
    if question is not None:
        capabilities = capabilities.filter(questions__in=visible_questions.filter(code=question.upper())).distinct()
    return capabilities


def capability_get(*, user, slug: str) -> Capability:
    capability = capability_list(user=user).filter(slug=slug).first()
    if capability is None:
        raise NotFoundError(gettext_noop("Capability %(slug)s not found."), params={"slug": slug})
    return capability


def capability_by_slug(slug: str) -> Capability:
    """The capability a slug names, for the audit log's history filter (only its readers get this far)."""
    capability = Capability.objects.filter(slug=slug.strip()).first()
    if capability is None:
        raise DomainError(
            gettext_noop("No capability has the slug %(slug)r."), field="capability", params={"slug": slug.strip()}
        )
    return capability


@dataclass(frozen=True)
class CapabilityGrades:
    """A capability as the matrix shows it: the capability, and the distinct E grades of the evidence the user
    may read (never merged with its C status)."""

    capability: Capability
    evidence_grades: list[str]


def capabilities_with_grades(capabilities=None, *, user) -> list[CapabilityGrades]:
    """Capabilities in matrix order, each with the distinct E grades of the evidence the user may read.

    Two queries: the grades come as distinct (capability, grade) pairs, however many evidence items (run
    evidence included) a capability has.
    """
    capabilities = list(capabilities if capabilities is not None else Capability.objects.all())
    grades: dict[int, set[str]] = {}
    pairs = (
        EvidenceGrade.objects.filter(item__in=visible_evidence(user), item__capabilities__in=capabilities)
        .values_list("item__capabilities", "grade")
        .distinct()
    )
    for capability_id, grade in pairs:
        grades.setdefault(capability_id, set()).add(grade)
    return [
        CapabilityGrades(capability=capability, evidence_grades=sorted(grades.get(capability.pk, ())))
        for capability in capabilities
    ]


def capability_matrix_rows(*, user) -> list[CapabilityGrades]:
    """`capabilities_with_grades` with each capability's evidence codes prefetched, for the matrix export."""
    return capabilities_with_grades(
        Capability.objects.prefetch_related(
            Prefetch("evidence", queryset=visible_evidence(user).only("id", "code").order_by("code"))
        ),
        user=user,
    )


def evidence_table_list() -> QuerySet[EvidenceTable]:
    return EvidenceTable.objects.all()


def archive_list() -> QuerySet[Archive]:
    return Archive.objects.all()


def path_alias_list() -> QuerySet[PathAlias]:
    return PathAlias.objects.all()


def question_capabilities(question, *, user) -> QuerySet[Capability]:
    """The capabilities a question can move, each with the evidence the user may read, its grades and
    statuses."""
    return question.capabilities.prefetch_related(
        Prefetch("evidence", queryset=visible_evidence(user).prefetch_related("grades", "statuses"))
    )


def capability_evidence(capability, *, user) -> QuerySet[EvidenceItem]:
    """The evidence of the capability the user may read: the seed's first, then the newest run evidence (a
    much-tested capability has many run items)."""
    return (
        visible_evidence(user)
        .filter(capabilities=capability)
        .select_related("table")
        .prefetch_related("grades", "statuses")
        .order_by("-origin", "table__section", "position", "-id")
    )


def capability_questions(*, user, capability) -> QuerySet[Question]:
    """The questions the user may see that can move the capability."""
    return objects_for_user(user, Question.objects.filter(capabilities=capability)).select_related("section")
