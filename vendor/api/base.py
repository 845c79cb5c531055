"""What every API view shares: the error format in the schema, a body size limit, strict input."""

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from calculet.api import PayloadTooLargeError

JSON_BODY_MAX_BYTES = 1024 * 1024
ERROR_STATUSES_READ = ["400", "401", "403", "404", "429"]
ERROR_STATUSES_WRITE = ["400", "401", "403", "404", "409", "413", "429"]


class ErrorItemSerializer(serializers.Serializer):
    field = serializers.CharField(
        allow_null=True, help_text="The input at fault: a body field, a query parameter or a header."
    )
    code = serializers.CharField()
    message = serializers.CharField()


class ReasonSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    errors = ErrorItemSerializer(many=True)
    reasons = ReasonSerializer(many=True, required=False)


class ApiSchema(AutoSchema):
    """Documents the error format on every operation, so clients (and the fuzzer) know each 4xx's shape."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        statuses = ERROR_STATUSES_READ if self.method in ("GET", "HEAD") else ERROR_STATUSES_WRITE
        for status_code in [*statuses, *getattr(self.view, "error_statuses", [])]:
            if status_code not in responses:
                responses[status_code] = self._get_response_for_code(
                    ErrorSerializer, status_code, media_types=["application/json"], direction=direction
                )
        return responses


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 200


class Api(APIView):
    """Base of every API view. Bodies larger than `max_body_bytes` are refused before they are read."""

    schema = ApiSchema()
    pagination_class = Pagination
    max_body_bytes: int | None = JSON_BODY_MAX_BYTES
    error_statuses: list[str] = []

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if self.max_body_bytes is None:
            return
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > self.max_body_bytes:
            raise PayloadTooLargeError(f"The request body may hold at most {self.max_body_bytes} bytes.", field="body")


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not know, so a misspelt field is an error rather than silently dropped."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class BinaryRenderer(JSONRenderer):
    """Lets a download be negotiated for `Accept: application/octet-stream`; its errors still render as JSON."""

    media_type = "application/octet-stream"
    format = "bin"


def plain(value):
    """Validated serializer data as plain dicts and lists, for the service layer."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value
