"""Typed inputs of vendor's writes, parsed once at the edge. No ORM here.

The API's serializers, the pages, the admin and the demo build these; the services take them as they are
and check only what needs the database or a permission (which deliverable a key names, whose artifact an id
is, who answers, which moves the states table allows, which addresses a hook may post to).
"""

from __future__ import annotations

import datetime
import enum
import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.utils.translation import gettext_lazy, gettext_noop

from calculet.errors import DomainError
from vendor import events
from vendor.models import Artifact

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from vendor.models import Organisation

# The limits of an answer's fields, which the API's serializer checks and its schema shows.
MAX_TEXT = 20_000
MAX_VERSION = 100
MAX_COMMAND = 4000
MAX_ERROR_PATH_TEXT = 2000
MAX_COMPATIBILITY = 200
ERROR_CODE_RANGE = (-(2**31), 2**31 - 1)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")  # a tolerance's or a threshold's name
NAME_RULE = gettext_lazy("Names are 1–100 letters, digits, '_', '.' or '-'.")
MAX_LIST = 100


@dataclass(frozen=True)
class ErrorPath:
    """A failure the vendor names, the error code it returns and how to recover (optional)."""

    scenario: str
    expect_code: int
    recovery: str = ""

    def stored(self) -> dict:
        path: dict = {"scenario": self.scenario, "expect_code": self.expect_code}
        if self.recovery:
            path["recovery"] = self.recovery
        return path


@dataclass(frozen=True)
class AnswerDraft:
    """One submission of an answer, its shape already checked: texts stripped and within their limits, ids
    integers, versions and map keys well formed (`acceptance.api.answers.AnswerInputSerializer`). Empty fields
    are elements the answer lacks; section 13's rule says which (`vendor.claim.claim_missing`)."""

    deliverable: str = ""  # a key of the question's deliverables; empty: the question's only one
    capability: str = ""  # the slug of the capability the answer claims (acceptance checks it)
    summary: str = ""
    version: str = ""
    executable_assets: tuple[int, ...] = ()
    minimal_example_artifact: int | None = None
    minimal_example_command: str = ""
    minimal_example_description: str = ""
    error_paths: tuple[ErrorPath, ...] = ()
    golden_artifacts: tuple[int, ...] = ()
    golden_tolerances: dict[str, float] = field(default_factory=dict)
    compatibility: dict[str, str] = field(default_factory=dict)  # only the ranges given, among COMPATIBILITY_KEYS
    thresholds: dict[str, float] = field(default_factory=dict)


class Keep(enum.Enum):
    """The value of a change's field that leaves the question's or the hook's as it is (None clears it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


def _given(changes) -> dict[str, Any]:
    return {
        item.name: getattr(changes, item.name) for item in fields(changes) if getattr(changes, item.name) is not KEEP
    }


@dataclass(frozen=True)
class QuestionChanges:
    """What a PM changes on a question (or on several at once), typed by the edge that parsed it: the API's
    serializer (names resolved to rows), the question pages, the admin's form. A field left at KEEP stays as
    it is; None clears the organisation, the assignee or the due date."""

    organisation: Organisation | None | Keep = KEEP
    assignee: User | None | Keep = KEEP
    priority: str | Keep = KEEP
    due_date: datetime.date | None | Keep = KEEP
    state: str | Keep = KEEP
    state_reason: str | Keep = KEEP

    def given(self) -> dict[str, Any]:
        """The fields the change sets, by name."""
        return _given(self)


def event_kinds(kinds: list[str], *, field: str) -> tuple[str, ...]:
    """The kinds a person or a hook chose, each once and in `vendor.events.CHOOSABLE`'s order; DomainError
    naming `field` for a kind that is not one of them."""
    unknown = sorted(set(kinds) - set(events.CHOOSABLE))
    if unknown:
        raise DomainError(
            gettext_noop("Unknown event kind %(kind)r; one of: %(kinds)s."),
            field=field,
            params={"kind": unknown[0], "kinds": list(events.CHOOSABLE)},
        )
    return tuple(kind for kind in events.CHOOSABLE if kind in set(kinds))


LANGUAGE_CODES = [code for code, _name in settings.LANGUAGES]
EMAIL_MAX_CHARS = 254


@dataclass(frozen=True)
class NotificationPreferences:
    """A person's own choices, parsed: the kinds not to be told of (`event_kinds`), the language of e-mails
    (one of LANGUAGE_CODES) and the address they go to (stripped, valid, at most EMAIL_MAX_CHARS; empty: no
    e-mail is sent). The API's serializer and the notifications page's form build it."""

    muted: tuple[str, ...]
    language: str
    email: str


def notification_preferences(*, muted: list[str], language: str, email: str) -> NotificationPreferences:
    """The preferences from what a page posted; DomainError naming the field ("muted", "language", "email")
    when they cannot be one (the API's serializer makes the same checks itself)."""
    muted_kinds = event_kinds(muted, field="muted")
    if language not in LANGUAGE_CODES:
        raise DomainError(
            gettext_noop("The language is one of: %(languages)s."),
            field="language",
            params={"languages": list(LANGUAGE_CODES)},
        )
    email = email.strip()
    if len(email) > EMAIL_MAX_CHARS:
        raise DomainError(
            gettext_noop("An e-mail address holds at most %(limit)s characters."),
            field="email",
            params={"limit": EMAIL_MAX_CHARS},
        )
    if email:
        try:
            validate_email(email)
        except ValidationError as error:
            raise DomainError(gettext_noop("Enter a valid e-mail address."), field="email") from error
    return NotificationPreferences(muted=muted_kinds, language=language, email=email)


TOKEN_NAME_MAX_CHARS = 100  # an API token's name, which the API's serializer strips
WEBHOOK_NAME_MAX_CHARS = 100
WEBHOOK_URL_MAX_CHARS = 500
_url_validator = URLValidator(schemes=["http", "https"])


def webhook_name(name: str) -> str:
    """A hook's name as typed: stripped, 1–WEBHOOK_NAME_MAX_CHARS characters; DomainError on "name"."""
    name = name.strip()
    if not name:
        raise DomainError(gettext_noop("Give the hook a name."), field="name")
    if len(name) > WEBHOOK_NAME_MAX_CHARS:
        raise DomainError(
            gettext_noop("A name holds at most %(limit)s characters."),
            field="name",
            params={"limit": WEBHOOK_NAME_MAX_CHARS},
        )
    return name


def webhook_url(url: str) -> str:
    """A hook's address as typed: stripped, an http:// or https:// URL of at most WEBHOOK_URL_MAX_CHARS
    characters; DomainError on "url". Which hosts a hook may post to is the service's rule."""
    url = url.strip()
    if len(url) > WEBHOOK_URL_MAX_CHARS:
        raise DomainError(
            gettext_noop("An address holds at most %(limit)s characters."),
            field="url",
            params={"limit": WEBHOOK_URL_MAX_CHARS},
        )
    try:
        _url_validator(url)
    except ValidationError as error:
        raise DomainError(gettext_noop("Give an http:// or https:// address."), field="url") from error
    return url


@dataclass(frozen=True)
class WebhookDraft:
    """A new hook, parsed: the organisation whose events it may carry, its name (`webhook_name`), its address
    (`webhook_url`) and the kinds it receives (`event_kinds`; empty: all). Built by the API's serializer, the
    webhooks page's form, and the demo and the tests."""

    organisation: Organisation
    name: str
    url: str
    events: tuple[str, ...] = ()


@dataclass(frozen=True)
class WebhookChanges:
    """A change to a hook, parsed as a `WebhookDraft`'s fields are; a field left at KEEP stays as it is. A
    hook's organisation does not change."""

    name: str | Keep = KEEP
    url: str | Keep = KEEP
    events: tuple[str, ...] | Keep = KEEP
    active: bool | Keep = KEEP

    def given(self) -> dict[str, Any]:
        """The fields the change sets, by name."""
        return _given(self)


COMMENT_MAX_CHARS = 10_000
ATTACHMENTS_MAX = 20


@dataclass(frozen=True)
class CommentDraft:
    """A comment written or edited, parsed: its Markdown body (stripped, 1–COMMENT_MAX_CHARS characters) and the
    ids of the artifacts it links (at most ATTACHMENTS_MAX; whose they are is the service's to check). Built by
    the API's serializer, the question page's comment form, and the demo."""

    body: str
    artifacts: tuple[int, ...] = ()


def comment_draft(body: str, artifacts: list[int]) -> CommentDraft:
    """The comment from what a page posted; DomainError on "body" or "artifacts" when it cannot be one (the
    API's serializer makes the same checks itself)."""
    body = body.strip()
    if not body:
        raise DomainError(gettext_noop("Write something."), field="body")
    if len(body) > COMMENT_MAX_CHARS:
        raise DomainError(
            gettext_noop("A comment holds at most %(limit)s characters (this one has %(length)s)."),
            field="body",
            params={"limit": COMMENT_MAX_CHARS, "length": len(body)},
        )
    if len(artifacts) > ATTACHMENTS_MAX:
        raise DomainError(
            gettext_noop("Link at most %(limit)s artifacts."), field="artifacts", params={"limit": ATTACHMENTS_MAX}
        )
    return CommentDraft(body=body, artifacts=tuple(artifacts))


ORGANISATION_NAME_MAX_CHARS = 200
SLUG_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$")
USERNAME_PATTERN = re.compile(r"^[\w.@+-]{1,150}$")


def organisation_name(name: str) -> str:
    """An organisation's name, stripped; DomainError on "name" when empty or longer than 200 characters."""
    name = name.strip()
    if not name or len(name) > ORGANISATION_NAME_MAX_CHARS:
        raise DomainError(gettext_noop("Give a name of at most 200 characters."), field="name")
    return name


def organisation_slug(slug: str) -> str:
    """An organisation's slug as given; DomainError on "slug" unless 1–50 lowercase letters, digits and inner
    hyphens."""
    if not SLUG_PATTERN.match(slug):
        raise DomainError(gettext_noop("A slug is 1–50 lowercase letters, digits and inner hyphens."), field="slug")
    return slug


@dataclass(frozen=True)
class OrganisationDraft:
    """A new organisation: `slug` and `name` parsed (`organisation_slug`, `organisation_name`); which kinds
    exist is the service's rule."""

    slug: str
    name: str
    kind: str


def organisation_draft(slug: str, name: str, kind: str) -> OrganisationDraft:
    """The organisation from what the admin or a command was given; DomainError on "slug" or "name"."""
    return OrganisationDraft(slug=organisation_slug(slug), name=organisation_name(name), kind=kind)


@dataclass(frozen=True)
class MemberDraft:
    """A new user with a role in an organisation (`api_user_create`): `username` 1–150 letters, digits and
    @.+-_; `organisation` a slug; `new_organisation_name` the parsed name of the organisation to create when it
    is missing (None: it must exist). Which roles exist and which kind of organisation each belongs to are the
    service's rules."""

    username: str
    organisation: str
    role: str
    new_organisation_name: str | None = None


def member_draft(
    username: str, organisation: str, role: str, create_org: bool = False, *, org_name: str = ""
) -> MemberDraft:
    """The member from what a command, the demo or a bench script was given; DomainError on "username", and,
    when `create_org` asks for the organisation, on "slug" or "name" (its name is the slug unless given)."""
    if not USERNAME_PATTERN.match(username):
        raise DomainError(gettext_noop("A username is 1–150 letters, digits and @.+-_ characters."), field="username")
    new_name = None
    if create_org:
        organisation_slug(organisation)
        new_name = organisation_name(org_name or organisation)
    return MemberDraft(username=username, organisation=organisation, role=role, new_organisation_name=new_name)


ARTIFACT_KINDS = [code for code, _label in Artifact.KINDS]
ARTIFACT_VERSION_PATTERN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+\-]{0,99}$")
ARTIFACT_FILE_NAME_MAX_CHARS = 255
_FILE_NAME_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")
SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ArtifactDeclaration:
    """What an uploader declares of the file it sends, parsed (`artifact_declaration`): its kind (one of
    ARTIFACT_KINDS), version, plain file name and SHA-256 (64 lowercase hex digits). A tus upload declares its
    length besides (Upload-Length); a single request's size is what arrives. Built by the artifacts API's
    view, the tus header parser, the demo and the tests."""

    kind: str
    version: str
    file_name: str
    sha256: str

    def stored(self) -> dict[str, str]:
        """As an upload and the audit log keep it: the file name under "filename", tus's key."""
        return {"kind": self.kind, "version": self.version, "filename": self.file_name, "sha256": self.sha256}


def artifact_declaration(
    *, kind: str, version: str, file_name: str, sha256: str, field_names: dict[str, str] | None = None
) -> ArtifactDeclaration:
    """The declaration from what an uploader sent; DomainError naming the field at fault, "kind", "version",
    "file_name" or "sha256" unless `field_names` maps those of kind/version/filename/sha256 to the names the
    edge's clients use (tus: Upload-Metadata.<key>)."""
    names = {"kind": "kind", "version": "version", "filename": "file_name", "sha256": "sha256", **(field_names or {})}
    if kind not in ARTIFACT_KINDS:
        raise DomainError(
            gettext_noop("Unknown artifact kind %(kind)r; one of: %(kinds)s."),
            field=names["kind"],
            params={"kind": kind, "kinds": list(ARTIFACT_KINDS)},
        )
    if not ARTIFACT_VERSION_PATTERN.match(version):
        raise DomainError(
            gettext_noop("A version is 1–100 letters, digits, '.', '_', '+' or '-', starting with a letter or digit."),
            field=names["version"],
        )
    if not file_name.strip():
        raise DomainError(gettext_noop("Give the file name."), field=names["filename"])
    if (
        len(file_name) > ARTIFACT_FILE_NAME_MAX_CHARS
        or _FILE_NAME_FORBIDDEN.search(file_name)
        or file_name in {".", ".."}
        or file_name != file_name.strip()
    ):
        raise DomainError(
            gettext_noop(
                "A file name is a plain name of at most 255 characters: no path, no '..', no control characters."
            ),
            field=names["filename"],
        )
    if not SHA256_PATTERN.fullmatch(sha256):
        raise DomainError(gettext_noop("The SHA-256 is 64 lowercase hexadecimal digits."), field=names["sha256"])
    return ArtifactDeclaration(kind=kind, version=version, file_name=file_name, sha256=sha256)
