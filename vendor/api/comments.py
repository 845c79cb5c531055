"""A question's thread over the API: the same comments the question page shows, for the team and the vendor the
question is put to."""

from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from calculet.api import Api, StrictSerializer
from calculet.errors import ForbiddenError
from vendor.access import may_discuss, object_for_user
from vendor.inputs import ATTACHMENTS_MAX, COMMENT_MAX_CHARS, CommentDraft
from vendor.models import Artifact, Comment, Question
from vendor.selectors import comment_list
from vendor.services.comments import comment_create, comment_edit


class CommentArtifactSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=Artifact.KINDS)
    file_name = serializers.CharField()
    version = serializers.CharField()
    state = serializers.ChoiceField(choices=Artifact.STATES)


class CommentRevisionSerializer(serializers.Serializer):
    revision = serializers.IntegerField()
    body = serializers.CharField()
    artifacts = serializers.ListField(child=serializers.IntegerField(), source="artifact_ids")
    author = serializers.CharField(source="author.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()


class CommentOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    question = serializers.CharField(source="question.code")
    organisation = serializers.CharField(
        source="organisation.slug", allow_null=True, default=None, help_text="The vendor the thread is with."
    )
    author = serializers.CharField(source="author.username", allow_null=True, default=None)
    body = serializers.CharField(help_text="Markdown, as written.")
    body_html = serializers.CharField(help_text="The body rendered and sanitised: no raw HTML passes.")
    artifacts = CommentArtifactSerializer(many=True)
    mentions = serializers.SerializerMethodField()
    revision = serializers.IntegerField(help_text="1 until the comment is edited.")
    created_at = serializers.DateTimeField()
    edited_at = serializers.DateTimeField(allow_null=True)
    revisions = CommentRevisionSerializer(many=True, help_text="Every version, the first as written.")

    @extend_schema_field(serializers.ListField(child=serializers.CharField(), help_text="The people it mentions."))
    def get_mentions(self, comment) -> list[str]:
        return [person.get_username() for person in comment.mentions.all()]


class CommentInputSerializer(StrictSerializer):
    body = serializers.CharField(max_length=COMMENT_MAX_CHARS, help_text="Markdown; @username mentions a person.")
    artifacts = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        max_length=ATTACHMENTS_MAX,
        help_text="Ids of artifacts of the question's vendor to link.",
    )


def _check_may_discuss(user) -> None:
    """Before reading the body, so a reader who may not write is told so whatever they sent."""
    if not may_discuss(user):
        raise ForbiddenError(gettext_noop("Only the team's PMs and the question's vendor write in its thread."))


def _question(user, code: str) -> Question:
    return object_for_user(user, Question.objects, code=code.upper())


class CommentListApi(Api, ListAPIView):
    """A question's thread, oldest first."""

    queryset = Comment.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = CommentOutputSerializer
    filterset_fields: list[str] = []
    ordering_fields = ["created_at"]

    def get_queryset(self):
        return comment_list(user=self.request.user, question=_question(self.request.user, self.kwargs["code"]))

    @extend_schema(request=CommentInputSerializer, responses={201: CommentOutputSerializer})
    def post(self, request, code):
        """Write in the thread (the team's PMs, and the engineers of the vendor the question is put to)."""
        question = _question(request.user, code)
        _check_may_discuss(request.user)
        serializer = CommentInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        draft = CommentDraft(body=data["body"], artifacts=tuple(data.get("artifacts", [])))
        comment = comment_create(actor=request.user, question=question, draft=draft)
        comment = comment_list(user=request.user, question=question).get(pk=comment.pk)
        return Response(CommentOutputSerializer(comment).data, status=status.HTTP_201_CREATED)


class CommentDetailApi(Api):
    @extend_schema(responses=CommentOutputSerializer)
    def get(self, request, code, comment_id):
        question = _question(request.user, code)
        comment = object_for_user(request.user, comment_list(user=request.user, question=question), pk=comment_id)
        return Response(CommentOutputSerializer(comment).data)

    @extend_schema(request=CommentInputSerializer, responses=CommentOutputSerializer)
    def patch(self, request, code, comment_id):
        """Edit your own comment: the text it replaces stays as a revision. Either field may be left out; given,
        `artifacts` replaces the links."""
        question = _question(request.user, code)
        comment = object_for_user(request.user, comment_list(user=request.user, question=question), pk=comment_id)
        _check_may_discuss(request.user)
        serializer = CommentInputSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        artifact_ids = data["artifacts"] if "artifacts" in data else [a.pk for a in comment.artifacts.all()]
        draft = CommentDraft(body=data.get("body", comment.body), artifacts=tuple(artifact_ids))
        comment_edit(actor=request.user, comment=comment, draft=draft)
        comment = comment_list(user=request.user, question=question).get(pk=comment.pk)
        return Response(CommentOutputSerializer(comment).data)
