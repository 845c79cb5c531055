"""The six stages of the acceptance chain the simulator runs. Each has its parameters, its entry for a job
without probes, and a routine the probes reuse with their feature in use (docs/runner-protocol.md)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from npu_sim.protocol.context import JobContext, Recorder
from npu_sim.protocol.job import Param, parse_fault
from npu_sim.stages import failure, golden, health, integration, isolated, soak
from npu_sim.stages.common import tolerances
from npu_sim.stages.soak import SOAK_CONTEXTS


@dataclass(frozen=True)
class Stage:
    name: str
    params: dict[str, Param]
    run: Callable[[JobContext, Recorder, dict[str, Any]], None]


STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage("runner", isolated.PARAMS, isolated.stage),
        Stage("golden", golden.PARAMS, golden.stage),
        Stage("failure", failure.PARAMS, failure.stage),
        Stage("integration", integration.PARAMS, integration.stage),
        Stage("soak", soak.PARAMS, soak.stage),
        Stage("health", health.PARAMS, health.stage),
    )
}


def check_params(stage: str, params: dict[str, Any]) -> None:
    """The parts of a stage's parameters a JSON type does not settle; JobError when one is wrong."""
    if "tolerances" in params:
        tolerances(params)
    if stage == "failure":
        failure.scenarios(params)
    if params.get("fault") is not None:
        parse_fault(params["fault"], "params.fault")


__all__ = ["SOAK_CONTEXTS", "STAGES", "Stage", "check_params"]
