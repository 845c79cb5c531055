"""The errors a business rule raises. Services raise them; the API and the pages turn them into responses."""

import errno
from http import HTTPStatus

from django.http import Http404
from django.utils.translation import gettext_noop

from calculet import sentences


class DomainError(Exception):
    """A business rule refused the request. Subclasses pick the HTTP status.

    With `params`, `message` is a template marked with `gettext_noop` (see calculet.sentences): `english` is
    the sentence the API gives, `message` the same sentence in the reader's language for the pages. Without
    them, `message` is a plain English sentence, shown as it is.
    """

    status_code: int = HTTPStatus.BAD_REQUEST
    code = "invalid"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        code: str | None = None,
        reasons: list | None = None,
        params: dict | None = None,
    ):
        self.sentence = sentences.sentence(message, **params) if params is not None else None
        self.english = sentences.english(self.sentence) if self.sentence else message
        super().__init__(self.english)
        self.field = field
        if code is not None:
            self.code = code
        self.reasons = reasons or []

    @property
    def message(self) -> str:
        return sentences.text(self.sentence) if self.sentence else self.english

    def about(self, subject: str) -> "DomainError":
        """The same refusal, naming what it is about (one question of a bulk edit)."""
        return type(self)(
            gettext_noop("%(subject)s: %(error)s"),
            field=self.field,
            code=self.code,
            params={"subject": subject, "error": self.sentence or self.english},
        )


class FieldErrors(DomainError):
    """Several fields refused at once, each with its English sentence (`errors`, field -> sentence), so a
    client fixes them in one go; the first is the error's own field and message."""

    def __init__(self, errors: dict[str, str]):
        field, message = next(iter(errors.items()))
        super().__init__(message, field=field)
        self.errors = dict(errors)


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
