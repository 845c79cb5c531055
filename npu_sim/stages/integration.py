"""Stage `integration`: several sequences through a server loop, each checked against its replay alone."""

import json
from collections import Counter
from typing import Any

import numpy as np

from npu_sim.dtypes import bf16_to_bits
from npu_sim.golden import compare
from npu_sim.protocol.context import JobContext, Recorder, Session, open_checked_session
from npu_sim.protocol.job import JobError, Param, parse_fault
from npu_sim.sampling import SamplingParams, reference_probabilities
from npu_sim.server import Request, ServeTrace, serve

PARAMS = {
    "sequences": Param("integer", 6, minimum=1),
    "max_new_tokens": Param("integer", 8, minimum=1),
    "seed": Param("integer", 0),
    "fault": Param("object", None),
}


def prompts_for(seed: int, sequences: int, vocab: int) -> list[list[int]]:
    """The job's prompts, of different lengths, drawn from its `seed`: what a runner serves and calculet checks."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, 3 + (7 * i) % 11).tolist() for i in range(sequences)]


def requests_for(session: Session, params: dict[str, Any], sampling: SamplingParams | None = None) -> list[Request]:
    """Sequences of different prompt lengths and lengths to generate, arriving together."""
    calbin = session.calbin
    requests = []
    for i, prompt in enumerate(prompts_for(params["seed"], params["sequences"], calbin.config.vocab)):
        new_tokens = max(1, params["max_new_tokens"] - i % 3)
        if len(prompt) + new_tokens > calbin.max_seq_len:
            raise JobError(f"params.max_new_tokens: sequences must fit {calbin.max_seq_len} positions")
        requests.append(Request(i + 1, prompt, new_tokens, sampling=sampling))
    return requests


def arm_fault(rec: Recorder, session: Session, params: dict[str, Any]) -> None:
    if params.get("fault") is not None:
        fault = parse_fault(params["fault"], "params.fault")
        session.device.inject(fault)
        rec.log(f"fault armed: {fault}")


def routine(
    rec: Recorder, session: Session, params: dict[str, Any], sampling: SamplingParams | None = None, retries: int = 0
) -> ServeTrace:
    """Serve, then check completion, overlap, KV release, and every output against the reference:
    the same logits (greedy), or tokens the reference sampler could have drawn (device sampling)."""
    calbin, kv = session.calbin, session.kv
    requests = requests_for(session, params, sampling)
    arm_fault(rec, session, params)
    rec.progress(10, f"serving {len(requests)} sequences on {kv.lanes} lanes")
    trace = serve(session.device, calbin, kv, requests, concurrency=kv.lanes, record_logits=True, retries=retries)
    errors = [r for r in requests if r.error is not None]
    rec.check(
        "all_sequences_completed",
        not errors,
        f"{len(requests) - len(errors)}/{len(requests)} completed"
        + (f"; errors: {dict(Counter(r.error.name for r in errors if r.error))}" if errors else ""),
    )
    # One decode lane serves one sequence at a time (the current package is decode batch 1, M06): nothing to overlap.
    rec.check(
        "sequences_overlapped",
        kv.lanes == 1 or (trace.max_active > 1 and trace.prefills_during_decode > 0),
        f"up to {trace.max_active} sequences per decode step; {trace.prefills_during_decode} prefills "
        f"while others were decoding (decode batch {kv.lanes}"
        + (": one sequence at a time, as a single lane serves)" if kv.lanes == 1 else ")"),
    )
    rec.check(
        "kv_empty_at_end",
        kv.used_tokens == 0 and not kv.sequences(),
        f"{kv.used_tokens} tokens, {len(kv.sequences())} sequences left",
    )
    rec.progress(80, "replaying every sequence alone on the reference")
    mismatches = []
    for request in requests:
        if request.error is not None:
            continue
        expected = calbin.reference_logits(request.prompt, request.tokens)
        if sampling is None:
            report = compare(expected, np.stack(request.logits))
            if not report["passed"]:
                mismatches.append(f"sequence {request.rid}: {'; '.join(report['failures'])}")
            continue
        for step, (row, token) in enumerate(zip(expected, request.tokens, strict=True)):
            probabilities, boundary = reference_probabilities(row, sampling)
            if probabilities[token] == 0 and not boundary[token]:
                mismatches.append(f"sequence {request.rid} step {step}: token {token} has probability 0")
    what = "matches its replay alone" if sampling is None else "drew only tokens the reference sampler allows"
    rec.check(
        "outputs_match_reference", not mismatches, "; ".join(mismatches[:5]) or f"every completed sequence {what}"
    )
    _write_measurements(rec, requests)
    rec.metrics.update(
        {
            "sequences": len(requests),
            "completed": len(requests) - len(errors),
            "prefill_calls": trace.prefill_calls,
            "decode_calls": trace.decode_calls,
            "max_active": trace.max_active,
            "prefills_during_decode": trace.prefills_during_decode,
            "recoveries": trace.recoveries,
            "device_time_ms": round(session.device.clock_ms, 3),
            "counters": session.device.counters(),
        }
    )
    return trace


def _write_measurements(rec: Recorder, requests: list[Request]) -> None:
    """integration-sequences.jsonl (each sequence's prompt, tokens and error) and integration-actual.npz (the
    logits of each completed one): what the caller judges the stage by."""
    path = rec.file_path("integration-sequences.jsonl")
    if path is None:
        return
    with path.open("w") as f:
        for r in requests:
            record = {
                "sequence": r.rid,
                "prompt": r.prompt,
                "tokens": r.tokens,
                "error": r.error.name if r.error is not None else None,
            }
            f.write(json.dumps(record) + "\n")
    rec.add_file(path)
    logits = rec.file_path("integration-actual.npz")
    if logits is not None:
        done = {f"sequence_{r.rid}": bf16_to_bits(np.stack(r.logits)) for r in requests if r.error is None and r.logits}
        np.savez(logits, allow_pickle=False, **done)
        rec.add_file(logits)


def stage(ctx: JobContext, rec: Recorder, params: dict[str, Any]) -> None:
    if params["fault"] is not None:
        parse_fault(params["fault"], "params.fault")
    session = open_checked_session(ctx, rec)
    if session:
        routine(rec, session, params)
