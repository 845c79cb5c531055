"""Section 13's closing rule as a check over structured answer data. No ORM here.

An answer counts only with all six elements; each is judged by its structure, so more or longer text
never satisfies an element.
"""

import re
from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from calculet.sentences import sentence

ELEMENT_LABELS = {
    "version": _("version"),
    "executable_asset": _("executable asset"),
    "minimal_example": _("minimal example"),
    "error_path": _("error path"),
    "golden": _("golden"),
    "compatibility_range": _("compatibility range"),
}
ELEMENTS = list(ELEMENT_LABELS)
# A document review's verdict on each element; "missing" is only ever what the answer's structure shows.
PRESENT = "present"
NOT_APPLICABLE = "not_applicable"
MISSING = "missing"
ELEMENT_VERDICTS = [PRESENT, NOT_APPLICABLE]
COMPATIBILITY_KEYS = ["calrt", "driver", "firmware", "chip"]
VERSION_PATTERN = re.compile(r"^v?[0-9]+(\.[0-9]+){1,3}([-+.][0-9A-Za-z.]+)?$")
# The compatibility keys that hold version ranges; `chip` holds chip names.
RANGE_KEYS = ["calrt", "driver", "firmware"]


def compatibility_specifier(value: str) -> str:
    """A compatibility range as PEP 440 specifiers: a bare version ("0.7.6", "v0.7.6") means exactly it."""
    value = value.strip()
    if value[:1].isdigit():
        return f"=={value}"
    if value.startswith("v") and value[1:2].isdigit():
        return f"=={value[1:]}"
    return value


def compatibility_errors(compatibility: dict) -> dict[str, dict]:
    """Each range that is no PEP 440 specifier set, by field (`compatibility.<key>`), as a sentence
    (calculet.sentences): "nonsense range" would be stored and only fail when a target's versions are checked
    against it."""
    errors = {}
    for key in RANGE_KEYS:
        value = str(compatibility.get(key, "")).strip()
        if not value:
            continue
        try:
            SpecifierSet(compatibility_specifier(value))
        except InvalidSpecifier:
            errors[f"compatibility.{key}"] = sentence(
                gettext_noop(
                    "%(value)r is not a version range: give specifiers such as >=0.7.6,<0.8, or one version such as "
                    "0.7.6."
                ),
                value=value,
            )
    return errors


@dataclass
class ClaimData:
    version: str = ""
    executable_asset_ids: list[int] = field(default_factory=list)
    minimal_example_artifact_id: int | None = None
    minimal_example_command: str = ""
    error_paths: list[dict] = field(default_factory=list)
    golden_artifact_ids: list[int] = field(default_factory=list)
    golden_tolerances: dict = field(default_factory=dict)
    compatibility: dict = field(default_factory=dict)


def _has_error_path(paths: list[dict]) -> bool:
    return any(
        isinstance(p, dict) and str(p.get("scenario", "")).strip() and isinstance(p.get("expect_code"), int)
        for p in paths
    )


def claim_missing(claim: ClaimData) -> list[str]:
    """The section-13 elements the claim lacks, in the document's order (empty when complete)."""
    present = {
        "version": bool(VERSION_PATTERN.match(claim.version.strip())),
        "executable_asset": bool(claim.executable_asset_ids),
        # A command alone is not runnable proof: it needs an executable asset to run against.
        "minimal_example": claim.minimal_example_artifact_id is not None
        or (bool(claim.minimal_example_command.strip()) and bool(claim.executable_asset_ids)),
        "error_path": _has_error_path(claim.error_paths),
        "golden": bool(claim.golden_artifact_ids),
        "compatibility_range": all(str(claim.compatibility.get(key, "")).strip() for key in COMPATIBILITY_KEYS),
    }
    return [element for element in ELEMENTS if not present[element]]


def element_states(missing: list[str], verdicts: dict) -> list[tuple[str, str, str]]:
    """Each element as (element, state, reason) in the document's order: "not_applicable" with the reason
    when an accepted document review says so (`verdicts`, the review's `elements`), otherwise "present" or
    "missing" as the answer's structure shows."""
    states = []
    for element in ELEMENTS:
        verdict = verdicts.get(element) or {}
        if verdict.get("verdict") == NOT_APPLICABLE:
            states.append((element, NOT_APPLICABLE, verdict.get("reason", "")))
        else:
            states.append((element, MISSING if element in missing else PRESENT, ""))
    return states
