"""The REST API's evidence endpoints: the evidence register and the capabilities (read only; a status moves
only through the promotion gate, `acceptance.api.promotions`)."""

import django_filters
from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from calculet.api import Api
from calculet.errors import NotFoundError
from evidence.grades import GRADE_CHOICES, STATUS_CHOICES
from evidence.models import Capability, EvidenceItem
from evidence.selectors import capability_get, capability_list, evidence_list


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
    detail = serializers.JSONField(
        help_text="What a static check found and looked at (findings, files, output tails); {} for other rows."
    )
    defect = serializers.BooleanField()
    limitation = serializers.BooleanField()

    def get_grades(self, item) -> list[str]:
        return [grade.grade for grade in item.grades.all()]


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
        return evidence_list(user=self.request.user)


class EvidenceDetailApi(Api):
    @extend_schema(responses=EvidenceOutputSerializer)
    def get(self, request, code):
        item = evidence_list(user=request.user).filter(code=code).first()
        if item is None:
            raise NotFoundError(gettext_noop("Evidence %(code)s not found."), params={"code": code})
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


class CapabilityFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)
    question = django_filters.CharFilter(
        method="linked_to", help_text="A question's code: the capabilities it links, if it is one you may see."
    )

    class Meta:
        model = Capability
        fields = ["status", "pinned", "question"]

    def linked_to(self, queryset, name, value):
        return queryset.filter(pk__in=capability_list(user=self.request.user, question=value).values("pk"))


class CapabilityListApi(Api, ListAPIView):
    """Capabilities and their C status. A status moves only by POSTing a promotion."""

    serializer_class = CapabilityOutputSerializer
    filterset_class = CapabilityFilter
    ordering_fields = ["position", "slug", "status"]

    def get_queryset(self):
        return capability_list(user=self.request.user)


class CapabilityDetailApi(Api):
    """Read only: PUT and PATCH are not allowed; a status changes only through the promotion gate."""

    @extend_schema(responses=CapabilityOutputSerializer)
    def get(self, request, slug):
        return Response(CapabilityOutputSerializer(capability_get(user=request.user, slug=slug)).data)
