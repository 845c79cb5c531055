"""The sampling probe (V17): temperature, top-k and top-p on the device, against the host reference sampler.

The distribution test takes one row of the device's logits and draws `draws` tokens with the package's
sampling kernel (`npu_sim.device.calls.package_sample`: argmax when the package has no sampling op), one
counter value per draw: repeating the whole decode call would only repeat the same
logits, since the forward pass is deterministic. Pearson's chi-square against the reference sampler's
probabilities for the same row (p-value from `npu_sim.sampling.chi2_sf`) catches a wrong temperature; a
draw outside the reference's support (a wrong top-k or top-p) fails outright.
"""

from typing import Any

import numpy as np

from npu_sim.client import recover, run_request
from npu_sim.device.calls import package_sample
from npu_sim.errors import ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan, ThresholdSpec
from npu_sim.protocol.context import Session
from npu_sim.sampling import (
    SamplingParams,
    chi_square_test,
    counter_uniforms,
    reference_probabilities,
)

# The device's draws for calculet to judge, written beside the result as `sampling-draws.npz`: `draws` and
# `repeat` (the job's seed, counters 0..draws-1, on the prefill logits of the golden's prompt, twice) and
# `golden_sampled` (the tokens the device sampled on the golden's request; empty without them).
DRAWS_FILE = "draws.npz"


def params_of(run: ProbeRun) -> SamplingParams:
    p = run.params
    return SamplingParams(p["temperature"], p["top_k"], p["top_p"], p["seed"])


def sampled_request(session: Session, params: SamplingParams, steps: int, seq_id: int = 1) -> Any:
    prompt = session.calbin.goldens.prompt_ids.tolist()
    return run_request(session.device, session.calbin, session.kv, seq_id, prompt, steps, sampling=params)


def _runner(run: ProbeRun) -> None:
    params, steps = params_of(run), run.stage_params.get("decode_steps") or 4
    session = run.session()
    first = sampled_request(session, params, steps)
    if not run.check(
        "sampled_request", first.ok, first.message or f"{len(first.sampled)} tokens sampled on the device"
    ):
        return
    again = sampled_request(run.session(), params, steps)
    run.check("same_seed_same_tokens", again.sampled == first.sampled, f"{first.sampled} and {again.sampled}")
    other = sampled_request(
        run.session(), SamplingParams(params.temperature, params.top_k, params.top_p, params.seed + 1), steps
    )
    if params.temperature > 0 and params.top_k != 1:
        run.check("seed_changes_draws", other.sampled != first.sampled, f"seed {params.seed + 1}: {other.sampled}")
    sampled_calls = [r for r in session.device.call_log if r.sampled]
    d2h = {r.d2h_bytes for r in sampled_calls}
    run.check("d2h_is_token_ids", d2h == {4}, f"{sorted(d2h)} bytes per call to the host for one lane, not its logits")
    vocab = session.calbin.config.vocab
    run.metrics.update(
        {
            "tokens": first.sampled,
            "d2h_bytes_per_lane": 4,
            "logits_bytes_per_lane_saved": vocab * 2,
            "sampling_ms": sum(r.time.sampling_ms for r in sampled_calls),
        }
    )


def _golden(run: ProbeRun) -> None:
    params, draws = params_of(run), run.params["draws"]
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    plain = run_request(session.device, session.calbin, session.kv, 1, golden.prompt_ids.tolist(), 0)
    if not run.check("logits_for_the_test", plain.ok, plain.message or "one prefill's logits read back"):
        return
    row = plain.logits_rows()[0]
    counters = np.arange(draws)
    kernel = session.calbin.model_of_type("llm_prefill")
    drawn = package_sample(kernel, row, params, counter_uniforms(params.seed, counters))
    probabilities, boundary = reference_probabilities(row, params)
    fit = chi_square_test(drawn, probabilities, boundary)
    run.check(
        "goodness_of_fit",
        fit.p_value >= run.params["min_p_value"],
        f"chi-square {fit.statistic:.1f} on {fit.dof} degrees of freedom over {draws} draws: p = {fit.p_value:.3g} "
        f"(required >= {run.params['min_p_value']})",
    )
    run.check(
        "within_support", fit.outside_support == 0, f"{fit.outside_support} draws of tokens the reference never draws"
    )
    repeat = package_sample(kernel, row, params, counter_uniforms(params.seed, counters))
    run.check("deterministic", np.array_equal(drawn, repeat), "the same seed and counters draw the same tokens")
    run.metrics.update(fit.as_dict() | {"support": int(np.count_nonzero(probabilities))})
    sampled: list[int] = []
    if golden.sampled is None:
        # Without the golden's sampled tokens nothing shows the package's sampling reproduces what it should.
        run.check("sampled_golden", False, f"the golden ({golden.source}) holds no sampled tokens to compare")
    else:
        expected = golden.sampled
        result = run_request(
            session.device, session.calbin, session.kv, 2, golden.prompt_ids.tolist(), golden.decode_steps,
            forced=golden.decode_input_ids.tolist(), sampling=expected.params,
        )  # fmt: skip
        sampled = result.sampled if result.ok else []
        same = result.ok and sampled == expected.token_ids.tolist()
        run.check("sampled_golden", same, f"{result.sampled} vs the golden's {expected.token_ids.tolist()}")
    path = run.file_path(DRAWS_FILE)
    if path is not None:
        # What calculet judges (acceptance/judging.py): the device's draws, not this probe's checks.
        np.savez(path, draws=drawn, repeat=repeat, golden_sampled=np.array(sampled, dtype=np.int32))
        run.add_file(path)


def _failure(run: ProbeRun) -> None:
    """A fault during a sampled request, the documented recovery, and the same tokens as without the fault."""
    params, steps = params_of(run), run.stage_params.get("decode_steps") or 4
    session = run.session()
    clean = sampled_request(session, params, steps)
    outcomes = []
    for kind, expected in (
        (FaultKind.CORE_EXCEPTION, ErrorCode.CORE_EXCEPTION),
        (FaultKind.TIMEOUT, ErrorCode.TIMEOUT),
        (FaultKind.BUSY, ErrorCode.BUSY),
    ):
        session.device.inject(Fault(kind, at_step=1))
        failed = sampled_request(session, params, steps)
        session.device.disarm_faults()
        actions = recover(session.device, session.calbin, failed.code)
        after = sampled_request(session, params, steps)
        passed = failed.code == expected and after.ok and after.sampled == clean.sampled
        run.check(
            f"{kind.value}_recovered",
            passed,
            f"{failed.code.name}, recovery: {', '.join(actions) or 'none needed'}; then {after.sampled} "
            f"(without the fault: {clean.sampled})",
        )
        outcomes.append({"fault": kind.value, "code": failed.code.name, "recovery": actions})
    run.metrics["scenarios"] = outcomes


def _integration(run: ProbeRun) -> None:
    generic.integrate(run, sampling=params_of(run))


def _soak(run: ProbeRun) -> None:
    session = run.session()
    generic.load_and_soak(run, session, sampling=params_of(run))
    calls = session.device.call_log
    token_ids_only = all(r.sampled and r.d2h_bytes == 4 * r.lanes for r in calls)
    sampling_ms = sum(r.time.sampling_ms for r in calls)
    run.check(
        "d2h_is_token_ids",
        bool(calls) and token_ids_only,
        f"{sum(r.d2h_bytes for r in calls)} bytes to the host in {len(calls)} calls; sampling {sampling_ms:.3f} ms",
    )


SAMPLING = ProbeSpec(
    "sampling",
    "Temperature, top-k and top-p on the device with a counter-based generator (V17): the device returns token "
    "ids, 4 bytes per lane instead of the logits; the tokens follow the host reference sampler's distribution "
    "and repeat under the same seed.",
    generic.plans(
        runner=StagePlan(
            "sampled decode; 4 bytes per lane to the host; same seed same tokens, another seed not", _runner
        ),
        golden=StagePlan(
            "chi-square of `draws` device draws against the reference, support, determinism, "
            "the golden's sampled tokens (a golden without them fails)",
            _golden,
        ),
        failure=StagePlan(
            "core exception, hang and busy during a sampled request; recovery; the fault-free tokens again", _failure
        ),
        integration=StagePlan(
            "the serving loop sampling on the device; every token one the reference could draw", _integration
        ),
        soak=StagePlan("the soak with device sampling: token ids to the host, sampling time in the breakdown", _soak),
    ),
    capabilities=("npu-sampling",),
    features=("sampling",),
    params=(
        ParamSpec("temperature", "number", 0.8, "divides the logits; 0 is greedy", minimum=0, maximum=5),
        ParamSpec("top_k", "integer", 40, "tokens kept before the softmax", minimum=1),
        ParamSpec(
            "top_p", "number", 0.95, "the smallest prefix whose probability reaches it is kept", minimum=0.01, maximum=1
        ),
        ParamSpec("seed", "integer", 1234, "the generator's seed", minimum=0),
        ParamSpec("draws", "integer", 50_000, "draws in the goodness-of-fit test", minimum=1000, maximum=1_000_000),
    ),
    thresholds=(
        ThresholdSpec(
            "min_p_value",
            "number",
            0.001,
            "the chi-square test's p-value must reach it",
            minimum=0,
            maximum=1,
            stricter="higher",
        ),
    ),
    metrics=(
        MetricSpec("statistic", "Pearson's chi-square"),
        MetricSpec("dof", "degrees of freedom"),
        MetricSpec("p_value", "P(chi-square >= statistic) under the reference distribution"),
        MetricSpec("outside_support", "draws the reference gives probability 0"),
        MetricSpec("support", "tokens the reference may draw"),
        MetricSpec("d2h_bytes_per_lane", "bytes per lane to the host (4: one token id)"),
    ),
)
