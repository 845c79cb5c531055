import django_filters
from django.utils import timezone
from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from acceptance.models import Run
from acceptance.selectors import (
    NOBODY,
    SEARCH_MAX_CHARS,
    QuestionFilters,
    question_chains,
    questions_filter,
    questions_with_proof,
)
from calculet.api import Api, StrictSerializer
from calculet.errors import DomainError, ForbiddenError
from evidence.models import Capability
from vendor import due, states
from vendor.access import may_act_as_pm, object_for_user
from vendor.inputs import QuestionChanges
from vendor.models import Deliverable, Question, Section
from vendor.selectors import active_users, due_soon_days, organisations
from vendor.services.questions import STATE_REASON_MAX_CHARS, question_update


class CapabilityRefSerializer(serializers.Serializer):
    slug = serializers.CharField()
    title = serializers.CharField()
    status = serializers.CharField()


class ChainStageSerializer(serializers.Serializer):
    stage = serializers.ChoiceField(choices=Run.STAGES)
    state = serializers.ChoiceField(choices=Run.STATES)
    run = serializers.IntegerField(allow_null=True, help_text="The stage's latest run.")


class ChainSerializer(serializers.Serializer):
    capability = serializers.CharField(allow_null=True)
    target = serializers.CharField()
    answer = serializers.IntegerField(help_text="The answer whose artifact versions the chain checks.")
    stages = ChainStageSerializer(many=True)


class DeliverableSerializer(serializers.Serializer):
    key = serializers.SlugField()
    kind = serializers.ChoiceField(choices=Deliverable.KINDS)
    title = serializers.CharField()
    state = serializers.ChoiceField(
        choices=Deliverable.STATES, help_text="owed until accepted; rejected names why in `reason`."
    )
    reason = serializers.CharField()
    decided_at = serializers.DateTimeField(allow_null=True)


class QuestionOutputSerializer(serializers.Serializer):
    code = serializers.CharField()
    number = serializers.IntegerField()
    section = serializers.CharField(source="section.code")
    section_title = serializers.CharField(source="section.title")
    question = serializers.CharField()
    acceptance = serializers.CharField()
    state = serializers.ChoiceField(choices=states.QUESTION_STATES)
    state_reason = serializers.CharField(help_text="Why the question is deferred or won't be fixed; empty otherwise.")
    priority = serializers.ChoiceField(choices=states.PRIORITIES)
    assignee = serializers.CharField(source="assignee.username", allow_null=True, default=None)
    organisation = serializers.CharField(source="organisation.slug", allow_null=True, default=None)
    due_date = serializers.DateField(allow_null=True)
    due_status = serializers.SerializerMethodField()
    capabilities = CapabilityRefSerializer(many=True)
    deliverables = DeliverableSerializer(
        many=True, help_text="What the answer must deliver; the question closes when every one is accepted."
    )
    chains = serializers.SerializerMethodField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(ChainSerializer(many=True))
    def get_chains(self, question) -> list:
        return self.context["chains"].get(question.pk, [])

    @extend_schema_field(
        serializers.ChoiceField(
            choices=[due.OVERDUE, due.DUE_SOON],
            allow_null=True,
            help_text="overdue once the due date has passed, due_soon within QUESTION_DUE_SOON_DAYS of it; null "
            "without a due date, otherwise, or once the question is closed or deferred.",
        )
    )
    def get_due_status(self, question) -> str | None:
        return due.due_status(question.due_date, question.state, timezone.localdate(), due_soon_days()) or None


class QuestionFilter(django_filters.FilterSet):
    """The list's query parameters: parsed and documented here, applied by the selector the question page
    uses too (`acceptance.selectors.questions_filter`), so each name means the same on both."""

    q = django_filters.CharFilter(
        max_length=SEARCH_MAX_CHARS,
        help_text="Free text, in the code, the question, its acceptance, its section's title or theme and the "
        "answers' summaries.",
    )
    state = django_filters.ChoiceFilter(choices=states.QUESTION_STATES)
    priority = django_filters.ChoiceFilter(choices=states.PRIORITIES)
    # Unknown sections and capabilities are refused (400 naming the filter), not read as "matches nothing".
    section = django_filters.ModelChoiceFilter(
        field_name="section", to_field_name="code", queryset=Section.objects.all(), help_text="A section code (12.7)."
    )
    organisation = django_filters.CharFilter(field_name="organisation__slug")
    assignee = django_filters.CharFilter(help_text=f"A username, or {NOBODY!r} for questions assigned to nobody.")
    capability = django_filters.ModelChoiceFilter(
        field_name="capabilities",
        to_field_name="slug",
        queryset=Capability.objects.all(),
        distinct=True,
        help_text="A capability slug.",
    )
    due = django_filters.ChoiceFilter(
        choices=due.DUE_STATUSES, help_text="overdue, due_soon, or none (open, no due date)."
    )
    # A choice, not a boolean filter: that one reads an unknown value as "no filter" instead of refusing it.
    owes = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        help_text="true: open questions that still owe a deliverable (owed or rejected), whatever their state.",
    )

    class Meta:
        model = Question
        fields = ["q", "state", "priority", "section", "organisation", "assignee", "capability", "due", "owes"]

    def filter_queryset(self, queryset):
        data = self.form.cleaned_data
        filters = QuestionFilters(
            text=(data.get("q") or "").strip(),
            section=data["section"].code if data.get("section") else "",
            state=data.get("state") or "",
            priority=data.get("priority") or "",
            due=data.get("due") or "",
            organisation=data.get("organisation") or "",
            assignee=data.get("assignee") or "",
            capability=data["capability"].slug if data.get("capability") else "",
            owes=data.get("owes") or "",
        )
        return questions_filter(queryset, filters)


class QuestionListApi(Api, ListAPIView):
    """The questions you may see: all of them for the integration team, those put to your organisation for a vendor."""

    serializer_class = QuestionOutputSerializer
    filterset_class = QuestionFilter
    ordering_fields = ["number", "priority", "due_date", "state", "updated_at"]
    ordering = ["number"]

    def get_queryset(self):
        return questions_with_proof(user=self.request.user)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        chains = question_chains(user=request.user, questions=page)
        return self.get_paginated_response(QuestionOutputSerializer(page, many=True, context={"chains": chains}).data)


def _question_output(user, question) -> dict:
    question = questions_with_proof(user=user).get(pk=question.pk)
    chains = question_chains(user=user, questions=[question])
    return QuestionOutputSerializer(question, context={"chains": chains}).data


class QuestionUpdateInputSerializer(StrictSerializer):
    assignee = serializers.CharField(allow_null=True, required=False, help_text="A username, or null to unassign.")
    priority = serializers.ChoiceField(choices=states.PRIORITIES, required=False)
    due_date = serializers.DateField(allow_null=True, required=False)
    state = serializers.ChoiceField(
        choices=states.QUESTION_STATES,
        required=False,
        help_text="closed only when every deliverable is accepted; deferred and wont_fix need a state_reason.",
    )
    state_reason = serializers.CharField(allow_blank=True, required=False, max_length=STATE_REASON_MAX_CHARS)
    organisation = serializers.CharField(
        allow_null=True, required=False, help_text="The slug of the vendor organisation the question is put to."
    )


def _resolve_changes(data: dict) -> QuestionChanges:
    """The validated body as the service takes it: the organisation's slug and the assignee's username
    resolved to their rows."""
    changes = dict(data)
    if changes.get("organisation") is not None:
        organisation = organisations().filter(slug=changes["organisation"]).first()
        if organisation is None:
            raise DomainError(
                gettext_noop("Organisation %(organisation)s not found."),
                field="organisation",
                code="not_found",
                params={"organisation": changes["organisation"]},
            )
        changes["organisation"] = organisation
    if changes.get("assignee") is not None:
        user = active_users().filter(username=changes["assignee"]).first()
        if user is None:
            raise DomainError(
                gettext_noop("User %(assignee)s not found."),
                field="assignee",
                code="not_found",
                params={"assignee": changes["assignee"]},
            )
        changes["assignee"] = user
    return QuestionChanges(**changes)


def _question(user, code: str) -> Question:
    return object_for_user(user, Question.objects, code=code.upper())


class QuestionDetailApi(Api):
    @extend_schema(responses=QuestionOutputSerializer)
    def get(self, request, code):
        return Response(_question_output(request.user, _question(request.user, code)))

    @extend_schema(request=QuestionUpdateInputSerializer, responses=QuestionOutputSerializer)
    def patch(self, request, code):
        """A PM puts the question to an organisation, assigns it, sets its priority, due date or state."""
        question = _question(request.user, code)
        if not may_act_as_pm(request.user):  # before resolving names, which would tell a vendor which exist
            raise ForbiddenError(gettext_noop("Only a PM may change a question."))
        serializer = QuestionUpdateInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        question_update(actor=request.user, question=question, changes=_resolve_changes(serializer.validated_data))
        return Response(_question_output(request.user, question))
