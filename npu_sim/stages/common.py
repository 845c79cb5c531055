"""What the stage routines share: tolerances, the golden request and its comparison, percentiles."""

from typing import Any

import numpy as np

from npu_sim.calbin.goldens import GoldenSet
from npu_sim.client import RequestResult, run_request
from npu_sim.golden import Tolerance, compare
from npu_sim.protocol.context import Session
from npu_sim.protocol.job import JobError

GOLDEN_TENSORS = ("prefill_logits", "decode_logits")


def tolerances(params: dict[str, Any]) -> dict[str, Tolerance]:
    given = params.get("tolerances") or {}
    unknown = sorted(set(given) - set(GOLDEN_TENSORS))
    if unknown:
        raise JobError(f"params.tolerances: unknown tensor(s) {', '.join(unknown)}; known: {', '.join(GOLDEN_TENSORS)}")
    found = {}
    for name in GOLDEN_TENSORS:
        values = given.get(name, {})
        if not isinstance(values, dict):
            raise JobError(f"params.tolerances.{name} must be a JSON object")
        try:
            found[name] = Tolerance.from_dict(values)
        except ValueError as error:
            raise JobError(f"params.tolerances.{name}: {error}") from error
    return found


def golden_request(session: Session, golden: GoldenSet, steps: int, seq_id: int = 1) -> RequestResult:
    """The golden's prompt, then `steps` decode steps fed the golden's tokens."""
    return run_request(
        session.device,
        session.calbin,
        session.kv,
        seq_id,
        golden.prompt_ids.tolist(),
        steps,
        forced=golden.decode_input_ids[:steps].tolist(),
    )


def compare_goldens(golden: GoldenSet, result: RequestResult, limits: dict[str, Tolerance]) -> dict[str, Any]:
    rows = result.logits_rows()
    return {
        "prefill_logits": compare(golden.prefill_logits, rows[:1], limits["prefill_logits"]),
        "decode_logits": compare(golden.decode_logits[: len(rows) - 1], rows[1:], limits["decode_logits"]),
    }


def golden_steps(params: dict[str, Any], golden: GoldenSet) -> int:
    available = golden.decode_steps
    steps = params.get("decode_steps")
    if steps is None:
        return available
    if steps > available:
        raise JobError(f"params.decode_steps: the golden has {available} decode steps")
    return int(steps)


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {
        "count": len(values),
        "mean": round(float(np.mean(values)), 3),
        "p50": round(float(p50), 3),
        "p95": round(float(p95), 3),
        "p99": round(float(p99), 3),
    }
