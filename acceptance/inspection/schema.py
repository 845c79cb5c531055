"""A vendor's JSON Schema for its package metadata (V08, V33, V43, V46, V47, V48).

The schema must itself be valid JSON Schema (Draft 2020-12 or Draft 7, as its `$schema` says; 2020-12
when it says nothing), must accept what the simulator makes of the current format (samples.py: the
metadata npu_sim's reader gives for packages it built) and anything the answer adds (`also_accept`, e.g.
the vendor's own current package's metadata), and must reject the seed's defects (A16's impossible unit,
A17's prefill labelled llm_decode). References are resolved only inside the schema: nothing is fetched.
`schema_errors` applies a schema to one document (V37's trace schema to its own sample, trace.py).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from acceptance.inspection import Report
from acceptance.inspection.samples import samples_for

DRAFTS: dict[str, type[Any]] = {
    "https://json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
    "http://json-schema.org/draft-07/schema": jsonschema.Draft7Validator,
}
ERRORS_KEPT = 5


@dataclass
class SchemaReport(Report):
    draft: str | None = None


# V47: a versioned schema with required fields rejects metadata of another version and metadata missing a field
# every package has.
REQUIRED_FIELDS = ("schema_version", "name", "memory", "submodels")
OTHER_VERSION = 999


def check_schema(
    schema: Any, subject: str, *, also_accept: Mapping[str, Any] | None = None, versioned: bool = False
) -> SchemaReport:
    """`versioned` (V47, package metadata only): the schema must also reject the current metadata claiming
    another `schema_version` (`version_not_pinned`) and the current metadata without each of REQUIRED_FIELDS
    (`field_not_required`, naming it)."""
    samples = samples_for(subject)  # raises ValueError for an unknown subject
    if versioned and subject != "package-metadata":
        raise ValueError("only a package-metadata schema is held to a version and required fields")
    report = SchemaReport()
    report.checked["subject"] = subject
    validator = _validator(schema, report)
    if validator is None:
        return report
    accept = [(s.name, s.description, s.document) for s in samples.accept]
    accept += [(name, "given with the answer", document) for name, document in (also_accept or {}).items()]
    report.checked["accepted"], report.checked["rejected"] = {}, {}
    for name, description, document in accept:
        errors = _errors(validator, document, name, report)
        if errors is None:
            continue
        report.checked["accepted"][name] = not errors
        if errors:
            report.add(
                "rejects_current",
                f"the schema rejects {name} ({description}): {errors[0]}",
                sample=name,
                errors=errors,
            )
    for sample in samples.reject:
        errors = _errors(validator, sample.document, sample.name, report)
        if errors is None:
            continue
        report.checked["rejected"][sample.name] = errors[:1]
        if not errors:
            report.add(
                "accepts_defect",
                f"the schema accepts {sample.name} ({sample.description})",
                sample=sample.name,
            )
    if versioned:
        _check_versioned(validator, samples.accept[0].document, report)
    return report


def _check_versioned(validator: Any, current: dict[str, Any], report: SchemaReport) -> None:
    other = {**current, "schema_version": OTHER_VERSION}
    if _errors(validator, other, "another version", report) == []:
        report.add(
            "version_not_pinned",
            f"the schema accepts the current metadata claiming schema_version {OTHER_VERSION}: it names no version",
        )
    for name in REQUIRED_FIELDS:
        missing = {key: value for key, value in current.items() if key != name}
        if _errors(validator, missing, f"without {name}", report) == []:
            report.add("field_not_required", f"the schema accepts the current metadata without {name}", field=name)


def schema_errors(schema: Any, document: Any, name: str, report: SchemaReport) -> list[str] | None:
    """The first few reasons `schema` rejects `document` (empty: it accepts it); None when the schema is not
    valid JSON Schema or cannot be applied, said in `report`."""
    validator = _validator(schema, report)
    return None if validator is None else _errors(validator, document, name, report)


def _validator(schema: Any, report: SchemaReport) -> Any:
    if not isinstance(schema, dict):
        report.add("schema_invalid", f"a schema must be a JSON object, not {type(schema).__name__}")
        return None
    declared = str(schema.get("$schema", "https://json-schema.org/draft/2020-12/schema")).rstrip("#")
    cls = DRAFTS.get(declared)
    if cls is None:
        report.add(
            "schema_draft_unsupported",
            f"$schema {declared!r} is neither Draft 2020-12 nor Draft 7",
            declared=declared,
        )
        return None
    report.draft = declared
    report.checked["draft"] = declared
    try:
        cls.check_schema(schema)
    except SchemaError as error:
        report.add(
            "schema_invalid",
            f"the schema is not valid {declared}: {error.message} at {_path(error.absolute_path)}",
            path=_path(error.absolute_path),
        )
        return None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _errors(validator: Any, document: Any, name: str, report: SchemaReport) -> list[str] | None:
    """The first few reasons the schema rejects `document` (empty: it accepts it); None when the schema
    could not be applied at all (a reference it cannot resolve)."""
    try:
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    except Unresolvable as error:
        if not any(f.code == "schema_unresolvable" for f in report.findings):
            report.add("schema_unresolvable", f"a reference of the schema cannot be resolved: {error}")
        return None
    return [f"{_path(e.absolute_path)}: {e.message}"[:500] for e in errors[:ERRORS_KEPT]]


def _path(parts: Any) -> str:
    return "/" + "/".join(str(part) for part in parts)
