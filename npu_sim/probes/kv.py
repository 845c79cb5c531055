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
# What the plans observe is judged by the caller too (acceptance.probe_judging): the golden plan's request is
# the golden's prompt and its first `MANAGER_GOLDEN_STEPS` decode steps (a golden calculet judges by has them).
MANAGER_GOLDEN_STEPS = 4


def _manager_runner(run: ProbeRun) -> None:
    session = run.session()
    kv = session.kv
    prompt = prompt_of(session, 5)
    five = run.observe("can_allocate.five", int(kv.can_allocate(1, len(prompt))))
    none = run.observe("can_allocate.zero", int(kv.can_allocate(1, 0)))
    run.check("can_allocate", five and not none, "a new sequence can get 5 cells, never 0")
    prefill(session, 1, prompt)
    cells = run.observe("allocate_and_apply.cells", kv.length(1))
    pending = run.observe("allocate_and_apply.pending", kv.pending(1))
    run.check("allocate_and_apply", cells == 5 and pending == 0, f"{cells} cells committed, {pending} pending")
    too_many = run.observe("capacity_enforced.code", code_of(lambda: kv.allocate(1, kv.max_seq_len)))
    run.check(
        "capacity_enforced", too_many == ErrorCode.KV_NO_CAPACITY, f"asking for {kv.max_seq_len} more: {too_many.name}"
    )
    lanes = run.observe("lanes_enforced.lanes", kv.lanes)
    for seq_id in range(2, lanes + 1):
        kv.allocate(seq_id, 1)
    full = not run.observe("lanes_enforced.can_allocate", int(kv.can_allocate(lanes + 1, 1)))
    run.check("lanes_enforced", full, f"with {lanes} sequences, a new one {'cannot' if full else 'can'} get a lane")
    lane = run.observe("free_returns_the_lane.freed", kv.lane(1))
    kv.free(1)
    kv.allocate(99, 1)
    taken = run.observe("free_returns_the_lane.taken", kv.lane(99))
    run.check("free_returns_the_lane", taken == lane, f"sequence 99 got lane {taken}, sequence 1 had {lane}")
    unknown = run.observe("unknown_sequence.code", code_of(lambda: kv.free(1)))
    run.check("unknown_sequence", unknown == ErrorCode.KV_SEQUENCE_UNKNOWN, f"freeing a freed sequence: {unknown.name}")
    kv.clear()
    cleared = run.observe("clear.sequences", kv.sequences()) == []
    used = run.observe("clear.used_tokens", kv.used_tokens)
    run.check("clear", cleared and used == 0, "clear empties every lane")
    prefill(session, 1, prompt_of(session, 12))
    kv.shift(1, discard=4, keep=2)
    cells = run.observe("do_shift.cells", kv.length(1))
    last = run.observe("do_shift.pos_max", kv.seq_pos_max(1))
    run.check("do_shift", cells == 8 and last == 7, f"after DoShift: {cells} cells, last position {last}")
    kv.clear()
    run.metrics.update({"lanes": kv.lanes, "max_seq_len": kv.max_seq_len, "kv_cache_bytes": kv.device_bytes()})


def _manager_golden(run: ProbeRun) -> None:
    """A lane freed and taken by another sequence holds nothing stale: the golden request before and after
    another sequence used the lane gives the same bits."""
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    steps = min(MANAGER_GOLDEN_STEPS, golden.decode_steps)

    def request() -> RequestResult:
        forced = golden.decode_input_ids[:steps].tolist()
        return run_request(
            session.device, session.calbin, session.kv, 1, golden.prompt_ids.tolist(), steps, forced=forced
        )

    before = request()
    other = run_request(session.device, session.calbin, session.kv, 2, prompt_of(session, 30), 8)
    after = request()
    for name, outcome in (("before", before), ("other", other), ("after", after)):
        run.observe(f"reused_lane_is_clean.{name}_code", outcome.code)
    ok = before.ok and after.ok and other.ok
    same = ok and np.array_equal(
        run.observe("reused_lane_is_clean.before", before.logits_rows().view(np.uint16)),
        run.observe("reused_lane_is_clean.after", after.logits_rows().view(np.uint16)),
    )
    run.check("reused_lane_is_clean", same, "the same bits before and after another sequence used the lane")
    generic.compare_with_golden(run, session)


def _manager_failure(run: ProbeRun) -> None:
    session = run.session()
    kv = session.kv
    prefill(session, 1, prompt_of(session, 4))
    session.device.inject(Fault(FaultKind.KV_APPLY_FAILURE, at_step=0))
    code = run.observe("apply_failure_rolls_back.code", code_of(lambda: decode(session, {1: 7})))
    session.device.disarm_faults()
    cells = run.observe("apply_failure_rolls_back.cells", kv.length(1))
    pending = run.observe("apply_failure_rolls_back.pending", kv.pending(1))
    run.check(
        "apply_failure_rolls_back",
        code == ErrorCode.KV_APPLY_FAILED and (cells, pending) == (4, 0),
        f"{code.name}; {cells} cells, {pending} pending",
    )
    again = run.observe("retry_after_rollback.code", code_of(lambda: decode(session, {1: 7})))
    cells = run.observe("retry_after_rollback.cells", kv.length(1))
    run.check("retry_after_rollback", again == ErrorCode.SUCCESS and cells == 5, f"the step again: {again.name}")
    session.device.reset_configuration()
    emptied = run.observe("reset_clears_the_kv.sequences", kv.sequences()) == []
    run.check("reset_clears_the_kv", emptied, "a configuration reset empties the KV manager")
    session.device.configure(session.calbin)
    generic.inject_faults(run, session)


def _manager_soak(run: ProbeRun) -> None:
    session = run.session()
    generic.load_and_soak(run, session)
    used = run.observe("kv_empty_after_load.used_tokens", session.kv.used_tokens)
    emptied = run.observe("kv_empty_after_load.sequences", session.kv.sequences()) == []
    run.check("kv_empty_after_load", used == 0 and emptied, f"{used} cells in use after the soak")


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


def _min_max(run: ProbeRun, name: str, session: Session, seq_id: int = 1) -> tuple[int, int]:
    kv = session.kv
    return run.observe(f"{name}.min", kv.seq_pos_min(seq_id)), run.observe(f"{name}.max", kv.seq_pos_max(seq_id))


def _min_max_runner(run: ProbeRun) -> None:
    session = run.session()
    kv = session.kv
    unknown = run.observe("unknown_sequence.code", code_of(lambda: kv.seq_pos_max(5)))
    run.check(
        "unknown_sequence",
        unknown == ErrorCode.KV_SEQUENCE_UNKNOWN,
        f"seq_pos_max of an unknown sequence: {unknown.name}",
    )
    kv.allocate(1, 3)
    run.check(
        "nothing_committed",
        _min_max(run, "nothing_committed", session) == (-1, -1),
        "-1 and -1 with cells allocated but not applied",
    )
    kv.free(1)
    prefill(session, 1, prompt_of(session, 10))
    low, high = _min_max(run, "after_prefill", session)
    run.check("after_prefill", (low, high) == (0, 9), f"min {low}, max {high}")
    decode(session, {1: 3})
    decode(session, {1: 4})
    high = run.observe("after_decode.max", kv.seq_pos_max(1))
    run.check("after_decode", high == 11, f"max {high} after two decode steps")
    kv.seq_rm(1, 0, 3)
    low, high = _min_max(run, "after_removing_the_front", session)
    run.check("after_removing_the_front", (low, high) == (3, 11), f"min {low}, max {high}")
    kv.clear()


# The golden plan: a 16-token prompt, its tail from 12 removed, then token 5 decoded.
MIN_MAX_PROMPT, MIN_MAX_KEPT, MIN_MAX_TOKEN = 16, 12, 5


def _min_max_golden(run: ProbeRun) -> None:
    """After the tail is removed the next token goes to max + 1, and its logits are the reference's for
    the shortened sequence."""
    session = run.session()
    prompt = prompt_of(session, MIN_MAX_PROMPT)
    prefill(session, 1, prompt)
    session.kv.seq_rm(1, MIN_MAX_KEPT)
    position = run.observe("next_is_max_plus_one.position", session.kv.seq_pos_max(1) + 1)
    logits = run.observe("continues_from_max.logits", decode(session, {1: MIN_MAX_TOKEN})[1].view(np.uint16))
    session.kv.free(1)
    expected = session.calbin.reference_logits(prompt[:MIN_MAX_KEPT], [MIN_MAX_TOKEN, 0])[1:2]
    report = compare(expected, logits[None, :])
    run.check("next_is_max_plus_one", position == MIN_MAX_KEPT, f"the next token went to position {position}")
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
    code = run.observe("max_kept_on_failure.code", code_of(lambda: decode(session, {1: 1})))
    session.device.disarm_faults()
    high = run.observe("max_kept_on_failure.max", session.kv.seq_pos_max(1))
    run.check("max_kept_on_failure", code == ErrorCode.KV_APPLY_FAILED and high == 5, f"{code.name}; max {high}")
    session.kv.clear()
    generic.inject_faults(run, session)


# The integration plan: sequences of these prompt lengths decoded together, each step a token each.
INTERLEAVED_PROMPTS, INTERLEAVED_STEPS = (5, 9), 4


def _min_max_integration(run: ProbeRun) -> None:
    """Two sequences interleaved: each one's min and max follow its own tokens only."""
    session = run.session()
    kv = session.kv
    if run.observe("interleaved_min_max.lanes", kv.lanes) > 1:
        for seq_id, length in enumerate(INTERLEAVED_PROMPTS, start=1):
            prefill(session, seq_id, prompt_of(session, length))
        highs: dict[int, list[int]] = {1: [], 2: []}
        for step in range(INTERLEAVED_STEPS):
            decode(session, {1: step, 2: step + 1})
            for seq_id, seen in highs.items():
                seen.append(kv.seq_pos_max(seq_id))
        kv.clear()
        wrong = [
            f"sequence {seq_id}: {seen}"
            for seq_id, seen in highs.items()
            if run.observe(f"interleaved_min_max.max_{seq_id}", seen) != interleaved_maxima(seq_id)
        ]
        run.check("interleaved_min_max", not wrong, "; ".join(wrong) or "each sequence's max follows its own tokens")
    generic.integrate(run, session)


def interleaved_maxima(seq_id: int) -> list[int]:
    """Sequence `seq_id`'s max after each interleaved decode step: its own prompt's length, then one more a step."""
    length = INTERLEAVED_PROMPTS[seq_id - 1]
    return [length + step for step in range(INTERLEAVED_STEPS)]


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
