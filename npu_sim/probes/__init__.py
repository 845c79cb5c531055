"""Capability probes: what each does at each stage of the chain (docs/runner-protocol.md).

`PROBES` is the catalogue, by name; `python -m npu_sim probes --json` prints it.
"""

from typing import Any

from npu_sim.probes.basic import BASIC
from npu_sim.probes.buffers import FIXED_TASK, OUTPUT_BUFFER
from npu_sim.probes.c_api_nonblocking import C_API_NONBLOCKING
from npu_sim.probes.faults import FAULTS
from npu_sim.probes.full_debug import FULL_DEBUG
from npu_sim.probes.kv import KV
from npu_sim.probes.kv_shift import KV_SHIFT
from npu_sim.probes.lifecycle import LIFECYCLE
from npu_sim.probes.models import MODELS
from npu_sim.probes.observability import OBSERVABILITY
from npu_sim.probes.parallel_mode import PARALLEL_MODE
from npu_sim.probes.parallelism import PARALLELISM
from npu_sim.probes.residency import RESIDENCY
from npu_sim.probes.run import run_probe
from npu_sim.probes.s8 import S8
from npu_sim.probes.sampling import SAMPLING
from npu_sim.probes.spec import ProbeSpec
from npu_sim.protocol.job import JobError, ProbeRequest

CATALOGUE_VERSION = 1
PROBES: dict[str, ProbeSpec] = {
    spec.name: spec
    for spec in [
        *BASIC,
        SAMPLING,
        S8,
        *MODELS,
        RESIDENCY,
        *PARALLELISM,
        *KV,
        KV_SHIFT,
        PARALLEL_MODE,
        OUTPUT_BUFFER,
        FIXED_TASK,
        C_API_NONBLOCKING,
        FULL_DEBUG,
        *OBSERVABILITY,
        *FAULTS,
        *LIFECYCLE,
    ]
}


def parse_probe_request(index: int, entry: Any) -> ProbeRequest:
    """`probes[i]` of a job: a known name and parameters within the catalogue's bounds."""
    where = f"probes[{index}]"
    if not isinstance(entry, dict):
        raise JobError(f"{where} must be a JSON object with a name and params")
    unknown = sorted(set(entry) - {"name", "params"})
    if unknown:
        raise JobError(f"{where}: unknown field(s) {', '.join(unknown)}")
    name = entry.get("name")
    if name not in PROBES:
        raise JobError(f"{where}.name must be one of {', '.join(PROBES)}, not {name!r}")
    return ProbeRequest(name, PROBES[name].parse_params(entry.get("params"), f"{where}.params"))


def catalogue() -> dict[str, Any]:
    return {"schema_version": CATALOGUE_VERSION, "probes": [spec.as_dict() for spec in PROBES.values()]}


__all__ = ["PROBES", "catalogue", "parse_probe_request", "run_probe"]
