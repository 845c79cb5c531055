"""A vendor's JSON Schema for its package metadata (V08, V33, V43, V46, V47, V48).

The schema must itself be valid JSON Schema (Draft 2020-12 or Draft 7, as its `$schema` says; 2020-12
when it says nothing), must accept what the simulator makes of the current format (samples.py: the
metadata npu_sim's reader gives for packages it built) and anything the answer adds (`also_accept`, e.g.
the vendor's own current package's metadata), and must reject the seed's defects (A16's impossible unit,
A17's prefill labelled llm_decode). References are resolved only inside the schema: nothing is fetched.

A question that asks a fix of the schema holds it to that fix too (`asks`, the current metadata changed as
each says; checked besides the above):

- `version` (V47): a version and required fields. The current metadata claiming another `schema_version` (each
  of OTHER_VERSIONS: another number, or the version as a string) is rejected (`version_not_pinned`), and so is the
  current metadata without each of REQUIRED_FIELDS (`field_not_required`, naming it).
- `units` (V48): every size field has its unit: each of UNIT_FIELDS (the device's and each chiplet's memory,
  each parameter block's and each tensor's size) is given one by the schema, a `unit` keyword naming one of
  UNITS in a subschema that applies to the field and accepts its value (a `unit` in a branch the value never
  takes gives none), or, for a field that carries its unit (`{"value", "unit"}`), by rejecting it without it and
  with a unit that is none (`furlong`) (`field_without_unit`, naming the field).
- `A16` (V33): the unit of `device_memory_required` fixed, not only MB refused: A16's 16 TiB written in B,
  KiB or GiB is rejected, and so is a size no board holds drawn for each check (between 1 TiB and 1 PiB, in
  each of UNITS, from a seed the report records), so a schema that knows the sizes probed fails
  (`unit_not_fixed`); and so is the size with no unit or with one that is none of UNITS (`unit_not_required`).
- `A17` (V43): each sub-model's type tied to the sub-model, not to its place or to "not llm_decode": the
  decode labelled llm_prefill, the prefill labelled with a type that does not exist, and the two sub-models
  in the other order each with the other's label are rejected (`submodel_type_unchecked`, naming which).
- `compatibility` (V46): the rules machine-readable: the current metadata without `compatibility`, without
  each of COMPATIBILITY_KEYS, with a CalRT, driver or firmware range in words rather than a version specifier
  (RANGES_IN_WORDS, each key), or with the chips in a sentence rather than a list, is rejected
  (`compatibility_not_required`, `compatibility_incomplete` naming the key, `range_not_machine_readable` naming
  the key and the words).
`schema_errors` applies a schema to one document (V37's trace schema to its own sample, trace.py).
"""

import copy
import random
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema import validators
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


ASKS = ("version", "units", "A16", "A17", "compatibility")
# V47: a versioned schema with required fields rejects metadata of another version and metadata missing a field
# every package has.
REQUIRED_FIELDS = ("schema_version", "name", "memory", "submodels")
OTHER_VERSIONS: tuple[Any, ...] = (999, 1, 3, "2")
# V48: the size fields of the metadata (`*` any key or index) and the units a schema may give them.
UNIT_FIELDS = (
    "memory/device_memory_required",
    "memory/chiplets/*/dram",
    "memory/chiplets/*/sram",
    "param_blocks/*/size",
    "submodels/*/inputs/*/size",
    "submodels/*/outputs/*/size",
)
UNITS = ("B", "KB", "KiB", "MB", "MiB", "GB", "GiB")
# V33: A16's 16777216 MB (16 TiB) in other units.
A16_RESTATED = ((16 * 2**40, "B"), (16 * 2**30, "KiB"), (16 * 2**10, "GiB"))
# V46: what the rules name, and a range no program can compare a version with.
COMPATIBILITY_KEYS = ("calrt", "driver", "firmware", "chip")
RANGES_IN_WORDS = ("0.7.6 or any later release", "any", "the latest", "see the release notes")
CHIPS_IN_WORDS = "every calculet-2c board"
RANGED_KEYS = ("calrt", "driver", "firmware")
# V33: sizes no board holds, drawn for each check.
IMPOSSIBLE_BYTES = (2**40, 2**50)
UNIT_BYTES = {"B": 1, "KB": 1000, "KiB": 2**10, "MB": 1000**2, "MiB": 2**20, "GB": 1000**3, "GiB": 2**30}
SENTINEL = "calculet-unit-probe:"
UNKNOWN_UNIT = "furlong"


def check_schema(
    schema: Any,
    subject: str,
    *,
    also_accept: Mapping[str, Any] | None = None,
    asks: str = "",
    seed: int | None = None,
) -> SchemaReport:
    """`asks` (package metadata only, one of ASKS): the fix the question asks of the schema, checked too; `seed`
    draws V33's impossible sizes (a random one when None, recorded in the report)."""
    samples = samples_for(subject)  # raises ValueError for an unknown subject
    if asks and (subject != "package-metadata" or asks not in ASKS):
        raise ValueError(f"only a package-metadata schema is asked a fix, one of {', '.join(ASKS)}, not {asks!r}")
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
    if asks:
        report.checked["asks"] = asks
        current = samples.accept[0].document
        if asks == "units":
            _check_units(schema, validator, current, report)
        elif asks == "A16":
            report.checked["seed"] = secrets.randbits(64) if seed is None else seed
            _check_a16(validator, current, report, random.Random(report.checked["seed"]))
        else:
            ASKED[asks](validator, current, report)
    return report


def _accepts(validator: Any, document: Any, name: str, report: SchemaReport) -> bool:
    return _errors(validator, document, name, report) == []


def _check_versioned(validator: Any, current: dict[str, Any], report: SchemaReport) -> None:
    for version in OTHER_VERSIONS:
        if _accepts(validator, {**current, "schema_version": version}, "another version", report):
            report.add(
                "version_not_pinned",
                f"the schema accepts the current metadata claiming schema_version {version!r}: it does not pin "
                f"{current['schema_version']!r}",
                version=version,
            )
    for name in REQUIRED_FIELDS:
        missing = {key: value for key, value in current.items() if key != name}
        if _accepts(validator, missing, f"without {name}", report):
            report.add("field_not_required", f"the schema accepts the current metadata without {name}", field=name)


def _with_memory(current: dict[str, Any], required: Any) -> dict[str, Any]:
    changed = copy.deepcopy(current)
    changed["memory"]["device_memory_required"] = required
    return changed


def _check_a16(validator: Any, current: dict[str, Any], report: SchemaReport, rng: random.Random) -> None:
    drawn = [(rng.randint(*IMPOSSIBLE_BYTES) // per_unit, unit) for unit, per_unit in UNIT_BYTES.items()]
    report.checked["impossible_sizes"] = [f"{value} {unit}" for value, unit in drawn]
    for (value, unit), said in [*((size, "A16's 16 TiB") for size in A16_RESTATED), *((size, "") for size in drawn)]:
        if _accepts(validator, _with_memory(current, {"value": value, "unit": unit}), f"{value} {unit}", report):
            size = f"{said} written as {value} {unit}" if said else f"{value} {unit}, more than 1 TiB"
            report.add(
                "unit_not_fixed",
                f"the schema accepts {size}: it refuses MB, not an impossible size",
                unit=unit,
                value=value,
            )
    size = current["memory"]["device_memory_required"]["value"]
    for required, said in (
        (size, f"a bare number ({size})"),
        ({"value": size}, "a value with no unit"),
        ({"value": size, "unit": UNKNOWN_UNIT}, f"the unit {UNKNOWN_UNIT!r}"),
    ):
        if _accepts(validator, _with_memory(current, required), said, report):
            report.add(
                "unit_not_required",
                f"the schema accepts device_memory_required as {said}: its unit is not fixed",
                given=said,
            )


def _check_a17(validator: Any, current: dict[str, Any], report: SchemaReport) -> None:
    prefill, decode = (
        next(i for i, s in enumerate(current["submodels"]) if s["smodel_type"] == kind)
        for kind in ("llm_prefill", "llm_decode")
    )

    def labelled(types: dict[int, str], *, reversed_order: bool = False) -> dict[str, Any]:
        changed = copy.deepcopy(current)
        for index, kind in types.items():
            changed["submodels"][index]["smodel_type"] = kind
        if reversed_order:
            changed["submodels"].reverse()
        return changed

    cases = (
        ("the decode labelled llm_prefill", labelled({decode: "llm_prefill"})),
        ("the prefill labelled llm_prefil, a type that does not exist", labelled({prefill: "llm_prefil"})),
        (
            "the sub-models in the other order, each labelled as the other (the prefill llm_decode)",
            labelled({prefill: "llm_decode", decode: "llm_prefill"}, reversed_order=True),
        ),
    )
    for said, document in cases:
        if _accepts(validator, document, said, report):
            report.add("submodel_type_unchecked", f"the schema accepts the current metadata with {said}", case=said)


def _check_compatibility(validator: Any, current: dict[str, Any], report: SchemaReport) -> None:
    without = {key: value for key, value in current.items() if key != "compatibility"}
    if _accepts(validator, without, "without compatibility", report):
        report.add("compatibility_not_required", "the schema accepts the current metadata without compatibility")
    for key in COMPATIBILITY_KEYS:
        changed = copy.deepcopy(current)
        del changed["compatibility"][key]
        if _accepts(validator, changed, f"compatibility without {key}", report):
            report.add(
                "compatibility_incomplete",
                f"the schema accepts compatibility rules that name no {key} range",
                key=key,
            )
    for key in RANGED_KEYS:
        for words in RANGES_IN_WORDS:
            worded = copy.deepcopy(current)
            worded["compatibility"][key] = words
            if _accepts(validator, worded, f"a {key} range in words", report):
                report.add(
                    "range_not_machine_readable",
                    f"the schema accepts the {key} range {words!r}: a range must be a version specifier",
                    key=key,
                )
                break
    worded = copy.deepcopy(current)
    worded["compatibility"]["chip"] = CHIPS_IN_WORDS
    if _accepts(validator, worded, "the chips in words", report):
        report.add(
            "range_not_machine_readable",
            f"the schema accepts the chips {CHIPS_IN_WORDS!r}: the chips must be a list of chip names",
            key="chip",
        )


ASKED: dict[str, Callable[[Any, dict[str, Any], SchemaReport], None]] = {
    "version": _check_versioned,
    "A17": _check_a17,
    "compatibility": _check_compatibility,
}


def _locations(document: Any, pattern: str) -> list[tuple[str | int, ...]]:
    """The paths in `document` matching `pattern` (slash-separated keys, `*` any key or index)."""
    found: list[tuple[str | int, ...]] = [()]
    for part in pattern.split("/"):
        step: list[tuple[str | int, ...]] = []
        for path in found:
            node = _at(document, path)
            if part == "*":
                keys = range(len(node)) if isinstance(node, list) else list(node) if isinstance(node, dict) else []
                step += [(*path, key) for key in keys]
            elif isinstance(node, dict) and part in node:
                step.append((*path, part))
        found = step
    return found


def _at(document: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def _check_units(schema: Any, validator: Any, current: dict[str, Any], report: SchemaReport) -> None:
    """Each field of UNIT_FIELDS replaced by a sentinel string: the `unit` keywords of the subschemas that apply
    to it are collected by a validator that knows the keyword (its value is a string no other keyword accepts,
    so every branch that can apply is tried)."""
    probe = copy.deepcopy(current)
    paths = {pattern: _locations(current, pattern) for pattern in UNIT_FIELDS}
    for found in paths.values():
        for path in found:
            parent = _at(probe, path[:-1])
            parent[path[-1]] = SENTINEL + "/".join(map(str, path))
    found_units: list[tuple[str, str, Any]] = []  # (where, unit, the validator of the subschema naming it)

    def unit(within: Any, value: Any, instance: Any, subschema: Any) -> Iterator[Any]:
        if isinstance(instance, str) and instance.startswith(SENTINEL) and value in UNITS:
            found_units.append((instance.removeprefix(SENTINEL), value, within.evolve(schema=subschema)))
        return iter(())

    cls = validators.extend(type(validator), {"unit": unit})
    units: dict[str, set[str]] = {}
    try:
        list(cls(schema).iter_errors(probe))
        # A `unit` counts where its subschema accepts the field's value: not in a branch the value never takes.
        for where, named, within in found_units:
            if within.is_valid(_at(current, tuple(int(k) if k.isdigit() else k for k in where.split("/")))):
                units.setdefault(where, set()).add(named)
    except Unresolvable:
        return  # said by the checks above
    given: dict[str, bool] = {}
    for pattern, found in paths.items():
        for path in found:
            where = "/".join(map(str, path))
            value = _at(current, path)
            if where not in units and isinstance(value, dict) and "unit" in value:
                without, unknown = copy.deepcopy(current), copy.deepcopy(current)
                del _at(without, path)["unit"]
                _at(unknown, path)["unit"] = UNKNOWN_UNIT
                given[where] = not _accepts(validator, without, f"{where} without its unit", report) and not _accepts(
                    validator, unknown, f"{where} in {UNKNOWN_UNIT}", report
                )
            else:
                given[where] = where in units
        missing = [where for where in ("/".join(map(str, path)) for path in found) if not given[where]]
        if missing:
            report.add(
                "field_without_unit",
                f"the schema gives {pattern} no unit (a `unit` keyword naming one of {', '.join(UNITS)}): "
                f"{', '.join(missing[:3])}",
                field=pattern,
            )
    report.checked["units"] = {
        where: sorted(units[where]) if where in units else ("carried by the field" if given[where] else None)
        for where in given
    }


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
