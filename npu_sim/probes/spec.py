"""What a probe declares: its parameters and thresholds (with types, defaults and bounds), its metrics,
the package features it needs, and what it does at each stage. `python -m npu_sim probes` prints these,
and a job's probe parameters are parsed from them: the catalogue is the one description of a probe."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from npu_sim.protocol.job import JobError

if TYPE_CHECKING:
    from npu_sim.probes.run import ProbeRun

TYPES: dict[str, tuple[type, ...]] = {"integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,)}
CHAIN_STAGES = ("runner", "golden", "failure", "integration", "soak")


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str  # integer, number, string or boolean
    default: Any
    meaning: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()

    def expectation(self) -> str:
        article = "an" if self.type == "integer" else "a"
        if self.choices:
            return f"one of {', '.join(map(str, self.choices))}"
        if self.minimum is not None and self.maximum is not None:
            return f"{article} {self.type} in {self.minimum:g}..{self.maximum:g}"
        if self.minimum is not None:
            return f"{article} {self.type} >= {self.minimum:g}"
        if self.maximum is not None:
            return f"{article} {self.type} <= {self.maximum:g}"
        return f"{article} {self.type}"

    def parse(self, value: Any, where: str) -> Any:
        wrong_type = not isinstance(value, TYPES[self.type]) or (self.type != "boolean" and isinstance(value, bool))
        too_low = not wrong_type and self.minimum is not None and value < self.minimum
        too_high = not wrong_type and self.maximum is not None and value > self.maximum
        if wrong_type or too_low or too_high or (self.choices and value not in self.choices):
            raise JobError(f"{where} must be {self.expectation()}")
        return value

    def as_dict(self) -> dict[str, Any]:
        described = {"name": self.name, "type": self.type, "default": self.default, "meaning": self.meaning}
        if self.minimum is not None:
            described["minimum"] = self.minimum
        if self.maximum is not None:
            described["maximum"] = self.maximum
        if self.choices:
            described["choices"] = list(self.choices)
        return described


@dataclass(frozen=True)
class ThresholdSpec(ParamSpec):
    """A limit a probe's checks hold to. `stricter` says which way tightens it: an answer may move it that
    way, never the other."""

    stricter: str = "higher"  # "higher" or "lower"

    def as_dict(self) -> dict[str, Any]:
        return super().as_dict() | {"stricter": self.stricter}


@dataclass(frozen=True)
class MetricSpec:
    name: str
    meaning: str


@dataclass(frozen=True)
class StagePlan:
    what: str
    run: Callable[["ProbeRun"], None]


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    description: str
    stages: dict[str, StagePlan]  # every chain stage, and optionally health
    capabilities: tuple[str, ...] = ()  # the capabilities it exercises (their slugs)
    features: tuple[str, ...] = ()  # what the job's package must declare
    params: tuple[ParamSpec, ...] = ()
    thresholds: tuple[ThresholdSpec, ...] = ()
    metrics: tuple[MetricSpec, ...] = field(default=())
    # What else must hold before any stage can exercise it; raises NotExercised when it does not.
    requires: Callable[["ProbeRun"], None] | None = None

    def __post_init__(self) -> None:
        missing = [stage for stage in CHAIN_STAGES if stage not in self.stages]
        if missing:
            raise ValueError(f"probe {self.name} has no plan for {', '.join(missing)}")

    def plan(self, stage: str) -> StagePlan:
        """A health job runs the probe's runner plan unless it has its own."""
        return self.stages.get(stage) or self.stages["runner"]

    def parse_params(self, given: Any, where: str) -> dict[str, Any]:
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise JobError(f"{where} must be a JSON object")
        specs = {p.name: p for p in self.params + self.thresholds}
        unknown = sorted(set(given) - set(specs))
        if unknown:
            raise JobError(f"{where}: unknown parameter(s) {', '.join(unknown)} for probe {self.name}")
        return {
            name: spec.parse(given[name], f"{where}.{name}") if name in given else spec.default
            for name, spec in specs.items()
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "capabilities": list(self.capabilities),
            "features": list(self.features),
            "params": [p.as_dict() for p in self.params],
            "metrics": [{"name": m.name, "meaning": m.meaning} for m in self.metrics],
            "thresholds": [t.as_dict() for t in self.thresholds],
            "stages": {stage: plan.what for stage, plan in self.stages.items()},
        }
