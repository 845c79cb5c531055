"""A runner job, schema 1 or 2 (docs/runner-protocol.md), read and checked.

A job that cannot be run as written raises JobError whose message names the field
(`probes[1].params.top_k must be an integer >= 1`); the CLI prints it and exits 2.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npu_sim.chips import CALCULET_2C
from npu_sim.faults import Fault, FaultKind

JOB_SCHEMAS = (1, 2)
TARGET_FIELDS = ("name", "kind", "calrt", "driver", "firmware", "chip")
GOLDEN_SOURCES = ("vendor", "package")


class JobError(ValueError):
    """The job cannot be run as written: the message names the problem."""


@dataclass(frozen=True)
class ProbeRequest:
    name: str
    params: dict[str, Any]  # effective: the job's, with the catalogue's defaults filled in


@dataclass(frozen=True)
class Job:
    schema_version: int
    stage: str
    calbin: str | None
    params: dict[str, Any]  # the stage's parameters as the job gives them
    target: dict[str, str]  # what the caller expects; echoed, never applied to the device (schema 2)
    packages: dict[str, str] = field(default_factory=dict)
    probes: list[ProbeRequest] = field(default_factory=list)
    golden: str | None = None
    golden_source: str = "package"


def _existing_path(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise JobError(f"{where} must be a path to {what}")
    if not Path(value).exists():
        raise JobError(f"{where}: no such file or directory: {value}")
    return value


def parse_job(raw: Any, stages: Iterable[str], parse_probe: Callable[[int, Any], ProbeRequest]) -> Job:
    if not isinstance(raw, dict):
        raise JobError("the job must be a JSON object")
    version = raw.get("schema_version")
    if isinstance(version, bool) or version not in JOB_SCHEMAS:
        raise JobError(f"schema_version must be one of {', '.join(map(str, JOB_SCHEMAS))}, not {version!r}")
    stages = tuple(stages)
    if raw.get("stage") not in stages:
        raise JobError(f"stage must be one of {', '.join(stages)}, not {raw.get('stage')!r}")
    if version == 1 or raw.get("calbin") is not None:
        calbin: str | None = _existing_path(raw.get("calbin"), "calbin", "a calbin directory or tar")
    else:
        calbin = None
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise JobError("params must be a JSON object")
    target = raw.get("target", {})
    if not isinstance(target, dict):
        raise JobError("target must be a JSON object")
    for key in TARGET_FIELDS:
        if key in target and not isinstance(target[key], str):
            raise JobError(f"target.{key} must be a string")
    if version == 1:
        return Job(1, raw["stage"], calbin, params, target)
    known = {"schema_version", "stage", "calbin", "packages", "probes", "golden", "golden_source", "params", "target"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise JobError(f"unknown field(s) {', '.join(unknown)}")
    packages = raw.get("packages") or {}
    if not isinstance(packages, dict):
        raise JobError("packages must be a JSON object of name -> path")
    packages = {
        name: _existing_path(path, f"packages.{name}", "a calbin directory or tar") for name, path in packages.items()
    }
    probes = raw.get("probes") or []
    if not isinstance(probes, list):
        raise JobError("probes must be a JSON array")
    golden = raw.get("golden")
    if golden is not None:
        golden = _existing_path(golden, "golden", "the vendor's golden file")
    source = raw.get("golden_source", "vendor" if golden is not None else "package")
    if source not in GOLDEN_SOURCES:
        raise JobError(f"golden_source must be one of {', '.join(GOLDEN_SOURCES)}, not {source!r}")
    return Job(
        2,
        raw["stage"],
        calbin,
        params,
        target,
        packages,
        [parse_probe(i, entry) for i, entry in enumerate(probes)],
        golden,
        source,
    )


# Stage parameters. Each stage declares its parameters with a JSON type and a default.

_KINDS: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "array": (list,),
    "object": (dict,),
    "string": (str,),
}


@dataclass(frozen=True)
class Param:
    kind: str
    default: Any
    minimum: float | None = None


def parse_params(stage: str, params: dict[str, Any], spec: dict[str, Param]) -> dict[str, Any]:
    unknown = sorted(set(params) - set(spec))
    if unknown:
        raise JobError(f"params: unknown parameter(s) for stage {stage}: {', '.join(unknown)}")
    parsed = {}
    for name, p in spec.items():
        value = params.get(name, p.default)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, _KINDS[p.kind]):
                raise JobError(f"params.{name} must be a JSON {p.kind}, not {type(value).__name__}")
            if p.minimum is not None and isinstance(value, int | float) and value < p.minimum:
                raise JobError(f"params.{name} must be at least {p.minimum}")
        parsed[name] = value
    return parsed


def parse_fault(value: Any, where: str, extra_fields: frozenset[str] = frozenset()) -> Fault:
    """A fault object from a job: {"fault": kind, "at_step": n, "count": n, ...}; `extra_fields` are allowed
    and ignored (a failure scenario's expect_code)."""
    if not isinstance(value, dict):
        raise JobError(f"{where} must be a JSON object")
    fields = {
        "at_step": "integer",
        "count": "integer",
        "slow_factor": "number",
        "flipped_bits": "integer",
        "chiplet": "integer",
        "core": "integer",
    }
    kind = value.get("fault")
    if kind not in set(FaultKind):
        raise JobError(f"{where}.fault must be one of {', '.join(FaultKind)}, not {kind!r}")
    unknown = sorted(set(value) - set(fields) - {"fault"} - extra_fields)
    if unknown:
        raise JobError(f"{where}: unknown field(s) {', '.join(unknown)}")
    options = {}
    for name, json_kind in fields.items():
        if name in value:
            if isinstance(value[name], bool) or not isinstance(value[name], _KINDS[json_kind]):
                raise JobError(f"{where}.{name} must be a JSON {json_kind}")
            options[name] = value[name]
    if not (
        0 <= options.get("chiplet", 0) < CALCULET_2C.chiplets
        and 0 <= options.get("core", 0) < CALCULET_2C.cores_per_chiplet
    ):
        raise JobError(
            f"{where}: chiplet must be 0..{CALCULET_2C.chiplets - 1} and core 0..{CALCULET_2C.cores_per_chiplet - 1}"
        )
    try:
        return Fault(FaultKind(kind), **options)
    except ValueError as error:
        raise JobError(f"{where}: {error}") from error
