"""What the runner stages share: the run being recorded, loading a calbin, parsing parameters."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npu_sim import compat
from npu_sim.calbin import read_manifest, validate
from npu_sim.chips import CALCULET_2C
from npu_sim.device import CALRT_VERSION, DRIVER_VERSION, FIRMWARE_VERSION, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, validation_error_code

SCHEMA_VERSION = 1
LOG_EXCERPT_LINES = 40

Progress = Callable[[float, str], None]
Log = Callable[[str], None]


class JobError(ValueError):
    """The job cannot be run as written: the message names the problem."""


@dataclass
class Loaded:
    device: VirtualDevice
    calbin: Calbin
    kv: KvManager


@dataclass
class Run:
    """What a stage reads (job, params) and writes (checks, metrics, logs, files)."""

    job: dict[str, Any]
    params: dict[str, Any]
    progress: Progress
    log_sink: Log | None
    workdir: Path | None
    checks: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append({"name": name, "passed": bool(passed), "detail": detail})
        self.log(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")
        return bool(passed)

    def log(self, line: str) -> None:
        self.logs.append(line)
        if self.log_sink:
            self.log_sink(line)

    def fail_with_code(self, code: ErrorCode) -> None:
        """Record the runtime code that ended the stage."""
        self.metrics["error_code"] = int(code)
        self.metrics["error_name"] = code.name

    def load(self) -> Loaded | None:
        """Validate the package, check it against the target, load and configure it.

        Each step is a check; on a failure the stage ends with a fail verdict.
        """
        path = self.job["calbin"]
        self.progress(2, "validating calbin")
        errors = [f for f in validate(path) if f.severity == "error"]
        detail = "; ".join(f"{f.code} at {f.field or '(package)'}: {f.message}" for f in errors[:5])
        if not self.check("calbin_valid", not errors, detail or "no errors"):
            self.fail_with_code(validation_error_code(errors))
            return None
        device = make_device(self.job.get("target", {}))
        problems = compat.problems(read_manifest(path), device.target())
        detail = "; ".join(p.message for p in problems) or f"target {device.target()} is inside every range"
        if not self.check("compatibility", not problems, detail):
            self.fail_with_code(problems[0].code)
            return None
        self.progress(5, "loading calbin")
        try:
            calbin = device.create_calbin(path)
            device.configure(calbin)
        except CalrtError as error:
            self.check("load_and_configure", False, str(error))
            self.fail_with_code(error.code)
            return None
        kv = device.create_kv_manager(calbin)
        self.check(
            "load_and_configure",
            True,
            f"{calbin.manifest['name']}: {kv.lanes} KV lanes x {kv.max_seq_len} tokens on {calbin.chiplets} chiplets",
        )
        return Loaded(device, calbin, kv)

    def result(self) -> dict[str, Any]:
        passed = bool(self.checks) and all(c["passed"] for c in self.checks)
        return {
            "schema_version": SCHEMA_VERSION,
            "stage": self.job["stage"],
            "verdict": "pass" if passed else "fail",
            "metrics": self.metrics,
            "checks": self.checks,
            "log_excerpt": "\n".join(self.logs[-LOG_EXCERPT_LINES:]),
            "produced_files": self.files,
        }


def make_device(target: dict[str, Any]) -> VirtualDevice:
    """A virtual device that reports the target's versions; what the target leaves out takes the defaults."""
    return VirtualDevice(
        calrt_version=target.get("calrt", CALRT_VERSION),
        driver_version=target.get("driver", DRIVER_VERSION),
        firmware_version=target.get("firmware", FIRMWARE_VERSION),
        chip=target.get("chip", "calculet-2c"),
    )


# Parameter parsing. Each stage declares its parameters with a JSON type and a default.

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
