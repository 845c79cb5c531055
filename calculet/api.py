"""One error format for the whole API: {"errors": [{"field": ..., "code": ..., "message": ...}]}."""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class DomainError(Exception):
    """A business rule refused the request. Subclasses pick the HTTP status."""

    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None, reasons: list | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code
        self.reasons = reasons or []


class NotFoundError(DomainError, Http404):
    """Missing and not-yours alike. Also an Http404, so plain Django views answer 404 too."""

    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"


class ConflictError(DomainError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class ForbiddenError(DomainError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "permission_denied"


class PayloadTooLargeError(DomainError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "too_large"


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
    if isinstance(exc, DomainError):
        body = {"errors": [{"field": exc.field, "code": exc.code, "message": exc.message}]}
        if exc.reasons:
            body["reasons"] = exc.reasons
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
