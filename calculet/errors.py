"""The errors a business rule raises. Services raise them; the API and the pages turn them into responses."""

import errno
from http import HTTPStatus

from django.http import Http404


class DomainError(Exception):
    """A business rule refused the request. Subclasses pick the HTTP status."""

    status_code: int = HTTPStatus.BAD_REQUEST
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

    status_code = HTTPStatus.NOT_FOUND
    code = "not_found"


class ConflictError(DomainError):
    status_code = HTTPStatus.CONFLICT
    code = "conflict"


class ForbiddenError(DomainError):
    status_code = HTTPStatus.FORBIDDEN
    code = "permission_denied"


class PayloadTooLargeError(DomainError):
    status_code = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    code = "too_large"


# The errors of a write that found no room: the disk is full, or the quota is.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class StorageFullError(DomainError):
    """The disk holding artifacts and uploads is full; nothing of the request was kept."""

    status_code = HTTPStatus.INSUFFICIENT_STORAGE
    code = "insufficient_storage"
