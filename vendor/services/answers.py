"""Vendor answers: one immutable revision per submission, judged by section 13's closing rule."""

from django.db import transaction
from django.db.models import Max
from django.utils.translation import gettext_noop

from calculet.actors import Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError, NotFoundError
from calculet.sentences import Labelled
from vendor import events, states
from vendor.access import may_answer, user_organisation
from vendor.claim import ClaimData, claim_missing
from vendor.inputs import AnswerDraft
from vendor.models import Answer, Artifact, Deliverable, Organisation, Question
from vendor.services.notifications import notify_on_commit
from vendor.services.questions import question_state_move

EXECUTABLE_KINDS = {
    Artifact.CALBIN,
    Artifact.SDK,
    Artifact.CONTAINER_IMAGE,
    Artifact.RUNNER_BUNDLE,
    Artifact.SCHEMA,
    Artifact.ONNX,
    Artifact.TOOL,
}
EXAMPLE_KINDS = set(dict(Artifact.KINDS)) - {Artifact.DOCUMENT}


def _artifact(organisation: Organisation, artifact_id: int, field: str, kinds: set[str]) -> Artifact:
    """One of the organisation's verified artifacts; another organisation's id is "not found"."""
    artifact = Artifact.objects.filter(pk=artifact_id, organisation=organisation).first()
    if artifact is None:
        raise DomainError(
            gettext_noop("Artifact %(value)s not found."),
            field=field,
            code="not_found",
            params={"value": artifact_id},
        )
    if artifact.state != Artifact.VERIFIED:
        raise DomainError(
            gettext_noop("Artifact %(artifact)s is %(state)s, not verified."),
            field=field,
            params={"artifact": artifact_id, "state": Labelled("artifact_state", artifact.state)},
        )
    if artifact.kind not in kinds:
        raise DomainError(
            gettext_noop("Artifact %(artifact)s is a %(kind)s; expected one of: %(kinds)s."),
            field=field,
            params={
                "artifact": artifact_id,
                "kind": Labelled("artifact_kind", artifact.kind),
                "kinds": Labelled("artifact_kind", sorted(kinds)),
            },
        )
    return artifact


def _artifacts(organisation: Organisation, ids: tuple[int, ...], field: str, kinds: set[str]) -> list[Artifact]:
    found = [_artifact(organisation, value, f"{field}[{index}]", kinds) for index, value in enumerate(ids)]
    return list({artifact.pk: artifact for artifact in found}.values())


def _deliverable(question: Question, key: str) -> Deliverable:
    """The deliverable an answer names by its key; the question's only one when it names none."""
    deliverables = list(question.deliverables.order_by("position", "key"))
    keys = [d.key for d in deliverables]
    if not key:
        if len(deliverables) == 1:
            return deliverables[0]
        if not deliverables:
            raise DomainError(
                gettext_noop("%(question)s has no deliverable to answer."),
                field="deliverable",
                params={"question": question.code},
            )
        raise DomainError(
            gettext_noop("Name the deliverable this answer delivers: %(question)s has several (%(keys)s)."),
            field="deliverable",
            params={"question": question.code, "keys": keys},
        )
    for deliverable in deliverables:
        if deliverable.key == key:
            return deliverable
    raise DomainError(
        gettext_noop("%(question)s has no deliverable %(key)r; one of: %(keys)s."),
        field="deliverable",
        code="not_found",
        params={"question": question.code, "key": key, "keys": keys or "—"},
    )


def answer_store(*, actor: Actor, question: Question, draft: AnswerDraft) -> Answer:
    """Store a new revision of the actor's organisation's answer to `question`.

    Preconditions: the actor is a vendor engineer (ForbiddenError) of the organisation the question is put
    to (otherwise the question is "not found"); `draft.deliverable` is the key of one of the question's
    deliverables (it may be left empty when the question has only one); every artifact id is one of that
    organisation's verified artifacts of a kind the field takes (another organisation's id is "not found",
    naming the field). The draft's shape was checked where it was built. `complete` and `missing` come from
    section 13's rule (`vendor.claim.claim_missing`). A question that was asked moves to answered. A refusal
    raises DomainError naming the field and stores nothing. `acceptance.services.answer_submit` calls this
    and starts the answer's chains.
    """
    if not may_answer(actor):
        raise ForbiddenError(gettext_noop("Only a vendor engineer answers questions."))
    organisation = user_organisation(actor)
    if organisation is None or question.organisation_id != organisation.pk:
        raise NotFoundError(gettext_noop("Question %(value)s not found."), params={"value": question.code})
    deliverable = _deliverable(question, draft.deliverable)
    executable_assets = _artifacts(organisation, draft.executable_assets, "executable_assets", EXECUTABLE_KINDS)
    example_artifact = None
    if draft.minimal_example_artifact is not None:
        example_artifact = _artifact(
            organisation, draft.minimal_example_artifact, "minimal_example.artifact", EXAMPLE_KINDS
        )
    golden_artifacts = _artifacts(organisation, draft.golden_artifacts, "golden.artifacts", {Artifact.GOLDEN})
    error_paths = [path.stored() for path in draft.error_paths]
    missing = claim_missing(
        ClaimData(
            version=draft.version,
            executable_asset_ids=[artifact.pk for artifact in executable_assets],
            minimal_example_artifact_id=example_artifact.pk if example_artifact else None,
            minimal_example_command=draft.minimal_example_command,
            error_paths=error_paths,
            golden_artifact_ids=[artifact.pk for artifact in golden_artifacts],
            golden_tolerances=draft.golden_tolerances,
            compatibility=draft.compatibility,
        )
    )
    with transaction.atomic():
        locked = lock_rows(Question.objects).get(pk=question.pk)
        if locked.organisation_id != organisation.pk:
            raise NotFoundError(gettext_noop("Question %(value)s not found."), params={"value": question.code})
        latest = Answer.objects.filter(question=locked, organisation=organisation).aggregate(top=Max("revision"))
        answer = Answer.objects.create(
            question=locked,
            deliverable=deliverable,
            organisation=organisation,
            revision=(latest["top"] or 0) + 1,
            author=actor_user(actor),
            summary=draft.summary,
            version=draft.version,
            minimal_example_artifact=example_artifact,
            minimal_example_command=draft.minimal_example_command,
            minimal_example_description=draft.minimal_example_description,
            error_paths=error_paths,
            golden_tolerances=dict(draft.golden_tolerances),
            compatibility=dict(draft.compatibility),
            thresholds=dict(draft.thresholds),
            complete=not missing,
            missing=missing,
        )
        answer.executable_assets.set(executable_assets)
        answer.golden_artifacts.set(golden_artifacts)
        audit_record(actor=actor, action="answer.submit", obj=answer, after=answer_snapshot(answer))
        notify_on_commit(
            events.ANSWERED,
            actor=actor,
            organisation_id=organisation.pk,
            question_id=locked.pk,
            data={
                "organisation": organisation.name,
                "revision": answer.revision,
                "detail": draft.summary[:500],
                "path": f"/questions/{locked.code}/#answer-{answer.pk}",
            },
        )
        # A question being verified stays so: the chains already running verify their deliverables whatever
        # a new revision (an incomplete one for another deliverable, say) says.
        if locked.state != states.VERIFYING and states.can_transition(locked.state, states.ANSWERED):
            question_state_move(
                actor=actor, question=locked, state=states.ANSWERED, reason=f"answer r{answer.revision}"
            )
    return answer


def answer_snapshot(answer: Answer) -> dict:
    """The answer's content as stored, for the audit log."""
    return {
        "question": answer.question.code,
        "deliverable": answer.deliverable.key if answer.deliverable else None,
        "organisation": answer.organisation.slug,
        "revision": answer.revision,
        "summary": answer.summary,
        "version": answer.version,
        "executable_assets": sorted(answer.executable_assets.values_list("pk", flat=True)),
        "minimal_example": {
            "artifact": answer.minimal_example_artifact_id,
            "command": answer.minimal_example_command,
            "description": answer.minimal_example_description,
        },
        "error_paths": answer.error_paths,
        "golden": {
            "artifacts": sorted(answer.golden_artifacts.values_list("pk", flat=True)),
            "tolerances": answer.golden_tolerances,
        },
        "compatibility": answer.compatibility,
        "thresholds": answer.thresholds,
        "complete": answer.complete,
        "missing": answer.missing,
    }
