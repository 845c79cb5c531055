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
        raise NotFoundError(f"Capability {slug} not found.")
    return capability


def capabilities_with_grades(capabilities=None, *, user):
    """Capabilities in matrix order, each with the distinct E grades of the evidence the user may read (never
    merged with C).

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
    for capability in capabilities:
        capability.evidence_grades = sorted(grades.get(capability.pk, ()))
    return capabilities


def capability_matrix_rows(*, user) -> list[Capability]:
    """`capabilities_with_grades` with each capability's evidence codes, for the matrix export."""
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
