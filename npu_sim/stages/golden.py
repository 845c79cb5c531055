"""Stage `golden`, the numerical golden: the device's BF16 logits against the golden's."""

from typing import Any

import numpy as np

from npu_sim.calbin.goldens import GoldenSet
from npu_sim.dtypes import bf16_to_bits
from npu_sim.golden import Tolerance
from npu_sim.protocol.context import JobContext, NotExercised, Recorder, Session, open_checked_session
from npu_sim.protocol.job import Param
from npu_sim.stages.common import compare_goldens, golden_request, golden_steps, tolerances

PARAMS = {
    "decode_steps": Param("integer", None, minimum=1),
    "tolerances": Param("object", None),
    "min_decode_steps": Param("integer", None, minimum=1),
}


def routine(rec: Recorder, session: Session, golden: GoldenSet, limits: dict[str, Tolerance], steps: int) -> bool:
    """Run the golden's prompt and decode tokens and compare; True when every tensor is within tolerance."""
    rec.progress(20, f"prefill and {steps} decode steps")
    result = golden_request(session, golden, steps)
    if not rec.check("request", result.ok, result.message or "prefill and decode steps done"):
        rec.fail_with_code(result.code)
        return False
    rec.progress(80, f"comparing with the golden ({golden.source})")
    reports = compare_goldens(golden, result, limits)
    for name, report in reports.items():
        rec.check(f"golden:{name}", report["passed"], "; ".join(report["failures"]) or "within tolerance")
    rec.metrics["tensors"] = reports
    rec.metrics["golden_source"] = golden.source
    path = rec.file_path("golden-actual.npz")
    if path is not None:
        rows = bf16_to_bits(result.logits_rows())
        np.savez(path, prefill_logits=rows[:1], decode_logits=rows[1:])
        rec.add_file(path)
    return all(report["passed"] for report in reports.values())


def golden_or_check(ctx: JobContext, rec: Recorder, session: Session) -> GoldenSet | None:
    """The job's golden; without one, a failed `golden_available` check."""
    try:
        return ctx.golden(session.calbin)
    except NotExercised as error:
        rec.check("golden_available", False, f"not_exercised: {error}")
        return None


def stage(ctx: JobContext, rec: Recorder, params: dict[str, Any]) -> None:
    limits = tolerances(params)
    session = open_checked_session(ctx, rec)
    golden = session and golden_or_check(ctx, rec, session)
    if session and golden:
        minimum = params["min_decode_steps"] or 1
        if rec.check(
            "golden_long_enough", golden.decode_steps >= minimum, f"{golden.decode_steps} decode steps; {minimum} asked"
        ):
            routine(rec, session, golden, limits, golden_steps(params, golden))
