"""A question's thread: comments by the integration team's PMs and the engineers of the vendor the question is
put to, in Markdown, mentioning people, linking the vendor's artifacts; edits kept as revisions."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from calculet.actors import Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError, NotFoundError
from vendor import events, rich_text
from vendor.access import may_be_told, may_discuss, may_edit_comment, may_open_pages, object_for_user
from vendor.inputs import CommentDraft
from vendor.models import Artifact, Comment, CommentRevision, Question
from vendor.services.notifications import notify_on_commit

EXCERPT_CHARS = 500


def _attachments(organisation_id: int | None, ids: tuple[int, ...]) -> list[Artifact]:
    """The artifacts `ids` names, each one of the thread's vendor's (a comment links, it never uploads)."""
    found = {}
    if organisation_id is not None:
        found = {
            artifact.pk: artifact for artifact in Artifact.objects.filter(pk__in=ids, organisation=organisation_id)
        }
    for index, artifact_id in enumerate(ids):
        if artifact_id not in found:
            raise DomainError(
                gettext_noop("Artifact %(artifact)s not found among the artifacts of the question's vendor."),
                field=f"artifacts[{index}]",
                code="not_found",
                params={"artifact": artifact_id},
            )
    return [found[artifact_id] for artifact_id in dict.fromkeys(ids)]


def _mentioned(body: str, organisation_id: int | None) -> list:
    """The people the text names with @username who may read the thread; other names stay plain text."""
    names = rich_text.mention_candidates(body)
    if not names:
        return []
    people = get_user_model().objects.filter(username__in=names, is_active=True).select_related("membership")
    return [
        person
        for person in people.order_by("username")
        if may_open_pages(person) and may_be_told(person, organisation_id=organisation_id)
    ]


def _thread_question(actor: Actor, question: Question) -> Question:
    """The question as the actor may see it, fresh: the thread is with the vendor it is put to now."""
    if not may_discuss(actor):
        raise ForbiddenError(gettext_noop("Only the team's PMs and the question's vendor write in its thread."))
    return object_for_user(actor, Question.objects.select_related("organisation"), pk=question.pk)


def _snapshot(comment: Comment, artifacts, mentioned) -> dict:
    return {
        "question": comment.question.code,
        "body": comment.body,
        "artifacts": [artifact.pk for artifact in artifacts],
        "mentions": [person.get_username() for person in mentioned],
    }


def _tell(comment: Comment, actor: Actor, kind: str, mentioned) -> None:
    """The thread's people of a new comment (less those it mentions), or those it mentions that they are."""
    ids = [person.pk for person in mentioned]
    notify_on_commit(
        kind,
        actor=actor,
        organisation_id=comment.organisation_id,
        question_id=comment.question_id,
        named_ids=ids if kind == events.MENTION else [],
        skip_ids=ids if kind == events.COMMENT else [],
        data={
            "comment": comment.pk,
            "detail": comment.body[:EXCERPT_CHARS],
            "path": f"/questions/{comment.question.code}/#comment-{comment.pk}",
        },
    )


def comment_create(*, actor: Actor, question: Question, draft: CommentDraft) -> Comment:
    """Add a comment (`vendor.inputs.CommentDraft`) to the question's thread.

    Preconditions: the actor is a PM or a vendor engineer (ForbiddenError) who may see the question
    (NotFoundError); each linked artifact belongs to the vendor the question is put to. DomainError names the
    field and stores nothing. The thread's people are told, those mentioned (who may read the thread) are told
    they were; one audit row.
    """
    question = _thread_question(actor, question)
    body = draft.body
    artifacts = _attachments(question.organisation_id, draft.artifacts)
    mentioned = _mentioned(body, question.organisation_id)
    with transaction.atomic():
        comment = Comment.objects.create(
            question=question,
            organisation_id=question.organisation_id,
            author=actor_user(actor),
            body=body,
            body_html=rich_text.render(body, {person.get_username() for person in mentioned}),
        )
        comment.artifacts.set(artifacts)
        comment.mentions.set(mentioned)
        CommentRevision.objects.create(
            comment=comment, revision=1, body=body, artifact_ids=[a.pk for a in artifacts], author=actor_user(actor)
        )
        audit_record(actor=actor, action="comment.create", obj=comment, after=_snapshot(comment, artifacts, mentioned))
        _tell(comment, actor, events.COMMENT, mentioned)
        if mentioned:
            _tell(comment, actor, events.MENTION, mentioned)
    return comment


def comment_edit(*, actor: Actor, comment: Comment, draft: CommentDraft) -> Comment:
    """Change a comment's text or linked artifacts (`vendor.inputs.CommentDraft`, the whole comment as it is
    to be); the text it replaces stays as a revision.

    Preconditions: the actor wrote the comment and may still write in the thread (ForbiddenError) and see it
    (NotFoundError); the rule of `comment_create` for the artifacts. People mentioned for the first
    time are told; one audit row with before and after; nothing when nothing changed.
    """
    _thread_question(actor, comment.question)
    if not may_edit_comment(actor_user(actor), comment):
        raise ForbiddenError(gettext_noop("Only its author edits a comment."))
    body = draft.body
    artifacts = _attachments(comment.organisation_id, draft.artifacts)
    mentioned = _mentioned(body, comment.organisation_id)
    with transaction.atomic():
        locked = lock_rows(Comment.objects).filter(pk=comment.pk).first()
        if locked is None:
            raise NotFoundError(gettext_noop("Comment %(comment)s not found."), params={"comment": comment.pk})
        locked.question = comment.question
        earlier_artifacts = list(locked.artifacts.order_by("pk"))
        earlier_mentions = list(locked.mentions.all())
        if locked.body == body and [a.pk for a in earlier_artifacts] == sorted(a.pk for a in artifacts):
            return locked
        before = _snapshot(locked, earlier_artifacts, earlier_mentions)
        locked.body = body
        locked.body_html = rich_text.render(body, {person.get_username() for person in mentioned})
        locked.revision += 1
        locked.edited_at = timezone.now()
        locked.save(update_fields=["body", "body_html", "revision", "edited_at"])
        locked.artifacts.set(artifacts)
        locked.mentions.set(mentioned)
        CommentRevision.objects.create(
            comment=locked,
            revision=locked.revision,
            body=body,
            artifact_ids=[a.pk for a in artifacts],
            author=actor_user(actor),
        )
        audit_record(
            actor=actor,
            action="comment.edit",
            obj=locked,
            before=before,
            after=_snapshot(locked, artifacts, mentioned),
        )
        newly = [person for person in mentioned if person not in earlier_mentions]
        if newly:
            _tell(locked, actor, events.MENTION, newly)
    return locked
