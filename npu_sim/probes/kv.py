"""KV cache probes: the KV manager's calls (K07) and sequence min/max (K05); helpers the KV probes share."""

import numpy as np

from npu_sim.client import TIMEOUT_FACTOR, RequestResult, run_call, run_request
from npu_sim.errors import ErrorCode, code_of
from npu_sim.faults import Fault, FaultKind
from npu_sim.golden import compare
from npu_sim.loaded_calbin import Calbin
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import Session


def prefill(session: Session, seq_id: int, tokens: list[int]) -> np.ndarray:
    start = session.kv.allocate(seq_id, len(tokens))
    timeout = TIMEOUT_FACTOR * session.handle.timing.prefill_call(len(tokens), start).total_ms
    return run_call(
        session.device, session.kv, session.calbin.model_of_type("llm_prefill"), {seq_id: tokens}, timeout
    ).logits[seq_id]


def decode(session: Session, tokens: dict[int, int]) -> dict[int, np.ndarray]:
    contexts = [session.kv.allocate(seq_id, 1) + 1 for seq_id in tokens]
    timeout = TIMEOUT_FACTOR * session.handle.timing.decode_call(contexts).total_ms
    submodel = session.calbin.model_of_type("llm_decode")
    return run_call(session.device, session.kv, submodel, {s: [t] for s, t in tokens.items()}, timeout).logits


def prompt_of(session: Session, length: int, seed: int = 0) -> list[int]:
    return package_prompt(session.calbin, length, seed)


def package_prompt(calbin: Calbin, length: int, seed: int = 0) -> list[int]:
    """The prompt of `length` tokens a KV probe uses, from the package alone (the caller judges by it too)."""
    return np.random.default_rng([seed, length]).integers(0, calbin.config.vocab, length).tolist()


# kv_manager (K07)


def _manager_runner(run: ProbeRun) -> None:
    session = run.session()
    kv = session.kv
    prompt = prompt_of(session, 5)
    run.check(
        "can_allocate",
        kv.can_allocate(1, len(prompt)) and not kv.can_allocate(1, 0),
        "a new sequence can get 5 cells, never 0",
    )
    prefill(session, 1, prompt)
    run.check(
        "allocate_and_apply",
        kv.length(1) == 5 and kv.pending(1) == 0,
        f"{kv.length(1)} cells committed, {kv.pending(1)} pending",
    )
    too_many = code_of(lambda: kv.allocate(1, kv.max_seq_len))
    run.check(
        "capacity_enforced", too_many == ErrorCode.KV_NO_CAPACITY, f"asking for {kv.max_seq_len} more: {too_many.name}"
    )
    for seq_id in range(2, kv.lanes + 1):
        kv.allocate(seq_id, 1)
    full = not kv.can_allocate(kv.lanes + 1, 1)
    run.check("lanes_enforced", full, f"with {kv.lanes} sequences, a new one {'cannot' if full else 'can'} get a lane")
    lane = kv.lane(1)
    kv.free(1)
    kv.allocate(99, 1)
    run.check(
        "free_returns_the_lane", kv.lane(99) == lane, f"sequence 99 got lane {kv.lane(99)}, sequence 1 had {lane}"
    )
    unknown = code_of(lambda: kv.free(1))
    run.check("unknown_sequence", unknown == ErrorCode.KV_SEQUENCE_UNKNOWN, f"freeing a freed sequence: {unknown.name}")
    kv.clear()
    run.check("clear", kv.sequences() == [] and kv.used_tokens == 0, "clear empties every lane")
    prefill(session, 1, prompt_of(session, 12))
    kv.shift(1, discard=4, keep=2)
    run.check(
        "do_shift",
        kv.length(1) == 8 and kv.seq_pos_max(1) == 7,
        f"after DoShift: {kv.length(1)} cells, last position {kv.seq_pos_max(1)}",
    )
    kv.clear()
    run.metrics.update({"lanes": kv.lanes, "max_seq_len": kv.max_seq_len, "kv_cache_bytes": kv.device_bytes()})


def _manager_golden(run: ProbeRun) -> None:
    """A lane freed and taken by another sequence holds nothing stale: the golden request before and after
    another sequence used the lane gives the same bits."""
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    steps = min(4, golden.decode_steps)

    def request() -> RequestResult:
        forced = golden.decode_input_ids[:steps].tolist()
        return run_request(
            session.device, session.calbin, session.kv, 1, golden.prompt_ids.tolist(), steps, forced=forced
        )

    before = request()
    other = run_request(session.device, session.calbin, session.kv, 2, prompt_of(session, 30), 8)
    after = request()
    same = (
        before.ok
        and after.ok
        and other.ok
        and np.array_equal(before.logits_rows().view(np.uint16), after.logits_rows().view(np.uint16))
    )
    run.check("reused_lane_is_clean", same, "the same bits before and after another sequence used the lane")
    generic.compare_with_golden(run, session)


def _manager_failure(run: ProbeRun) -> None:
    session = run.session()
    kv = session.kv
    prefill(session, 1, prompt_of(session, 4))
    session.device.inject(Fault(FaultKind.KV_APPLY_FAILURE, at_step=0))
    code = code_of(lambda: decode(session, {1: 7}))
    session.device.disarm_faults()
    rolled_back = (kv.length(1), kv.pending(1)) == (4, 0)
    run.check(
        "apply_failure_rolls_back",
        code == ErrorCode.KV_APPLY_FAILED and rolled_back,
        f"{code.name}; {kv.length(1)} cells, {kv.pending(1)} pending",
    )
    again = code_of(lambda: decode(session, {1: 7}))
    run.check("retry_after_rollback", again == ErrorCode.SUCCESS and kv.length(1) == 5, f"the step again: {again.name}")
    session.device.reset_configuration()
    run.check("reset_clears_the_kv", kv.sequences() == [], "a configuration reset empties the KV manager")
    session.device.configure(session.calbin)
    generic.inject_faults(run, session)


def _manager_soak(run: ProbeRun) -> None:
    session = run.session()
    generic.load_and_soak(run, session)
    run.check(
        "kv_empty_after_load",
        session.kv.used_tokens == 0 and not session.kv.sequences(),
        f"{session.kv.used_tokens} cells in use after the soak",
    )


KV_MANAGER = ProbeSpec(
    "kv_manager",
    "The KV manager's canAllocate / Allocate / Free / Apply / DoShift / Clear (K07): capacity, lanes, "
    "rollback on a failed apply, clean lane reuse.",
    generic.plans(
        runner=StagePlan("every call of the KV manager and its refusals", _manager_runner),
        golden=StagePlan(
            "a lane reused by another sequence holds nothing stale; the golden comparison", _manager_golden
        ),
        failure=StagePlan(
            "a failed apply rolls back and the step runs again; a reset clears the KV; each fault kind",
            _manager_failure,
        ),
        soak=StagePlan("the soak; no KV cell left in use afterwards", _manager_soak),
    ),
    capabilities=("kv-manager-api",),
    metrics=(
        MetricSpec("lanes", "the KV manager's lanes (the decode batch)"),
        MetricSpec("kv_cache_bytes", "device bytes of its cache"),
    ),
)


# kv_seq_min_max (K05)


def _min_max_runner(run: ProbeRun) -> None:
    session = run.session()
    kv = session.kv
    unknown = code_of(lambda: kv.seq_pos_max(5))
    run.check(
        "unknown_sequence",
        unknown == ErrorCode.KV_SEQUENCE_UNKNOWN,
        f"seq_pos_max of an unknown sequence: {unknown.name}",
    )
    kv.allocate(1, 3)
    run.check(
        "nothing_committed",
        (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (-1, -1),
        "-1 and -1 with cells allocated but not applied",
    )
    kv.free(1)
    prefill(session, 1, prompt_of(session, 10))
    run.check(
        "after_prefill",
        (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (0, 9),
        f"min {kv.seq_pos_min(1)}, max {kv.seq_pos_max(1)}",
    )
    decode(session, {1: 3})
    decode(session, {1: 4})
    run.check("after_decode", kv.seq_pos_max(1) == 11, f"max {kv.seq_pos_max(1)} after two decode steps")
    kv.seq_rm(1, 0, 3)
    run.check(
        "after_removing_the_front",
        (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (3, 11),
        f"min {kv.seq_pos_min(1)}, max {kv.seq_pos_max(1)}",
    )
    kv.clear()


def _min_max_golden(run: ProbeRun) -> None:
    """After the tail is removed the next token goes to max + 1, and its logits are the reference's for
    the shortened sequence."""
    session = run.session()
    prompt = prompt_of(session, 16)
    prefill(session, 1, prompt)
    session.kv.seq_rm(1, 12)
    position = session.kv.seq_pos_max(1) + 1
    logits = decode(session, {1: 5})[1]
    session.kv.free(1)
    expected = session.calbin.reference_logits(prompt[:12], [5, 0])[1:2]
    report = compare(expected, logits[None, :])
    run.check("next_is_max_plus_one", position == 12, f"the next token went to position {position}")
    run.check(
        "continues_from_max",
        report["passed"],
        "; ".join(report["failures"]) or "the same logits as the reference of the first 12 tokens",
    )
    generic.compare_with_golden(run, session)


def _min_max_failure(run: ProbeRun) -> None:
    session = run.session()
    prefill(session, 1, prompt_of(session, 6))
    session.device.inject(Fault(FaultKind.KV_APPLY_FAILURE, at_step=0))
    code = code_of(lambda: decode(session, {1: 1}))
    session.device.disarm_faults()
    run.check(
        "max_kept_on_failure",
        code == ErrorCode.KV_APPLY_FAILED and session.kv.seq_pos_max(1) == 5,
        f"{code.name}; max {session.kv.seq_pos_max(1)}",
    )
    session.kv.clear()
    generic.inject_faults(run, session)


def _min_max_integration(run: ProbeRun) -> None:
    """Two sequences interleaved: each one's min and max follow its own tokens only."""
    session = run.session()
    kv = session.kv
    if kv.lanes > 1:
        prefill(session, 1, prompt_of(session, 5))
        prefill(session, 2, prompt_of(session, 9))
        wrong = []
        for step in range(4):
            decode(session, {1: step, 2: step + 1})
            if (kv.seq_pos_max(1), kv.seq_pos_max(2)) != (5 + step, 9 + step):
                wrong.append(f"step {step}: {kv.seq_pos_max(1)}, {kv.seq_pos_max(2)}")
        kv.clear()
        run.check("interleaved_min_max", not wrong, "; ".join(wrong) or "each sequence's max follows its own tokens")
    generic.integrate(run, session)


KV_SEQ_MIN_MAX = ProbeSpec(
    "kv_seq_min_max",
    "seq_pos_min / seq_pos_max delegated to the runtime (K05) in every state: unknown, allocated, prefilled, "
    "decoded, edited, after a failed apply, interleaved.",
    generic.plans(
        runner=StagePlan("min and max through allocate, apply, decode and removal", _min_max_runner),
        golden=StagePlan(
            "after removing the tail, the next token is at max + 1 with the reference's logits", _min_max_golden
        ),
        failure=StagePlan("a failed apply leaves max unchanged; each fault kind", _min_max_failure),
        integration=StagePlan(
            "two interleaved sequences keep their own min and max; the serving loop", _min_max_integration
        ),
    ),
    capabilities=("kv-seq-min-max",),
)


KV = [KV_MANAGER, KV_SEQ_MIN_MAX]
