"""Stage `health`, a periodic known-good check of a target: load, a couple of decode steps, their goldens."""

from typing import Any

from npu_sim.calbin.goldens import GoldenSet
from npu_sim.golden import Tolerance
from npu_sim.protocol.context import JobContext, Recorder, Session, open_checked_session
from npu_sim.protocol.job import Param
from npu_sim.stages.common import compare_goldens, golden_request, golden_steps, tolerances
from npu_sim.stages.golden import golden_or_check

PARAMS = {"decode_steps": Param("integer", 2, minimum=1), "tolerances": Param("object", None)}
SUMMARY = ("max_abs", "max_rel", "cosine", "top1", "topk")


def routine(rec: Recorder, session: Session, golden: GoldenSet, limits: dict[str, Tolerance], steps: int) -> None:
    result = golden_request(session, golden, steps)
    if not rec.check("request", result.ok, result.message or f"prefill and {steps} decode steps done"):
        rec.fail_with_code(result.code)
        return
    reports = compare_goldens(golden, result, limits)
    for name, report in reports.items():
        rec.check(f"golden:{name}", report["passed"], "; ".join(report["failures"]) or "within tolerance")
    rec.metrics["tensors"] = {name: {key: report[key] for key in SUMMARY} for name, report in reports.items()}
    rec.metrics["counters"] = session.device.counters()


def stage(ctx: JobContext, rec: Recorder, params: dict[str, Any]) -> None:
    limits = tolerances(params)
    session = open_checked_session(ctx, rec)
    golden = session and golden_or_check(ctx, rec, session)
    if session and golden:
        routine(rec, session, golden, limits, golden_steps(params, golden))
