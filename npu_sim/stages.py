"""The six stages of the acceptance chain the simulator can run, one function each."""

import csv
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from npu_sim.client import RequestResult, greedy, recover, run_request
from npu_sim.dtypes import bf16_to_bits, to_bf16
from npu_sim.errors import ErrorCode
from npu_sim.faults import EXPECTED_CODES, FaultKind
from npu_sim.golden import Tolerance, compare
from npu_sim.jobs import JobError, Loaded, Param, Run, parse_fault
from npu_sim.kv import KvCache
from npu_sim.model import ReferenceModel
from npu_sim.server import Request, serve
from npu_sim.timing import context_rows

GOLDEN_TENSORS = ("prefill_logits", "decode_logits")
SCENARIO_FIELDS = frozenset({"expect_code"})
SOAK_CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 40960]


def _tolerances(run: Run) -> dict[str, Tolerance]:
    given = run.params.get("tolerances") or {}
    unknown = sorted(set(given) - set(GOLDEN_TENSORS))
    if unknown:
        raise JobError(f"params.tolerances: unknown tensor(s) {', '.join(unknown)}; known: {', '.join(GOLDEN_TENSORS)}")
    tolerances = {}
    for name in GOLDEN_TENSORS:
        values = given.get(name, {})
        if not isinstance(values, dict):
            raise JobError(f"params.tolerances.{name} must be a JSON object")
        try:
            tolerances[name] = Tolerance.from_dict(values)
        except ValueError as error:
            raise JobError(f"params.tolerances.{name}: {error}") from error
    return tolerances


def _golden_request(loaded: Loaded, steps: int, seq_id: int = 1) -> RequestResult:
    """The goldens' prompt, then `steps` decode steps fed the goldens' tokens."""
    goldens = loaded.calbin.goldens
    return run_request(
        loaded.device,
        loaded.calbin,
        loaded.kv,
        seq_id,
        goldens["prompt_ids"].tolist(),
        steps,
        forced=goldens["decode_input_ids"][:steps].tolist(),
    )


def _compare_goldens(loaded: Loaded, result: RequestResult, tolerances: dict[str, Tolerance]) -> dict[str, Any]:
    goldens, rows = loaded.calbin.goldens, result.logits_rows()
    return {
        "prefill_logits": compare(goldens["prefill_logits"], rows[:1], tolerances["prefill_logits"]),
        "decode_logits": compare(goldens["decode_logits"][: len(rows) - 1], rows[1:], tolerances["decode_logits"]),
    }


def _steps(run: Run, loaded: Loaded) -> int:
    available = len(loaded.calbin.goldens["decode_input_ids"])
    steps = run.params["decode_steps"]
    if steps is None:
        return available
    if steps > available:
        raise JobError(f"params.decode_steps: the calbin has goldens for {available} decode steps")
    return int(steps)


def stage_runner(run: Run) -> None:
    """Load the package and run its minimal example: the golden prompt, a few greedy decode steps."""
    loaded = run.load()
    if not loaded:
        return
    run.progress(30, "prefill and decode")
    prompt = loaded.calbin.goldens["prompt_ids"].tolist()
    result = run_request(loaded.device, loaded.calbin, loaded.kv, 1, prompt, run.params["decode_steps"])
    if run.check("prefill_and_decode", result.ok, result.message or f"{len(result.decode_logits)} decode steps done"):
        rows = result.logits_rows().astype(np.float32)
        run.check("logits_finite", bool(np.isfinite(rows).all()), f"{rows.shape[0]} rows of {rows.shape[1]} logits")
    else:
        run.fail_with_code(result.code)
    run.check("kv_released", loaded.kv.used_tokens == 0, f"{loaded.kv.used_tokens} KV tokens in use after the request")
    generated = result.decode_inputs + [greedy(result.decode_logits[-1])] if result.decode_logits else []
    run.metrics.update(
        {
            "prompt_tokens": len(prompt),
            "decode_steps": len(result.decode_logits),
            "generated_tokens": generated,
            "counters": loaded.device.counters(),
        }
    )


def stage_golden(run: Run) -> None:
    """Compare the package's goldens with what the device computes from the same inputs."""
    tolerances = _tolerances(run)
    loaded = run.load()
    if not loaded:
        return
    steps = _steps(run, loaded)
    run.progress(20, f"prefill and {steps} decode steps")
    result = _golden_request(loaded, steps)
    if not run.check("request", result.ok, result.message or "prefill and decode steps done"):
        run.fail_with_code(result.code)
        return
    run.progress(80, "comparing with goldens")
    reports = _compare_goldens(loaded, result, tolerances)
    for name, report in reports.items():
        run.check(f"golden:{name}", report["passed"], "; ".join(report["failures"]) or "within tolerance")
    run.metrics["tensors"] = reports
    if run.workdir:
        path = run.workdir / "golden-actual.npz"
        rows = bf16_to_bits(result.logits_rows())
        np.savez(path, prefill_logits=rows[:1], decode_logits=rows[1:])
        run.files.append(path.name)


def _scenarios(run: Run) -> list[dict[str, Any]]:
    given = run.params["scenarios"]
    if given is None:
        return [{"fault": kind.value, "expect_code": int(code), "at_step": 1} for kind, code in EXPECTED_CODES.items()]
    for i, scenario in enumerate(given):
        where = f"params.scenarios[{i}]"
        parse_fault(scenario, where, SCENARIO_FIELDS)
        if isinstance(scenario.get("expect_code"), bool) or not isinstance(scenario.get("expect_code"), int):
            raise JobError(f"{where}.expect_code must be an integer error code")
    return list(given)


def stage_failure(run: Run) -> None:
    """Inject each fault, compare the code it produces with the expected one, check service recovers."""
    scenarios = _scenarios(run)
    tolerances = _tolerances(run)
    loaded = run.load()
    if not loaded:
        return
    steps = _steps(run, loaded)
    device, calbin = loaded.device, loaded.calbin
    reports = []
    for i, scenario in enumerate(scenarios):
        fault = parse_fault(scenario, f"params.scenarios[{i}]", SCENARIO_FIELDS)
        run.progress(10 + 85 * i / len(scenarios), f"scenario {i}: {fault.kind}")
        device.inject(fault)
        failed = _golden_request(loaded, steps)
        device.disarm_faults()
        corruption_detected = None
        if failed.ok:
            goldens = _compare_goldens(loaded, failed, tolerances)
            corruption_detected = not all(report["passed"] for report in goldens.values())
        actions = recover(device, calbin, failed.code)
        after = _golden_request(loaded, steps)
        after_matches = after.ok and all(r["passed"] for r in _compare_goldens(loaded, after, tolerances).values())
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
        run.check(f"scenario {i}: {fault.kind}", passed, detail)
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
            }
        )
    run.metrics["scenarios"] = reports
    run.metrics["kv_tokens_in_use"] = loaded.kv.used_tokens


def _reference_logits(loaded: Loaded, request: Request) -> np.ndarray:
    """The request's prompt and generated tokens replayed alone on the single-device reference, in BF16."""
    calbin = loaded.calbin
    model = ReferenceModel(calbin.config, calbin.weights)
    kv = KvCache(calbin.config, lanes=1)
    rows = [model.prefill(kv, 0, np.array(request.prompt), 0)]
    for step, token in enumerate(request.tokens[:-1]):
        position = len(request.prompt) + step
        rows.append(model.decode(kv, np.array([0]), np.array([token]), np.array([position]))[0])
    return to_bf16(np.stack(rows))


def _inject_param_fault(run: Run, loaded: Loaded) -> None:
    if run.params["fault"] is not None:
        fault = parse_fault(run.params["fault"], "params.fault")
        loaded.device.inject(fault)
        run.log(f"fault armed: {fault}")


def stage_integration(run: Run) -> None:
    """Several sequences through a server loop: prefills between decode steps, KV freed as they finish."""
    p = run.params
    if p["fault"] is not None:
        parse_fault(p["fault"], "params.fault")
    loaded = run.load()
    if not loaded:
        return
    calbin, kv = loaded.calbin, loaded.kv
    rng = np.random.default_rng(p["seed"])
    requests = []
    for i in range(p["sequences"]):
        prompt_length = 3 + (7 * i) % 11
        new_tokens = max(1, p["max_new_tokens"] - i % 3)
        if prompt_length + new_tokens > calbin.max_seq_len:
            raise JobError(f"params.max_new_tokens: sequences must fit {calbin.max_seq_len} positions")
        requests.append(Request(i + 1, rng.integers(0, calbin.config.vocab, prompt_length).tolist(), new_tokens))
    _inject_param_fault(run, loaded)
    run.progress(10, f"serving {len(requests)} sequences on {kv.lanes} lanes")
    trace = serve(loaded.device, calbin, kv, requests, concurrency=kv.lanes, record_logits=True)
    errors = [r for r in requests if r.error is not None]
    run.check(
        "all_sequences_completed",
        not errors,
        f"{len(requests) - len(errors)}/{len(requests)} completed"
        + (f"; errors: {dict(Counter(r.error.name for r in errors if r.error))}" if errors else ""),
    )
    run.check(
        "sequences_overlapped",
        trace.max_active > 1 and trace.prefills_during_decode > 0,
        f"up to {trace.max_active} sequences per decode step; {trace.prefills_during_decode} prefills "
        f"while others were decoding (decode batch {kv.lanes})",
    )
    run.check(
        "kv_empty_at_end",
        kv.used_tokens == 0 and not kv.sequences(),
        f"{kv.used_tokens} tokens, {len(kv.sequences())} sequences left",
    )
    run.progress(80, "replaying every sequence alone on the reference")
    mismatches = []
    for request in requests:
        if request.error is None:
            report = compare(_reference_logits(loaded, request), np.stack(request.logits))
            if not report["passed"]:
                mismatches.append(f"sequence {request.rid}: {'; '.join(report['failures'])}")
    run.check(
        "outputs_match_reference",
        not mismatches,
        "; ".join(mismatches) or "every completed sequence matches its replay alone",
    )
    run.metrics.update(
        {
            "sequences": len(requests),
            "completed": len(requests) - len(errors),
            "prefill_calls": trace.prefill_calls,
            "decode_calls": trace.decode_calls,
            "max_active": trace.max_active,
            "prefills_during_decode": trace.prefills_during_decode,
            "recoveries": trace.recoveries,
            "device_time_ms": round(loaded.device.clock_ms, 3),
            "counters": loaded.device.counters(),
        }
    )


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
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


def stage_soak(run: Run) -> None:
    """N requests at concurrency C; latencies and rates in modelled device time."""
    p = run.params
    if p["fault"] is not None:
        parse_fault(p["fault"], "params.fault")
    loaded = run.load()
    if not loaded:
        return
    device, calbin, kv = loaded.device, loaded.calbin, loaded.kv
    if p["prompt_tokens"] + p["output_tokens"] > calbin.max_seq_len:
        raise JobError(f"params.prompt_tokens + params.output_tokens must be at most {calbin.max_seq_len}")
    rng = np.random.default_rng(p["seed"])
    requests = [
        Request(i + 1, rng.integers(0, calbin.config.vocab, p["prompt_tokens"]).tolist(), p["output_tokens"])
        for i in range(p["requests"])
    ]
    _inject_param_fault(run, loaded)
    finished = []

    def on_finish(request: Request) -> None:
        finished.append(request)
        run.progress(5 + 90 * len(finished) / len(requests), f"request {request.rid} finished")

    started_ms = device.clock_ms
    trace = serve(device, calbin, kv, requests, concurrency=p["concurrency"], on_finish=on_finish)
    device_ms = device.clock_ms - started_ms
    ok = [r for r in requests if r.error is None]
    decode_rates = [
        (len(r.token_ms) - 1) * 1000.0 / (r.token_ms[-1] - r.token_ms[0]) for r in ok if len(r.token_ms) > 1
    ]
    errors = Counter(r.error.name for r in requests if r.error is not None)
    batch = min(p["concurrency"], kv.lanes)
    run.metrics.update(
        {
            "requests": len(requests),
            "concurrency": p["concurrency"],
            "decode_batch": kv.lanes,
            "prompt_tokens": p["prompt_tokens"],
            "output_tokens": p["output_tokens"],
            "completed": len(ok),
            "error_count": len(requests) - len(ok),
            "errors": dict(errors),
            "ttft_ms": _percentiles([r.token_ms[0] - r.arrival_ms for r in ok]),
            "inter_token_ms": _percentiles(
                [b - a for r in ok for a, b in zip(r.token_ms, r.token_ms[1:], strict=False)]
            ),
            "decode_tokens_per_s": _percentiles(decode_rates),
            "request_latency_ms": _percentiles([r.finish_ms - r.arrival_ms for r in ok if r.finish_ms is not None]),
            "throughput_tokens_per_s": round(sum(len(r.tokens) for r in ok) * 1000.0 / device_ms, 3)
            if device_ms
            else None,
            "device_time_ms": round(device_ms, 3),
            "max_active": trace.max_active,
            "prefill_calls": trace.prefill_calls,
            "decode_calls": trace.decode_calls,
            "recoveries": trace.recoveries,
            "counters": device.counters(),
            "timing_model": {"layers": device.timing.config.layers, "vocab": device.timing.config.vocab},
            "context_rows": context_rows(device.timing, SOAK_CONTEXTS, batch),
        }
    )
    run.check(
        "no_errors",
        not errors,
        f"{len(ok)}/{len(requests)} completed" + (f"; errors: {dict(errors)}" if errors else ""),
    )
    if p["min_decode_tokens_per_s"] is not None:
        p50 = run.metrics["decode_tokens_per_s"]["p50"]
        run.check(
            "min_decode_tokens_per_s",
            p50 is not None and p50 >= p["min_decode_tokens_per_s"],
            f"p50 per-request decode rate {p50} token/s, required {p['min_decode_tokens_per_s']}",
        )
    if run.workdir:
        path = run.workdir / "soak-requests.csv"
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["request", "arrival_ms", "ttft_ms", "finish_ms", "tokens", "error"])
            for r in requests:
                ttft = round(r.token_ms[0] - r.arrival_ms, 3) if r.token_ms else ""
                finish = round(r.finish_ms, 3) if r.finish_ms is not None else ""
                error = r.error.name if r.error is not None else ""
                writer.writerow([r.rid, round(r.arrival_ms, 3), ttft, finish, len(r.tokens), error])
        run.files.append(path.name)


def stage_health(run: Run) -> None:
    """A quick known-good check: load, a couple of decode steps, the goldens for them."""
    tolerances = _tolerances(run)
    loaded = run.load()
    if not loaded:
        return
    steps = _steps(run, loaded)
    result = _golden_request(loaded, steps)
    if not run.check("request", result.ok, result.message or f"prefill and {steps} decode steps done"):
        run.fail_with_code(result.code)
        return
    reports = _compare_goldens(loaded, result, tolerances)
    for name, report in reports.items():
        run.check(f"golden:{name}", report["passed"], "; ".join(report["failures"]) or "within tolerance")
    run.metrics["tensors"] = {
        name: {key: report[key] for key in ("max_abs", "max_rel", "cosine", "top1", "topk")}
        for name, report in reports.items()
    }
    run.metrics["counters"] = loaded.device.counters()


STAGE_FUNCTIONS: dict[str, Callable[[Run], None]] = {
    "runner": stage_runner,
    "golden": stage_golden,
    "failure": stage_failure,
    "integration": stage_integration,
    "soak": stage_soak,
    "health": stage_health,
}

STAGE_PARAMS: dict[str, dict[str, Param]] = {
    "runner": {"decode_steps": Param("integer", 4, minimum=1)},
    "golden": {"decode_steps": Param("integer", None, minimum=1), "tolerances": Param("object", None)},
    "failure": {
        "scenarios": Param("array", None),
        "decode_steps": Param("integer", 4, minimum=1),
        "tolerances": Param("object", None),
    },
    "integration": {
        "sequences": Param("integer", 6, minimum=1),
        "max_new_tokens": Param("integer", 8, minimum=1),
        "seed": Param("integer", 0),
        "fault": Param("object", None),
    },
    "soak": {
        "requests": Param("integer", 32, minimum=1),
        "concurrency": Param("integer", 4, minimum=1),
        "prompt_tokens": Param("integer", 32, minimum=1),
        "output_tokens": Param("integer", 32, minimum=1),
        "min_decode_tokens_per_s": Param("number", None, minimum=0),
        "seed": Param("integer", 0),
        "fault": Param("object", None),
    },
    "health": {"decode_steps": Param("integer", 2, minimum=1), "tolerances": Param("object", None)},
}
