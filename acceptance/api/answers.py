import django_filters
from django.utils.translation import gettext
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from acceptance.limits import Bounds, threshold_bounds, tolerance_bounds
from acceptance.services import answer_submit
from calculet.api import Api, StrictSerializer
from vendor.access import object_for_user
from vendor.claim import COMPATIBILITY_KEYS, ELEMENTS, VERSION_PATTERN
from vendor.inputs import (
    ERROR_CODE_RANGE,
    MAX_COMMAND,
    MAX_COMPATIBILITY,
    MAX_ERROR_PATH_TEXT,
    MAX_LIST,
    MAX_TEXT,
    MAX_VERSION,
    NAME_PATTERN,
    NAME_RULE,
    AnswerDraft,
    ErrorPath,
)
from vendor.models import Answer, Question
from vendor.selectors import answer_list


class MinimalExampleSerializer(StrictSerializer):
    artifact = serializers.IntegerField(allow_null=True, required=False, help_text="An artifact id.")
    command = serializers.CharField(allow_blank=True, required=False, max_length=MAX_COMMAND)
    description = serializers.CharField(allow_blank=True, required=False, max_length=MAX_TEXT)


class ErrorPathSerializer(StrictSerializer):
    scenario = serializers.CharField(max_length=MAX_ERROR_PATH_TEXT)
    expect_code = serializers.IntegerField(min_value=ERROR_CODE_RANGE[0], max_value=ERROR_CODE_RANGE[1])
    recovery = serializers.CharField(allow_blank=True, required=False, max_length=MAX_ERROR_PATH_TEXT)


def _named_numbers(numbers: dict) -> dict:
    """A tolerance's or a threshold's name is a plain identifier: the error names the map, not the odd key."""
    if any(not NAME_PATTERN.match(name) for name in numbers):
        raise serializers.ValidationError(NAME_RULE)
    return numbers


def _limits_schema(bounds: dict[str, Bounds], description: str) -> dict:
    """The schema of a map of limits: the names acceptance.limits knows, each with its bounds, nothing else."""
    properties = {}
    for name, allowed in bounds.items():
        number = int if allowed.whole else float
        declared: dict[str, object] = {"type": "integer" if allowed.whole else "number"}
        if allowed.low is not None:
            declared["minimum"] = number(allowed.low)
        if allowed.high is not None:
            declared["maximum"] = number(allowed.high)
        properties[name] = declared
    return {"type": "object", "properties": properties, "additionalProperties": False, "description": description}


class LimitField(serializers.FloatField):
    """A limit's value as the JSON parser read it: a whole number stays an integer (so a whole-number limit
    is stored as one, `16` and `16.0` alike), any other number is a float. Shown the same way: a whole value
    an older answer stored as a float reads as the integer."""

    def to_internal_value(self, data):
        number = super().to_internal_value(data)  # the number checks, and min_value
        return data if isinstance(data, int) and not isinstance(data, bool) else number

    def to_representation(self, value):
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value if isinstance(value, int) else super().to_representation(value)


@extend_schema_field(
    _limits_schema(
        tolerance_bounds(),
        "Golden tolerances, for every compared tensor or for one (`<tensor>.<name>`); each may only tighten its "
        "default (docs/acceptance.md).",
    )
)
class TolerancesField(serializers.DictField):
    child = LimitField(min_value=0)


@extend_schema_field(
    _limits_schema(
        threshold_bounds(),
        "The soak's limits, and probe thresholds as `<probe>.<threshold>` for a probe of the capability's recipe; "
        "each may only tighten its default (the recipe's for a probe).",
    )
)
class ThresholdsField(serializers.DictField):
    child = LimitField()


class GoldenSerializer(StrictSerializer):
    artifacts = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=MAX_LIST)
    tolerances = TolerancesField(required=False)

    def validate_tolerances(self, tolerances: dict) -> dict:
        return _named_numbers(tolerances)


class CompatibilitySerializer(StrictSerializer):
    calrt = serializers.CharField(allow_blank=True, required=False, max_length=MAX_COMPATIBILITY)
    driver = serializers.CharField(allow_blank=True, required=False, max_length=MAX_COMPATIBILITY)
    firmware = serializers.CharField(allow_blank=True, required=False, max_length=MAX_COMPATIBILITY)
    chip = serializers.CharField(allow_blank=True, required=False, max_length=MAX_COMPATIBILITY)


class AnswerInputSerializer(StrictSerializer):
    """Section 13's six elements. Missing elements are allowed: the answer is stored incomplete."""

    deliverable = serializers.CharField(
        allow_blank=True,
        required=False,
        max_length=100,
        help_text="Key of the question's deliverable this answer delivers (see the question's `deliverables`); "
        "may be left out when the question has only one.",
    )
    summary = serializers.CharField(allow_blank=True, required=False, max_length=MAX_TEXT)
    capability = serializers.CharField(
        allow_null=True, required=False, help_text="Slug of one of the question's capabilities."
    )
    version = serializers.CharField(allow_blank=True, required=False, max_length=MAX_VERSION)
    executable_assets = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        max_length=MAX_LIST,
        help_text="Ids of your verified artifacts.",
    )
    minimal_example = MinimalExampleSerializer(required=False)
    error_paths = ErrorPathSerializer(many=True, required=False, max_length=MAX_LIST)
    golden = GoldenSerializer(required=False)
    compatibility = CompatibilitySerializer(required=False)
    thresholds = ThresholdsField(required=False)

    def validate_version(self, version: str) -> str:
        if version and not VERSION_PATTERN.match(version):
            raise serializers.ValidationError(gettext("A version looks like 1.2 or v0.7.6-rc1."))
        return version

    def validate_thresholds(self, thresholds: dict) -> dict:
        return _named_numbers(thresholds)

    def draft(self) -> AnswerDraft:
        """The validated body as the service takes it; blank texts are elements left out."""
        data = self.validated_data
        example = data.get("minimal_example", {})
        golden = data.get("golden", {})
        compatibility = data.get("compatibility", {})
        return AnswerDraft(
            deliverable=data.get("deliverable", ""),
            capability=data.get("capability") or "",
            summary=data.get("summary", ""),
            version=data.get("version", ""),
            executable_assets=tuple(data.get("executable_assets", ())),
            minimal_example_artifact=example.get("artifact"),
            minimal_example_command=example.get("command", ""),
            minimal_example_description=example.get("description", ""),
            error_paths=tuple(
                ErrorPath(path["scenario"], path["expect_code"], path.get("recovery", ""))
                for path in data.get("error_paths", ())
            ),
            golden_artifacts=tuple(golden.get("artifacts", ())),
            golden_tolerances=dict(golden.get("tolerances", {})),
            compatibility={key: compatibility[key] for key in COMPATIBILITY_KEYS if compatibility.get(key)},
            thresholds=dict(data.get("thresholds", {})),
        )


class AnswerOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    question = serializers.CharField(source="question.code")
    organisation = serializers.CharField(source="organisation.slug")
    revision = serializers.IntegerField()
    deliverable = serializers.CharField(source="deliverable.key", allow_null=True, default=None)
    author = serializers.CharField(source="author.username", allow_null=True, default=None)
    capability = serializers.CharField(source="claim.capability.slug", allow_null=True, default=None)
    summary = serializers.CharField()
    version = serializers.CharField()
    executable_assets = serializers.SerializerMethodField()
    minimal_example = serializers.SerializerMethodField()
    error_paths = serializers.ListField(child=serializers.DictField())
    golden = serializers.SerializerMethodField()
    compatibility = serializers.DictField(child=serializers.CharField())
    thresholds = serializers.DictField(child=LimitField())
    complete = serializers.BooleanField()
    missing = serializers.ListField(child=serializers.ChoiceField(choices=ELEMENTS))
    created_at = serializers.DateTimeField()

    def get_executable_assets(self, answer) -> list[int]:
        return sorted(artifact.pk for artifact in answer.executable_assets.all())

    @extend_schema_field(MinimalExampleSerializer)
    def get_minimal_example(self, answer) -> dict:
        return {
            "artifact": answer.minimal_example_artifact_id,
            "command": answer.minimal_example_command,
            "description": answer.minimal_example_description,
        }

    @extend_schema_field(GoldenSerializer)
    def get_golden(self, answer) -> dict:
        return {
            "artifacts": sorted(artifact.pk for artifact in answer.golden_artifacts.all()),
            "tolerances": answer.golden_tolerances,
        }


def _question(user, code: str) -> Question:
    return object_for_user(user, Question.objects, code=code.upper())


def _answers(user, question: Question):
    return answer_list(user=user, question=question).select_related("claim__capability")


class AnswerFilter(django_filters.FilterSet):
    organisation = django_filters.CharFilter(field_name="organisation__slug")

    class Meta:
        model = Answer
        fields = ["complete", "organisation"]


class AnswerListApi(Api, ListAPIView):
    """A question's answers, newest revision first. Each revision is immutable; a correction is a new one."""

    queryset = Answer.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = AnswerOutputSerializer
    filterset_class = AnswerFilter
    ordering_fields = ["revision", "created_at"]

    def get_queryset(self):
        question = _question(self.request.user, self.kwargs["code"])
        return _answers(self.request.user, question)

    @extend_schema(request=AnswerInputSerializer, responses={201: AnswerOutputSerializer})
    def post(self, request, code):
        """Submit a new revision of your organisation's answer (vendor engineers only)."""
        question = _question(request.user, code)
        serializer = AnswerInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        answer = answer_submit(actor=request.user, question=question, draft=serializer.draft())
        answer = _answers(request.user, question).get(pk=answer.pk)
        return Response(AnswerOutputSerializer(answer).data, status=status.HTTP_201_CREATED)


class AnswerDetailApi(Api):
    @extend_schema(responses=AnswerOutputSerializer)
    def get(self, request, code, answer_id):
        answer = object_for_user(request.user, _answers(request.user, _question(request.user, code)), pk=answer_id)
        return Response(AnswerOutputSerializer(answer).data)
