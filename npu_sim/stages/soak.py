"""Stage `soak`: N requests at concurrency C, with the breakdown section 11 asks of a performance report.

Two kinds of time, never mixed: the device's time is modelled (the timing model, from the package); the
simulation's own wall time on this machine is measured, and so is the host's share of token choice. The
breakdown follows section 11: client time to first byte (seen by the client, queueing included: not
predicted_ms + prompt_ms, P03), service queueing, prefill, decode, H2D / infer / D2H per call, sampling;
with the prompt and output tokens and the concurrency fixed and stated.

The golden under load (as MLPerf's accuracy check during a performance run): `golden_samples` of the
requests, chosen with the soak's seed, are the golden's request (its prompt, its decode inputs forced), and
their logits, served among the others, must match the golden; they are written to soak-golden-actual.npz.
"""

import json
import time
from collections import Counter
from typing import Any

import numpy as np

from npu_sim.calbin.goldens import GoldenSet
from npu_sim.device import CallRecord
from npu_sim.dtypes import bf16_to_bits
from npu_sim.golden import compare
from npu_sim.protocol.context import JobContext, NotExercised, Recorder, Session, open_checked_session
from npu_sim.protocol.job import JobError, Param, parse_fault
from npu_sim.sampling import SamplingParams
from npu_sim.server import Request, serve
from npu_sim.stages.common import percentiles, tolerances
from npu_sim.stages.integration import arm_fault
from npu_sim.timing import context_rows

PARAMS = {
    "requests": Param("integer", 32, minimum=1),
    "concurrency": Param("integer", 4, minimum=1),
    "prompt_tokens": Param("integer", 32, minimum=1),
    "output_tokens": Param("integer", 32, minimum=1),
    "min_decode_tokens_per_s": Param("number", None, minimum=0),
    "min_duration_s": Param("number", None, minimum=0),
    "seed": Param("integer", 0),
    "fault": Param("object", None),
    "golden_samples": Param("integer", 0, minimum=0),
    "tolerances": Param("object", None),
}
SOAK_CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 40960]


def _report(
    session: Session,
    requests: list[Request],
    calls: list[CallRecord],
    params: dict[str, Any],
    wall_s: float,
    sampling: bool,
) -> dict[str, Any]:
    ok = [r for r in requests if r.error is None]
    prefills = [r.prefill_record for r in ok if r.prefill_record is not None]
    decodes = [c for c in calls if c.submodel != "prefill" and np.isfinite(c.end_ms)]
    timing = session.calbin.timing
    model = session.handle.timing
    return {
        "fixed": {
            "prompt_tokens": params["prompt_tokens"],
            "output_tokens": params["output_tokens"],
            "concurrency": params["concurrency"],
            "requests": params["requests"],
        },
        "modelled_device_ms": {
            "client_ttfb": percentiles([r.token_ms[0] - r.arrival_ms for r in ok]),
            "service_queue": percentiles([c.start_ms - r.arrival_ms for r in ok if (c := r.prefill_record)]),
            "prefill": percentiles([c.end_ms - c.start_ms for c in prefills]),
            "decode_step": percentiles([c.end_ms - c.start_ms for c in decodes]),
            "h2d": percentiles([c.time.h2d_ms for c in calls]),
            "infer": percentiles([c.time.infer_ms for c in calls]),
            "d2h": percentiles([c.time.d2h_ms for c in calls]),
            "sampling": percentiles([c.time.sampling_ms for c in calls if c.sampled]),
        },
        "measured_wall": {
            "simulation_s": round(wall_s, 3),
            "host_sampling_ms_per_request": percentiles([r.host_sampling_s * 1e3 for r in ok])
            if not sampling
            else None,
            "simulation_ms_per_call": round(wall_s * 1e3 / len(calls), 3) if calls else None,
        },
        "timing": {
            "scale": timing.scale,
            "predicted": timing.predicted,
            "note": timing.note,
            "layout": model.layout,
            "weight_bytes_per_param": round(model.weight_bytes_per_param, 4),
            "kv_bytes_per_position": model.kv_bytes_per_position(),
            "decode_batch": session.kv.lanes,
            "device_sampling": sampling,
            "layers": model.config.layers,
            "vocab": model.config.vocab,
        },
    }


def _with_golden_samples(
    requests: list[Request], rng: np.random.Generator, count: int, golden: GoldenSet
) -> list[Request]:
    """`count` of the requests, chosen by `rng`, replaced by the golden's request; returns those."""
    chosen = sorted(rng.choice(len(requests), size=min(count, len(requests)), replace=False).tolist())
    for index in chosen:
        requests[index] = Request(
            index + 1,
            golden.prompt_ids.tolist(),
            golden.decode_steps + 1,
            forced=golden.decode_input_ids.tolist(),
        )
    return [requests[index] for index in chosen]


def _check_golden_samples(rec: Recorder, samples: list[Request], golden: GoldenSet, params: dict[str, Any]) -> None:
    limits = tolerances(params)
    reports, failures = [], []
    for request in samples:
        if request.error is not None or len(request.logits) != golden.decode_steps + 1:
            failures.append(f"request {request.rid}: {request.error.name if request.error else 'incomplete'}")
            continue
        rows = np.stack(request.logits)
        report = {
            "prefill_logits": compare(golden.prefill_logits, rows[:1], limits["prefill_logits"]),
            "decode_logits": compare(golden.decode_logits, rows[1:], limits["decode_logits"]),
        }
        reports.append({"request": request.rid, **{name: r["passed"] for name, r in report.items()}})
        failures += [f"request {request.rid} {name}: {f}" for name, r in report.items() for f in r["failures"]]
    rec.metrics["golden_samples"] = reports
    rec.check(
        "golden_under_load",
        bool(samples) and not failures,
        "; ".join(failures[:5]) if failures else f"{len(samples)} sampled responses match the golden",
    )
    path = rec.file_path("soak-golden-actual.npz")
    complete = [r for r in samples if r.error is None and len(r.logits) == golden.decode_steps + 1]
    if path is not None and complete:
        rows = bf16_to_bits(np.stack([np.stack(r.logits) for r in complete]))
        ids = np.array([r.rid for r in complete], dtype=np.int32)
        np.savez(path, request_ids=ids, prefill_logits=rows[:, 0], decode_logits=rows[:, 1:])
        rec.add_file(path)


def _per_request(ok: list[Request]) -> list[dict[str, Any]]:
    """Each completed request's latency (sent to last token) and decode rate, in request order: two numbers a
    request, for a plot of every request against the required rate."""
    return [
        {
            "request": r.rid,
            "latency_ms": round(r.finish_ms - r.arrival_ms, 3),
            "decode_tokens_per_s": round((len(r.token_ms) - 1) * 1000.0 / (r.token_ms[-1] - r.token_ms[0]), 3),
        }
        for r in ok
        if r.finish_ms is not None and len(r.token_ms) > 1 and r.token_ms[-1] > r.token_ms[0]
    ]


def routine(
    rec: Recorder,
    session: Session,
    params: dict[str, Any],
    sampling: SamplingParams | None = None,
    retries: int = 0,
    golden: GoldenSet | None = None,
) -> None:
    device, calbin, kv = session.device, session.calbin, session.kv
    if params["prompt_tokens"] + params["output_tokens"] > calbin.max_seq_len:
        raise JobError(f"params.prompt_tokens + params.output_tokens must be at most {calbin.max_seq_len}")
    rng = np.random.default_rng(params["seed"])
    requests = [
        Request(
            i + 1,
            rng.integers(0, calbin.config.vocab, params["prompt_tokens"]).tolist(),
            params["output_tokens"],
            sampling=sampling,
        )
        for i in range(params["requests"])
    ]
    samples = _with_golden_samples(requests, rng, params.get("golden_samples") or 0, golden) if golden else []
    arm_fault(rec, session, params)
    finished = []

    def on_finish(request: Request) -> None:
        finished.append(request)
        rec.progress(5 + 90 * len(finished) / len(requests), f"request {request.rid} finished")

    started_ms, first_call = device.clock_ms, len(device.call_log)
    started = time.perf_counter()
    trace = serve(device, calbin, kv, requests, concurrency=params["concurrency"], on_finish=on_finish, retries=retries)
    wall_s = time.perf_counter() - started
    device_ms = device.clock_ms - started_ms
    ok = [r for r in requests if r.error is None]
    decode_rates = [
        (len(r.token_ms) - 1) * 1000.0 / (r.token_ms[-1] - r.token_ms[0]) for r in ok if len(r.token_ms) > 1
    ]
    errors = Counter(r.error.name for r in requests if r.error is not None)
    batch = min(params["concurrency"], kv.lanes)
    model = session.handle.timing
    rec.metrics.update(
        {
            "requests": len(requests),
            "concurrency": params["concurrency"],
            "decode_batch": kv.lanes,
            "prompt_tokens": params["prompt_tokens"],
            "output_tokens": params["output_tokens"],
            "completed": len(ok),
            "error_count": len(requests) - len(ok),
            "errors": dict(errors),
            "ttft_ms": percentiles([r.token_ms[0] - r.arrival_ms for r in ok]),
            "inter_token_ms": percentiles(
                [b - a for r in ok for a, b in zip(r.token_ms, r.token_ms[1:], strict=False)]
            ),
            "decode_tokens_per_s": percentiles(decode_rates),
            "request_latency_ms": percentiles([r.finish_ms - r.arrival_ms for r in ok if r.finish_ms is not None]),
            "per_request": _per_request(ok),
            "throughput_tokens_per_s": round(sum(len(r.tokens) for r in ok) * 1000.0 / device_ms, 3)
            if device_ms
            else None,
            "device_time_ms": round(device_ms, 3),
            "duration_ms": round(_duration_ms(requests), 3),
            "max_active": trace.max_active,
            "prefill_calls": trace.prefill_calls,
            "decode_calls": trace.decode_calls,
            "recoveries": trace.recoveries,
            "retries": trace.retries,
            "counters": device.counters(),
            "timing_model": {"layers": model.config.layers, "vocab": model.config.vocab},
            "timing_scale": calbin.timing.scale,
            "context_rows": context_rows(model, SOAK_CONTEXTS, batch),
            "report": _report(session, requests, device.call_log[first_call:], params, wall_s, sampling is not None),
        }
    )
    rec.check("timing_prediction", calbin.timing.predicted, calbin.timing.note)
    rec.check(
        "no_errors",
        not errors,
        f"{len(ok)}/{len(requests)} completed" + (f"; errors: {dict(errors)}" if errors else ""),
    )
    if golden is not None and params.get("golden_samples"):
        _check_golden_samples(rec, samples, golden, params)
    if params["min_decode_tokens_per_s"] is not None:
        p50 = rec.metrics["decode_tokens_per_s"]["p50"]
        rec.check(
            "min_decode_tokens_per_s",
            p50 is not None and p50 >= params["min_decode_tokens_per_s"],
            f"p50 per-request decode rate {p50} token/s, required {params['min_decode_tokens_per_s']}",
        )
    _write_requests(rec, requests, samples)


def _duration_ms(requests: list[Request]) -> float:
    """From the first request sent to the last token received: how long the soak held its load."""
    ends = [r.token_ms[-1] for r in requests if r.token_ms]
    return max(ends) - min(r.arrival_ms for r in requests) if ends else 0.0


def _write_requests(rec: Recorder, requests: list[Request], samples: list[Request]) -> None:
    """soak-requests.jsonl: what each request measured, for the caller to compute the rates and counts from."""
    path = rec.file_path("soak-requests.jsonl")
    if path is None:
        return
    golden_ids = {r.rid for r in samples}
    with path.open("w") as f:
        for r in requests:
            record = {
                "request": r.rid,
                "sent_ms": round(r.arrival_ms, 3),
                "token_ms": [round(t, 3) for t in r.token_ms],
                "error": r.error.name if r.error is not None else None,
                "golden_sample": r.rid in golden_ids,
            }
            f.write(json.dumps(record) + "\n")
    rec.add_file(path)


def stage(ctx: JobContext, rec: Recorder, params: dict[str, Any]) -> None:
    if params["fault"] is not None:
        parse_fault(params["fault"], "params.fault")
    session = open_checked_session(ctx, rec)
    if not session:
        return
    golden = None
    if params["golden_samples"]:
        try:
            golden = ctx.golden(session.calbin)
        except NotExercised as error:
            rec.check("golden_under_load", False, f"not_exercised: {error}")
            return
    routine(rec, session, params, golden=golden)
    if params["min_duration_s"] is not None:
        seconds = rec.metrics["duration_ms"] / 1000.0
        rec.check(
            "min_duration_s",
            seconds >= params["min_duration_s"],
            f"the load held for {seconds:.3f} s of device time, required {params['min_duration_s']}",
        )
