"""The errors a business rule raises. Services raise them; the API and the pages turn them into responses."""

import errno
from http import HTTPStatus

from django.http import Http404
from django.utils.translation import gettext_noop

from calculet import sentences


class DomainError(Exception):
    """A business rule refused the request. Subclasses pick the HTTP status.

    `message` is an English template marked with `gettext_noop`, filled from `params` by name (see
    calculet.sentences): `english` is the sentence in English (the exception's text, logs), `message` the same
    sentence in the active language, which is the reader's on the pages and the client's Accept-Language on
    the API.
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
        self.sentence = sentences.sentence(message, **(params or {}))
        self.english = sentences.english(self.sentence)
        super().__init__(self.english)
        self.field = field
        if code is not None:
            self.code = code
        self.reasons = reasons or []

    @property
    def message(self) -> str:
        return sentences.text(self.sentence)

    def about(self, subject: str) -> "DomainError":
        """The same refusal, naming what it is about (one question of a bulk edit)."""
        return type(self)(
            gettext_noop("%(subject)s: %(error)s"),
            field=self.field,
            code=self.code,
            params={"subject": subject, "error": self.sentence},
        )


class FieldErrors(DomainError):
    """Several fields refused at once, each with its sentence (`errors`, field -> `sentences.sentence`, with
    plain parameters), so a client fixes them in one go; the first is the error's own field and message."""

    def __init__(self, errors: dict[str, dict]):
        field, first = next(iter(errors.items()))
        super().__init__(first["template"], field=field, params=first["params"])
        self.errors = dict(errors)

    def messages(self) -> dict[str, str]:
        """Each field's sentence in the active language."""
        return {field: sentences.text(stored) for field, stored in self.errors.items()}


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
