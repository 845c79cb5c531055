"""Evidence items and capabilities (read), the promotion gate (POST only), the audit log (PMs)."""

import datetime

import django_filters
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from acceptance.models import PromotionAttempt, Run
from acceptance.services import capability_promote
from calculet.api import Api, ReasonSerializer, StrictSerializer
from calculet.errors import ConflictError, ForbiddenError, NotFoundError
from calculet.models import AuditEntry
from evidence.grades import GRADE_CHOICES, STATUS_CHOICES
from evidence.models import Capability, EvidenceItem, SourceReference
from vendor.access import questions_for_user, user_is_pm, user_sees_all


class EvidenceStatusSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=STATUS_CHOICES)
    qualifier = serializers.CharField()


class SourceReferenceSerializer(serializers.Serializer):
    raw = serializers.CharField()
    alias = serializers.CharField(source="alias.name", allow_null=True, default=None)
    path = serializers.CharField()
    lines = serializers.CharField()
    line_ranges = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))
    same_file = serializers.BooleanField()


class EvidenceOutputSerializer(serializers.Serializer):
    code = serializers.CharField()
    table = serializers.CharField(source="table.prefix", allow_null=True, default=None)
    section = serializers.IntegerField(source="table.section", allow_null=True, default=None)
    origin = serializers.CharField()
    conclusion = serializers.CharField()
    source_text = serializers.CharField()
    grade_text = serializers.CharField(help_text="The grade/status cell as the document writes it.")
    grades = serializers.SerializerMethodField(help_text="Evidence grades E0–E4: how strong the evidence is.")
    statuses = EvidenceStatusSerializer(many=True, help_text="Capability statuses C0–C4 the row names.")
    sources = SourceReferenceSerializer(many=True)
    explanation = serializers.CharField()
    defect = serializers.BooleanField()
    limitation = serializers.BooleanField()

    def get_grades(self, item) -> list[str]:
        return [grade.grade for grade in item.grades.all()]


def evidence_list():
    return EvidenceItem.objects.select_related("table").prefetch_related(
        "grades", "statuses", Prefetch("sources", queryset=SourceReference.objects.select_related("alias"))
    )


class EvidenceFilter(django_filters.FilterSet):
    table = django_filters.CharFilter(field_name="table__prefix")
    grade = django_filters.ChoiceFilter(field_name="grades__grade", choices=GRADE_CHOICES, distinct=True)
    status = django_filters.ChoiceFilter(field_name="statuses__status", choices=STATUS_CHOICES, distinct=True)

    class Meta:
        model = EvidenceItem
        fields = ["table", "grade", "status", "origin", "defect", "limitation"]


class EvidenceListApi(Api, ListAPIView):
    """The evidence register: grades (E) and statuses (C) are separate fields."""

    serializer_class = EvidenceOutputSerializer
    filterset_class = EvidenceFilter
    ordering_fields = ["code", "position"]

    def get_queryset(self):
        return evidence_list()


class EvidenceDetailApi(Api):
    @extend_schema(responses=EvidenceOutputSerializer)
    def get(self, request, code):
        item = evidence_list().filter(code=code).first()
        if item is None:
            raise NotFoundError(f"Evidence {code} not found.")
        return Response(EvidenceOutputSerializer(item).data)


class CapabilityOutputSerializer(serializers.Serializer):
    slug = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    status = serializers.ChoiceField(choices=STATUS_CHOICES, help_text="Changes only through promotions.")
    pinned = serializers.BooleanField()
    pinned_status = serializers.CharField()
    scope = serializers.CharField()
    status_changed_at = serializers.DateTimeField(allow_null=True)
    questions = serializers.SerializerMethodField()
    evidence = serializers.SerializerMethodField()

    def get_questions(self, capability) -> list[str]:
        return [question.code for question in capability.questions.all()]

    def get_evidence(self, capability) -> list[str]:
        return [item.code for item in capability.evidence.all()]


def capability_list(*, user):
    """Capabilities, each with the questions the user may see and its evidence codes."""
    return Capability.objects.prefetch_related(
        Prefetch("questions", queryset=questions_for_user(user).only("id", "code").order_by("number")),
        Prefetch("evidence", queryset=EvidenceItem.objects.only("id", "code").order_by("code")),
    )


class CapabilityFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)
    question = django_filters.CharFilter(field_name="questions__code", distinct=True)

    class Meta:
        model = Capability
        fields = ["status", "pinned", "question"]


class CapabilityListApi(Api, ListAPIView):
    """Capabilities and their C status. A status moves only by POSTing a promotion."""

    serializer_class = CapabilityOutputSerializer
    filterset_class = CapabilityFilter
    ordering_fields = ["position", "slug", "status"]

    def get_queryset(self):
        return capability_list(user=self.request.user)


def capability_get(user, slug: str) -> Capability:
    capability = capability_list(user=user).filter(slug=slug).first()
    if capability is None:
        raise NotFoundError(f"Capability {slug} not found.")
    return capability


class CapabilityDetailApi(Api):
    """Read only: PUT and PATCH are not allowed; a status changes only through the promotion gate."""

    @extend_schema(responses=CapabilityOutputSerializer)
    def get(self, request, slug):
        return Response(CapabilityOutputSerializer(capability_get(request.user, slug)).data)


class PromotionInputSerializer(StrictSerializer):
    to = serializers.ChoiceField(choices=STATUS_CHOICES, help_text="The status asked for, C0–C4.")
    reason = serializers.CharField(allow_blank=True, required=False, max_length=2000, help_text="Required to demote.")


class PromotionOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    capability = serializers.CharField(source="capability.slug")
    actor = serializers.CharField(source="actor_label")
    from_status = serializers.CharField()
    to_status = serializers.CharField()
    allowed = serializers.BooleanField()
    reason = serializers.CharField()
    reasons = ReasonSerializer(many=True, help_text="Why the gate blocked it.")
    policy_version = serializers.CharField()
    answer = serializers.IntegerField(source="answer_id", allow_null=True)
    runs = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_runs(self, attempt) -> list[int]:
        return sorted(run.pk for run in attempt.runs.all())


class PromotionListApi(Api, ListAPIView):
    """Every attempt to move the capability's status, allowed or blocked (integration team only)."""

    queryset = PromotionAttempt.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = PromotionOutputSerializer
    filterset_fields = ["allowed"]
    ordering_fields = ["id", "created_at"]
    ordering = ["-id"]

    def get_queryset(self):
        capability = capability_get(self.request.user, self.kwargs["slug"])
        if not user_sees_all(self.request.user):
            raise ForbiddenError("Promotion attempts are for the integration team.")
        return (
            PromotionAttempt.objects.filter(capability=capability)
            .select_related("capability")
            .prefetch_related(Prefetch("runs", queryset=Run.objects.only("id")))
        )

    @extend_schema(request=PromotionInputSerializer, responses={201: PromotionOutputSerializer})
    def post(self, request, slug):
        """Ask the promotion gate to move the status: 201 when it moved, 409 with the reasons when blocked."""
        capability = capability_get(request.user, slug)
        serializer = PromotionInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        attempt = capability_promote(
            actor=request.user,
            capability=capability,
            to_status=serializer.validated_data["to"],
            reason=serializer.validated_data.get("reason", ""),
        )
        if not attempt.allowed:
            raise ConflictError(
                f"The gate blocked {capability.slug} from moving to {attempt.to_status}; see reasons.",
                field="to",
                code="blocked",
                reasons=attempt.reasons,
            )
        return Response(PromotionOutputSerializer(attempt).data, status=status.HTTP_201_CREATED)


class AuditOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField(source="actor_label")
    action = serializers.CharField()
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    hash = serializers.CharField()


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 date and time, turned into UTC: PostgreSQL refuses offsets Python accepts (+21:46)."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return None
        try:
            return value.astimezone(datetime.UTC)
        except OverflowError as error:
            raise ValidationError("The date and time is out of range.", code="invalid") from error


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class AuditFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_label")
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = ["action", "object_type", "object_id", "actor", "created_after", "created_before"]


class AuditListApi(Api, ListAPIView):
    """The append-only audit log, newest first (PMs only)."""

    queryset = AuditEntry.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = AuditOutputSerializer
    filterset_class = AuditFilter
    ordering_fields = ["id", "created_at"]
    ordering = ["-id"]

    def get_queryset(self):
        if not user_is_pm(self.request.user):
            raise ForbiddenError("Only a PM reads the audit log.")
        return AuditEntry.objects.all()
