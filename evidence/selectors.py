"""Reads of the evidence register and the capabilities, for the pages and the API alike."""

from django.db.models import Prefetch, QuerySet

from calculet.errors import NotFoundError
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


def evidence_list() -> QuerySet[EvidenceItem]:
    return EvidenceItem.objects.select_related("table").prefetch_related(
        "grades", "statuses", Prefetch("sources", queryset=SourceReference.objects.select_related("alias"))
    )


def capability_list(*, user) -> QuerySet[Capability]:
    """Capabilities, each with the questions the user may see and its evidence codes."""
    return Capability.objects.prefetch_related(
        Prefetch("questions", queryset=objects_for_user(user, Question.objects).only("id", "code").order_by("number")),
        Prefetch("evidence", queryset=EvidenceItem.objects.only("id", "code").order_by("code")),
    )


def capability_get(*, user, slug: str) -> Capability:
    capability = capability_list(user=user).filter(slug=slug).first()
    if capability is None:
        raise NotFoundError(f"Capability {slug} not found.")
    return capability


def capabilities_with_grades(capabilities=None):
    """Capabilities in matrix order, each with the distinct E grades of its evidence (never merged with C).

    Two queries: the grades come as distinct (capability, grade) pairs, however many evidence items (run
    evidence included) a capability has.
    """
    capabilities = list(capabilities if capabilities is not None else Capability.objects.all())
    grades: dict[int, set[str]] = {}
    pairs = (
        EvidenceGrade.objects.filter(item__capabilities__in=capabilities)
        .values_list("item__capabilities", "grade")
        .distinct()
    )
    for capability_id, grade in pairs:
        grades.setdefault(capability_id, set()).add(grade)
    for capability in capabilities:
        capability.evidence_grades = sorted(grades.get(capability.pk, ()))
    return capabilities


def capability_matrix_rows() -> list[Capability]:
    """`capabilities_with_grades` with each capability's evidence codes, for the matrix export."""
    return capabilities_with_grades(
        Capability.objects.prefetch_related(
            Prefetch("evidence", queryset=EvidenceItem.objects.only("id", "code").order_by("code"))
        )
    )


def evidence_table_list() -> QuerySet[EvidenceTable]:
    return EvidenceTable.objects.all()


def archive_list() -> QuerySet[Archive]:
    return Archive.objects.all()


def path_alias_list() -> QuerySet[PathAlias]:
    return PathAlias.objects.all()


def question_capabilities(question) -> QuerySet[Capability]:
    """The capabilities a question can move, each with its evidence and their grades and statuses."""
    return question.capabilities.prefetch_related(
        Prefetch("evidence", queryset=EvidenceItem.objects.prefetch_related("grades", "statuses"))
    )


def capability_evidence(capability) -> QuerySet[EvidenceItem]:
    """Seed evidence first, then the newest run evidence: a much-tested capability has many run items."""
    return (
        EvidenceItem.objects.filter(capabilities=capability)
        .select_related("table")
        .prefetch_related("grades", "statuses")
        .order_by("-origin", "table__section", "position", "-id")
    )


def capability_questions(*, user, capability) -> QuerySet[Question]:
    """The questions the user may see that can move the capability."""
    return objects_for_user(user, Question.objects.filter(capabilities=capability)).select_related("section")
