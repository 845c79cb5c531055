"""Stage `runner`, the isolated runner: load the package and run its minimal example."""

from typing import Any

import numpy as np

from npu_sim.client import greedy, run_request
from npu_sim.dtypes import bf16_to_bits
from npu_sim.protocol.context import JobContext, Recorder, Session, open_checked_session
from npu_sim.protocol.job import Param
from npu_sim.sampling import SamplingParams

PARAMS = {"decode_steps": Param("integer", 4, minimum=1)}


def routine(rec: Recorder, session: Session, steps: int, sampling: SamplingParams | None = None) -> None:
    """The golden prompt, then greedy decode steps (or tokens sampled on the device)."""
    prompt = session.calbin.goldens.prompt_ids.tolist()
    rec.progress(30, "prefill and decode")
    result = run_request(session.device, session.calbin, session.kv, 1, prompt, steps, sampling=sampling)
    done = f"{len(result.decode_inputs)} decode steps done"
    if rec.check("prefill_and_decode", result.ok, result.message or done):
        if sampling is None:
            rows = result.logits_rows().astype(np.float32)
            rec.check("logits_finite", bool(np.isfinite(rows).all()), f"{rows.shape[0]} rows of {rows.shape[1]} logits")
    else:
        rec.fail_with_code(result.code)
    kv = session.kv
    rec.check("kv_released", kv.used_tokens == 0, f"{kv.used_tokens} KV tokens in use after the request")
    if sampling is not None:
        generated = result.sampled
    else:
        generated = result.decode_inputs + [greedy(result.decode_logits[-1])] if result.decode_logits else []
    path = rec.file_path("runner-actual.npz")
    if path is not None and result.ok and sampling is None:
        tokens = np.array(generated, dtype=np.int32)
        logits = bf16_to_bits(result.logits_rows())
        np.savez(
            path,
            prompt_ids=np.array(prompt, dtype=np.int32),
            tokens=tokens,
            logits=logits,
            kv_tokens_in_use=np.array(kv.used_tokens, dtype=np.int64),
        )
        rec.add_file(path)
    rec.metrics.update(
        {
            "prompt_tokens": len(prompt),
            "decode_steps": len(result.decode_inputs),
            "generated_tokens": generated,
            "counters": session.device.counters(),
        }
    )


def stage(ctx: JobContext, rec: Recorder, params: dict[str, Any]) -> None:
    session = open_checked_session(ctx, rec)
    if session:
        routine(rec, session, params["decode_steps"])
