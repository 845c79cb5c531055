"""Stage `failure`: inject each fault, compare the code it produces with the expected one, check service recovers."""

import json
from typing import Any

import numpy as np

from npu_sim.calbin.goldens import GoldenSet
from npu_sim.client import recover
from npu_sim.dtypes import bf16_to_bits
from npu_sim.errors import ErrorCode
from npu_sim.faults import EXPECTED_CODES, FaultKind
from npu_sim.golden import Tolerance
from npu_sim.protocol.context import JobContext, Recorder, Session, open_checked_session
from npu_sim.protocol.job import JobError, Param, parse_fault
from npu_sim.stages.common import compare_goldens, golden_request, golden_steps, tolerances
from npu_sim.stages.golden import golden_or_check

PARAMS = {
    "scenarios": Param("array", None),
    "decode_steps": Param("integer", 4, minimum=1),
    "tolerances": Param("object", None),
}
SCENARIO_FIELDS = frozenset({"expect_code"})


def scenarios(params: dict[str, Any]) -> list[dict[str, Any]]:
    given = params["scenarios"]
    if given is None:
        return [{"fault": kind.value, "expect_code": int(code), "at_step": 1} for kind, code in EXPECTED_CODES.items()]
    for i, scenario in enumerate(given):
        where = f"params.scenarios[{i}]"
        parse_fault(scenario, where, SCENARIO_FIELDS)
        if isinstance(scenario.get("expect_code"), bool) or not isinstance(scenario.get("expect_code"), int):
            raise JobError(f"{where}.expect_code must be an integer error code")
    return list(given)


def routine(
    rec: Recorder,
    session: Session,
    golden: GoldenSet,
    limits: dict[str, Tolerance],
    steps: int,
    given: list[dict[str, Any]],
) -> None:
    """Each scenario: arm the fault, run the golden request, disarm, apply the documented recovery for the
    code it ended with, run the request again; the check passes when the code is the expected one, the
    request after recovery matches the golden, and a silent corruption was caught by the comparison."""
    device, calbin = session.device, session.calbin
    reports = []
    measured: dict[str, np.ndarray] = {}
    for i, scenario in enumerate(given):
        fault = parse_fault(scenario, f"params.scenarios[{i}]", SCENARIO_FIELDS)
        rec.progress(10 + 85 * i / len(given), f"scenario {i}: {fault.kind}")
        device.inject(fault)
        failed = golden_request(session, golden, steps)
        device.disarm_faults()
        corruption_detected = None
        if failed.ok:
            corruption_detected = not all(r["passed"] for r in compare_goldens(golden, failed, limits).values())
        actions = recover(device, calbin, failed.code)
        after = golden_request(session, golden, steps)
        after_matches = after.ok and all(r["passed"] for r in compare_goldens(golden, after, limits).values())
        expected = ErrorCode(scenario["expect_code"]) if scenario["expect_code"] in set(ErrorCode) else None
        passed = (
            failed.code == expected
            and after_matches
            and (fault.kind != FaultKind.CORRUPTED_OUTPUT or bool(corruption_detected))
        )
        if after_matches:
            next_request = "succeeded and matched the goldens"
        else:
            next_request = f"failed with {after.code.name}" if not after.ok else "differed from the goldens"
        expected_name = expected.name if expected is not None else "an unknown code"
        detail = (
            f"produced {failed.code.name} ({int(failed.code)}), expected {expected_name} ({scenario['expect_code']}); "
            f"device recovery: {', '.join(actions) or 'none needed'}; next request {next_request}"
        )
        if fault.kind == FaultKind.CORRUPTED_OUTPUT:
            detail += f"; corruption {'detected' if corruption_detected else 'NOT detected'} by the golden comparison"
        rec.check(f"scenario {i}: {fault.kind}", passed, detail)
        for name, request in (("faulty", failed), ("after", after)):
            if request.ok:
                measured[f"scenario_{i}_{name}"] = bf16_to_bits(request.logits_rows())
        reports.append(
            {
                "fault": fault.kind.value,
                "at_step": fault.at_step,
                "expect_code": scenario["expect_code"],
                "produced_code": int(failed.code),
                "produced_name": failed.code.name,
                "corruption_detected": corruption_detected,
                "recovery": actions,
                "recovered": after_matches,
                "after_code": int(after.code),
            }
        )
    _write_measurements(rec, reports, measured)
    rec.metrics["scenarios"] = reports
    rec.metrics["kv_tokens_in_use"] = session.kv.used_tokens


def _write_measurements(rec: Recorder, reports: list[dict[str, Any]], measured: dict[str, np.ndarray]) -> None:
    """failure-scenarios.jsonl (what each scenario observed) and failure-actual.npz (the logits of each request
    that completed): what the caller judges the stage by."""
    path = rec.file_path("failure-scenarios.jsonl")
    if path is None:
        return
    with path.open("w") as f:
        for i, report in enumerate(reports):
            observed = {key: report[key] for key in ("fault", "at_step", "produced_code", "recovery", "after_code")}
            f.write(json.dumps({"scenario": i, **observed}) + "\n")
    rec.add_file(path)
    logits = rec.file_path("failure-actual.npz")
    if logits is not None:
        np.savez(logits, allow_pickle=False, **measured)
        rec.add_file(logits)


def stage(ctx: JobContext, rec: Recorder, params: dict[str, Any]) -> None:
    given = scenarios(params)
    limits = tolerances(params)
    session = open_checked_session(ctx, rec)
    golden = session and golden_or_check(ctx, rec, session)
    if session and golden:
        routine(rec, session, golden, limits, golden_steps(params, golden), given)
