"""The runner protocol: a JSON job in, a JSON result out (docs/runner-protocol.md).

`run_job` raises JobError for a broken job (the CLI exits 2); anything else ends in a verdict.
"""

import time
from pathlib import Path
from typing import Any

from npu_sim.device import DeviceIdentity, load_device_config
from npu_sim.probes import PROBES, parse_probe_request, run_probe
from npu_sim.protocol.context import JobContext, Log, Progress, Recorder, open_checked_session
from npu_sim.protocol.job import Job, JobError, parse_job, parse_params
from npu_sim.stages import STAGES, check_params

LOG_EXCERPT_LINES = 40
MEASURED_STAGES = ("runner", "golden", "failure", "integration", "soak")

__all__ = ["STAGES", "JobError", "run_job"]


def run_job(
    job: Any,
    progress: Progress | None = None,
    log: Log | None = None,
    workdir: str | Path | None = None,
    device: DeviceIdentity | None = None,
) -> dict[str, Any]:
    """Run one job and return its result. `workdir`, when given, receives the produced files; `device` is
    the simulated device's identity (default: NPU_SIM_DEVICE_CONFIG's, else CalRT 0.7.6 and friends)."""
    parsed = parse_job(job, STAGES, parse_probe_request)
    stage = STAGES[parsed.stage]
    params = parse_params(parsed.stage, parsed.params, stage.params)
    check_params(parsed.stage, params)
    identity = device or load_device_config()
    ctx = JobContext(
        parsed, params, identity, progress or (lambda percent, text: None), log, Path(workdir) if workdir else None
    )
    rec = Recorder(ctx, params)
    started = time.perf_counter()
    ctx.progress(0, f"stage {parsed.stage} started")
    probes = []
    opened = True
    if parsed.probes:
        opened = open_checked_session(ctx, rec) is not None
        step = 85 / len(parsed.probes)
        for i, request in enumerate(parsed.probes):
            share = (10 + step * i, 10 + step * (i + 1))
            ctx.progress(share[0], f"probe {request.name}")
            probes.append(run_probe(ctx, PROBES[request.name], request, parsed.stage, share))
    if not parsed.probes or (opened and parsed.stage in MEASURED_STAGES):
        # The caller judges these stages from what the stage's own routine measured on the job's package,
        # whatever the probes do: it runs once more after them, on a package that loads, and writes its
        # measurement files (docs/runner-protocol.md, "A runner measures; calculet judges").
        stage.run(ctx, rec, params)
    rec.metrics["wall_time_s"] = round(time.perf_counter() - started, 3)
    ctx.progress(100, f"stage {parsed.stage} finished")
    return _result(parsed, ctx, rec, probes)


def _result(job: Job, ctx: JobContext, rec: Recorder, probes: list[dict[str, Any]]) -> dict[str, Any]:
    passed = bool(rec.checks) and all(c["passed"] for c in rec.checks) and all(p["verdict"] == "pass" for p in probes)
    result: dict[str, Any] = {
        "schema_version": job.schema_version,
        "stage": job.stage,
        "verdict": "pass" if passed else "fail",
        "metrics": rec.metrics,
        "checks": rec.checks,
    }
    if job.schema_version == 2:
        result |= {"probes": probes, "device": ctx.device_report(), "target": job.target}
    return result | {"log_excerpt": "\n".join(ctx.logs[-LOG_EXCERPT_LINES:]), "produced_files": ctx.files}
