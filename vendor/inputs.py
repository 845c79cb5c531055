"""Typed inputs of vendor's writes, parsed once at the edge. No ORM here.

The API's serializers, the pages, the admin and the demo build these; the services take them as they are
and check only what needs the database or a permission (which deliverable a key names, whose artifact an id
is, who answers, which moves the states table allows).
"""

from __future__ import annotations

import datetime
import enum
import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy

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
    """The value of a change's field that leaves the question's as it is (None clears it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


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
        return {item.name: getattr(self, item.name) for item in fields(self) if getattr(self, item.name) is not KEEP}
