"""The errors a business rule raises. Services raise them; the API and the pages turn them into responses."""

from django.http import Http404
from rest_framework import status


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
