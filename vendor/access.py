"""Every object a user reaches is fetched here.

Members of the integration team's organisation see everything; a vendor organisation's members see only
the questions put to their organisation and their organisation's own answers, artifacts, uploads and
runs. The `*_for_user(user, key)` functions raise `NotFoundError` (an `Http404` too) for a missing object
and for another organisation's object alike, so a response never tells the two apart.
"""

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from acceptance.models import Run
from calculet.errors import NotFoundError
from vendor.models import Answer, Artifact, Membership, Organisation, Question, Upload


def user_membership(user) -> Membership | None:
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    try:
        return user.membership
    except Membership.DoesNotExist:
        return None


def user_role(user) -> str | None:
    membership = user_membership(user)
    return membership.role if membership is not None else None


def user_organisation(user) -> Organisation | None:
    membership = user_membership(user)
    return membership.organisation if membership is not None else None


def user_sees_all(user) -> bool:
    """True for members of the integration team's organisation (roles pm, operator, viewer)."""
    membership = user_membership(user)
    return (
        membership is not None
        and membership.organisation.kind == Organisation.INTEGRATOR
        and membership.role != Membership.VENDOR
    )


def user_is_pm(user) -> bool:
    return user_sees_all(user) and user_role(user) == Membership.PM


def _vendor_organisation_id(user) -> int | None:
    membership = user_membership(user)
    return membership.organisation_id if membership is not None else None


def questions_for_user(user) -> QuerySet[Question]:
    if user_sees_all(user):
        return Question.objects.all()
    organisation_id = _vendor_organisation_id(user)
    if organisation_id is None:
        return Question.objects.none()
    return Question.objects.filter(organisation_id=organisation_id)


def question_for_user(user, code: str) -> Question:
    question = questions_for_user(user).filter(code=str(code).upper()).first()
    if question is None:
        raise NotFoundError(f"Question {code} not found.")
    return question


def answers_for_user(user) -> QuerySet[Answer]:
    if user_sees_all(user):
        return Answer.objects.all()
    organisation_id = _vendor_organisation_id(user)
    if organisation_id is None:
        return Answer.objects.none()
    return Answer.objects.filter(organisation_id=organisation_id, question__organisation_id=organisation_id)


def answer_for_user(user, answer_id, *, question: Question | None = None) -> Answer:
    answers = answers_for_user(user)
    if question is not None:
        answers = answers.filter(question=question)
    answer = _by_id(answers, answer_id)
    if answer is None:
        raise NotFoundError(f"Answer {answer_id} not found.")
    return answer


def artifacts_for_user(user) -> QuerySet[Artifact]:
    if user_sees_all(user):
        return Artifact.objects.all()
    organisation_id = _vendor_organisation_id(user)
    if organisation_id is None:
        return Artifact.objects.none()
    return Artifact.objects.filter(organisation_id=organisation_id)


def artifact_for_user(user, artifact_id) -> Artifact:
    artifact = _by_id(artifacts_for_user(user), artifact_id)
    if artifact is None:
        raise NotFoundError(f"Artifact {artifact_id} not found.")
    return artifact


def uploads_for_user(user) -> QuerySet[Upload]:
    """Uploads are private to their organisation, integration team included."""
    organisation_id = _vendor_organisation_id(user)
    if organisation_id is None:
        return Upload.objects.none()
    return Upload.objects.filter(organisation_id=organisation_id)


def upload_for_user(user, upload_id) -> Upload:
    upload = _by_id(uploads_for_user(user), upload_id)
    if upload is None:
        raise NotFoundError(f"Upload {upload_id} not found.")
    return upload


def runs_for_user(user) -> QuerySet[Run]:
    """Runs of the chains of a vendor's own answers; every run (health checks too) for the integration team."""
    if user_sees_all(user):
        return Run.objects.all()
    organisation_id = _vendor_organisation_id(user)
    if organisation_id is None:
        return Run.objects.none()
    return Run.objects.filter(answer__organisation_id=organisation_id, chain__question__organisation_id=organisation_id)


def run_for_user(user, run_id) -> Run:
    run = _by_id(runs_for_user(user), run_id)
    if run is None:
        raise NotFoundError(f"Run {run_id} not found.")
    return run


def _by_id(queryset: QuerySet, object_id):
    try:
        return queryset.filter(pk=object_id).first()
    except (TypeError, ValueError, ValidationError):
        return None
