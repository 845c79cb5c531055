"""The runner protocol: a JSON job in, a JSON result out (docs/runner-protocol.md).

`run_job` raises JobError for a broken job (the CLI exits 2); anything else ends in a verdict.
"""

import time
from pathlib import Path
from typing import Any

from npu_sim.jobs import SCHEMA_VERSION, JobError, Log, Progress, Run, parse_params
from npu_sim.stages import STAGE_FUNCTIONS, STAGE_PARAMS

STAGES = tuple(STAGE_FUNCTIONS)

__all__ = ["STAGES", "JobError", "run_job"]


def _parse_job(job: Any) -> dict[str, Any]:
    if not isinstance(job, dict):
        raise JobError("the job must be a JSON object")
    if job.get("schema_version") != SCHEMA_VERSION:
        raise JobError(f"schema_version must be {SCHEMA_VERSION}, not {job.get('schema_version')!r}")
    if job.get("stage") not in STAGES:
        raise JobError(f"stage must be one of {', '.join(STAGES)}, not {job.get('stage')!r}")
    calbin = job.get("calbin")
    if not isinstance(calbin, str) or not calbin:
        raise JobError("calbin must be a path to a calbin directory or tar")
    if not Path(calbin).exists():
        raise JobError(f"calbin: no such file or directory: {calbin}")
    if not isinstance(job.get("params", {}), dict):
        raise JobError("params must be a JSON object")
    target = job.get("target", {})
    if not isinstance(target, dict):
        raise JobError("target must be a JSON object")
    for key in ("name", "calrt", "driver", "firmware", "chip"):
        if key in target and not isinstance(target[key], str):
            raise JobError(f"target.{key} must be a string")
    return job


def run_job(
    job: dict[str, Any],
    progress: Progress | None = None,
    log: Log | None = None,
    workdir: str | Path | None = None,
) -> dict[str, Any]:
    """Run one job and return its result. `workdir`, when given, receives the stage's files."""
    job = _parse_job(job)
    stage = STAGE_FUNCTIONS[job["stage"]]
    params = parse_params(job["stage"], job.get("params", {}), STAGE_PARAMS[job["stage"]])
    run = Run(job, params, progress or (lambda percent, text: None), log, Path(workdir) if workdir else None)
    started = time.perf_counter()
    run.progress(0, f"stage {job['stage']} started")
    stage(run)
    run.metrics["wall_time_s"] = round(time.perf_counter() - started, 3)
    run.progress(100, f"stage {job['stage']} finished")
    return run.result()
