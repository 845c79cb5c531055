"""Reads of the vendor app's rows for the pages and the API alike, scoped by `vendor.access`, each in a fixed
number of queries whatever the number of rows."""

from django.contrib.auth import get_user_model
from django.db.models import Prefetch, QuerySet

from calculet.models import AuditEntry
from vendor import states
from vendor.access import objects_for_user
from vendor.models import Answer, ApiToken, Artifact, Organisation, Question, Section, Upload


def question_list(*, user) -> QuerySet[Question]:
    return objects_for_user(user, Question.objects).select_related("section", "assignee", "organisation")


def answer_list(*, user, question: Question | None = None) -> QuerySet[Answer]:
    answers = objects_for_user(user, Answer.objects)
    if question is not None:
        answers = answers.filter(question=question)
    return (
        answers.select_related("question", "organisation", "author", "minimal_example_artifact")
        .prefetch_related(
            Prefetch("executable_assets", queryset=Artifact.objects.order_by("pk")),
            Prefetch("golden_artifacts", queryset=Artifact.objects.order_by("pk")),
        )
        .order_by("-revision", "-id")
    )


def artifact_list(*, user) -> QuerySet[Artifact]:
    return objects_for_user(user, Artifact.objects).select_related("organisation", "uploaded_by", "blob")


def upload_list(*, user) -> QuerySet[Upload]:
    return objects_for_user(user, Upload.objects).select_related("organisation", "artifact")


def organisation_list(*, user) -> QuerySet[Organisation]:
    return objects_for_user(user, Organisation.objects)


def organisations() -> QuerySet[Organisation]:
    """Every organisation, for resolving a slug a PM gives; `question_update` decides which may be used."""
    return Organisation.objects.all()


def vendor_organisations() -> QuerySet[Organisation]:
    """The organisations a question can be put to."""
    return Organisation.objects.filter(kind=Organisation.VENDOR)


def team_members():
    """People a question can be assigned to: the integration team's members."""
    return (
        get_user_model()
        .objects.filter(is_active=True, membership__organisation__kind=Organisation.INTEGRATOR)
        .order_by("username")
    )


def section_list() -> QuerySet[Section]:
    return Section.objects.all()


def token_list(*, user) -> QuerySet[ApiToken]:
    """A user's own API tokens: nobody, the team included, lists another's."""
    return ApiToken.objects.filter(user=user)


def audit_entries() -> QuerySet[AuditEntry]:
    """The audit log, newest first; only for those `vendor.access.may_read_audit` lets in."""
    return AuditEntry.objects.order_by("-id")


def open_questions() -> QuerySet[Question]:
    """Questions neither closed nor deferred, grouped by the organisation they are put to."""
    return (
        Question.objects.exclude(state__in=[states.CLOSED, states.DEFERRED])
        .select_related("organisation", "assignee", "section")
        .order_by("organisation__slug", "number")
    )


def active_users():
    """People who can be named as an assignee; `question_update` decides which of them may be."""
    return get_user_model().objects.filter(is_active=True)
