"""What every API view shares: one error format ({"errors": [{"field": ..., "code": ..., "message": ...}]}), the
error format in the schema, a body size limit, strict input."""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils.translation import gettext, gettext_noop
from drf_spectacular.contrib.django_filters import DjangoFilterExtension
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import exceptions, serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from calculet import sentences
from calculet.errors import NO_SPACE, DomainError, FieldErrors, PayloadTooLargeError, StorageFullError
from calculet.query import (
    TEXT_PATTERN,
    UNKNOWN_PARAMETER,
    Pagination,
    StrictFilterBackend,
    check_query_parameters,
    query_parameter_names,
)

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


class Api(APIView):
    """Base of every API view. Bodies larger than `max_body_bytes` are refused before they are read; a query
    parameter the operation does not read (a list's pagination, filters and ordering, and the view's own
    `query_parameters`) is refused, as is one given twice."""

    schema = ApiSchema()
    pagination_class = Pagination
    max_body_bytes: int | None = JSON_BODY_MAX_BYTES
    error_statuses: list[str] = []
    query_parameters: tuple[str, ...] = ()

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response) and response.status_code >= 400:
            # An error is JSON whatever the client negotiated (a download's `?format=bin` included).
            response.accepted_renderer = JSONRenderer()
            response.accepted_media_type = JSONRenderer.media_type
        return response

    def perform_content_negotiation(self, request, force=False):
        try:
            return super().perform_content_negotiation(request, force)
        except Http404 as error:
            # DRF's answer to a `?format=` no renderer has: a query value like any other, a 400 naming it.
            if "format" not in query_parameter_names(self, request.method):
                raise serializers.ValidationError({"format": [UNKNOWN_PARAMETER]}) from error
            raise DomainError(
                gettext_noop("One of %(formats)s."),
                field="format",
                params={"formats": ", ".join(renderer.format for renderer in self.get_renderers())},
            ) from error

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        check_query_parameters(self, request)
        if self.max_body_bytes is None:
            return
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > self.max_body_bytes:
            raise PayloadTooLargeError(
                gettext_noop("The request body may hold at most %(limit)s bytes."),
                field="body",
                params={"limit": self.max_body_bytes},
            )


# The JSON type each kind of field takes, checked before DRF's fields would coerce a value ("16" to 16, true
# to 1.0, 5 to "5"). The first match in this order wins: BooleanField before the numbers, as bool is an int.
_JSON_TYPES: list[tuple[type, tuple[type, ...], str]] = [
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.DecimalField, (int, float), "a number"),
    (serializers.CharField, (str,), "a string"),
    (serializers.DateField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a string"),
    (serializers.ListField, (list,), "an array"),
    (serializers.DictField, (dict,), "an object"),
]
_JSON_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}


def _json_type_name(value) -> str:
    if value is None:
        return "null"
    return _JSON_NAMES.get(type(value), "an object")


def _expected_json_type(field) -> tuple[tuple[type, ...], str] | None:
    if isinstance(field, serializers.ChoiceField):  # its choices say which type its values are
        kinds = {type(choice) for choice in field.choices}
        return ((str,), "a string") if kinds == {str} else None
    for field_class, types, name in _JSON_TYPES:
        if isinstance(field, field_class):
            return types, name
    return None


def mistyped(field, value):
    """Why `value` is not of the JSON type `field` takes (None when it is): a message, or for a list's or a
    map's items their messages by index or key, as DRF reports them."""
    if value is None:
        return None  # DRF's own allow_null check reports it
    expected = _expected_json_type(field)
    if expected is None:
        return None
    types, name = expected
    if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
        # DRF's own codes for a value it cannot read, so clients see one code whichever check refused it.
        code = "invalid_choice" if isinstance(field, serializers.ChoiceField) else "invalid"
        return serializers.ErrorDetail(f"Expected {name}, got {_json_type_name(value)}.", code=code)
    items = {}
    if isinstance(field, serializers.ListField):
        items = {index: mistyped(field.child, item) for index, item in enumerate(value)}
    elif isinstance(field, serializers.DictField):
        items = {key: mistyped(field.child, item) for key, item in value.items()}
    wrong = {key: [error] if isinstance(error, str) else error for key, error in items.items() if error}
    return wrong or None


class StrictSerializer(serializers.Serializer):
    """The base of every input serializer: refuses keys it does not know, so a misspelt field is an error
    rather than silently dropped, and values of another JSON type than the field's (no coercion of "16" to an
    integer, of true to a number, of a number to a string); nested strict serializers do the same. Every
    field's error is reported at once, those DRF's own checks find included."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            return super().to_internal_value(data)
        errors = {name: [gettext("Unknown field.")] for name in sorted(set(data) - set(self.fields))}
        for field in self._writable_fields:
            if field.field_name in data:
                error = mistyped(field, data[field.field_name])
                if error:
                    errors[field.field_name] = [error] if isinstance(error, str) else error
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            errors = {**error.detail, **errors}
        if errors:
            raise serializers.ValidationError(errors)
        return value


class StrictSerializerSchema(OpenApiSerializerExtension):
    """In the schema, a strict serializer's object refuses unknown keys (`additionalProperties: false`), as the
    serializer does, so a generated client cannot send one."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False}


class StrictFilterSchema(DjangoFilterExtension):
    """In the schema, a text filter takes no NUL character, as its form field does (a 400 naming it), so a
    client or a fuzzer does not count one as valid."""

    target_class = StrictFilterBackend
    match_subclasses = True
    priority = 1

    def resolve_filter_field(self, auto_schema, model, filterset_class, field_name, filter_field):
        parameters = super().resolve_filter_field(auto_schema, model, filterset_class, field_name, filter_field)
        for parameter in parameters:
            schema = parameter["schema"]
            if schema.get("type") == "string" and not {"enum", "pattern", "format"} & set(schema):
                schema["pattern"] = TEXT_PATTERN
        return parameters


class BinaryRenderer(JSONRenderer):
    """Lets a download be negotiated for `Accept: application/octet-stream`; its errors are served as JSON
    (`Api.finalize_response`)."""

    media_type = "application/octet-stream"
    format = "bin"


def plain(value):
    """Validated serializer data as plain dicts and lists, for the service layer."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def _flatten(detail, field=None):
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, int):  # a ListField's or DictField's item
                name = f"{field}[{key}]"
            elif field is None:
                name = key
            else:
                name = f"{field}.{key}"
            if key == "non_field_errors":
                name = field
            yield from _flatten(value, name)
    elif isinstance(detail, list):
        for index, value in enumerate(detail):
            if isinstance(value, dict | list) and field is not None:
                yield from _flatten(value, f"{field}[{index}]")
            else:
                yield from _flatten(value, field)
    else:
        yield {"field": field, "code": getattr(detail, "code", "invalid"), "message": str(detail)}


def exception_handler(exc, context):
    if isinstance(exc, OSError) and exc.errno in NO_SPACE:
        # Django spooling a multipart file to FILE_UPLOAD_TEMP_DIR found the disk full, before any view ran.
        exc = StorageFullError(gettext_noop("The artifact store is full; nothing of the file was kept."))
    if isinstance(exc, FieldErrors):
        errors = [{"field": field, "code": exc.code, "message": message} for field, message in exc.messages().items()]
        return Response({"errors": errors}, status=exc.status_code)
    if isinstance(exc, DomainError):
        # The sentences in the client's language (Accept-Language, English by default); codes and fields as stored.
        body = {"errors": [{"field": exc.field, "code": exc.code, "message": exc.message}]}
        if exc.reasons:
            body["reasons"] = [{"code": item["code"], "message": sentences.reason_text(item)} for item in exc.reasons]
        return Response(body, status=exc.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"errors": list(_flatten(response.data))}
    else:
        response.data = {"errors": [{"field": None, "code": exc.get_codes(), "message": str(exc.detail)}]}
    return response
