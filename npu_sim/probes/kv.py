"""KV cache probes: the KV manager's calls (K07), sequence min/max (K05) and the llama.cpp edits (V26)."""

import numpy as np

from npu_sim.client import TIMEOUT_FACTOR, RequestResult, greedy, run_call, run_request
from npu_sim.errors import ErrorCode, code_of
from npu_sim.faults import Fault, FaultKind
from npu_sim.golden import Tolerance, compare
from npu_sim.kv import KvManager
from npu_sim.model import KvCache
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
    return np.random.default_rng([seed, length]).integers(0, session.calbin.config.vocab, length).tolist()


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


# kv_shift (V26)


def _keys_tolerance(session: Session) -> float:
    """Re-rotating an S8 key requantises it: allow two quantisation steps there, float rounding otherwise."""
    return 0.1 if session.calbin.k_dtype == "s8" else 1e-4


def fresh_layer0_keys(session: Session, tokens: list[int], positions: np.ndarray) -> np.ndarray:
    """Layer 0's keys depend only on each token and its position: what they must be after an edit."""
    cache = KvCache(session.calbin.config, 1, session.calbin.k_dtype, session.calbin.v_dtype)
    cache.pos[0, : len(tokens)] = positions
    session.calbin.reference().prefill(cache, 0, np.array(tokens), 0)
    return cache.k.lane(0, 0, len(tokens))


def _check_keys(run: ProbeRun, session: Session, name: str, tokens: list[int], seq_id: int = 1) -> None:
    kv = session.kv
    positions = kv.positions(seq_id)
    lane_keys = kv.cache.k.lane(0, kv.lane(seq_id), len(positions))
    expected = fresh_layer0_keys(session, tokens, positions)
    error = float(np.max(np.abs(lane_keys - expected))) if len(tokens) else 0.0
    run.check(
        f"{name}:keys_rerotated",
        error <= _keys_tolerance(session),
        f"layer-0 keys within {error:.2e} of fresh ones at the new positions",
    )


def _shift_runner(run: ProbeRun) -> None:
    """Each edit of V26's table and its effect on cells and positions."""
    session = run.session()
    kv = session.kv
    prefill(session, 1, prompt_of(session, 10))
    kv.seq_rm(1, 3, 6)
    run.check(
        "remove", kv.positions(1).tolist() == [0, 1, 2, 6, 7, 8, 9], f"after seq_rm(3, 6): {kv.positions(1).tolist()}"
    )
    kv.seq_add(1, 6, None, -3)
    run.check(
        "add", kv.positions(1).tolist() == list(range(7)), f"after seq_add(6, end, -3): {kv.positions(1).tolist()}"
    )
    kv.seq_div(1, 0, None, 2)
    run.check(
        "div",
        kv.positions(1).tolist() == [0, 0, 1, 1, 2, 2, 3],
        f"after seq_div(0, end, 2): {kv.positions(1).tolist()}",
    )
    if kv.lanes > 1:
        copied = kv.seq_cp(1, 2, 0, 2)
        run.check(
            "copy",
            copied == 4 and kv.positions(2).tolist() == [0, 0, 1, 1],
            f"seq_cp of positions 0-1: {kv.positions(2).tolist()}",
        )
        kv.seq_keep(2)
        run.check("keep", kv.sequences() == [2], f"after seq_keep(2): sequences {kv.sequences()}")
    else:
        refused = code_of(lambda: kv.seq_cp(1, 2))
        run.check(
            "copy_refused_without_a_lane", refused == ErrorCode.KV_NO_CAPACITY, f"seq_cp with one lane: {refused.name}"
        )
        run.finding("not_exercised", "seq_cp and seq_keep need a second lane; the package's decode batch is 1")
    kv.clear()
    prefill(session, 1, prompt_of(session, 12))
    kv.shift(1, discard=5, keep=3)
    run.check(
        "context_shift",
        kv.positions(1).tolist() == list(range(7)),
        f"after shift(discard 5, keep 3): {kv.positions(1).tolist()}",
    )
    decode(session, {1: 1})
    run.check("decode_after_edits", kv.seq_pos_max(1) == 7, "the next token went to position 7")
    kv.clear()
    run.metrics["operations"] = ["seq_rm", "seq_add", "seq_div", "seq_cp", "seq_keep", "shift"]


def _shift_golden(run: ProbeRun) -> None:
    """Moved keys read as if written at their new positions; V is moved as it is; a copy decodes as the source."""
    session = run.session()
    kv = session.kv
    tokens = prompt_of(session, 20)
    prefill(session, 1, tokens)
    v_before = kv.cache.v.lane(0, kv.lane(1), 20).copy()
    kv.shift(1, discard=6, keep=2)
    kept = tokens[:2] + tokens[8:]
    _check_keys(run, session, "shift", kept)
    v_after = kv.cache.v.lane(0, kv.lane(1), 14)
    same_v = np.array_equal(v_after[:, :2], v_before[:, :2]) and np.array_equal(v_after[:, 2:], v_before[:, 8:])
    run.check("shift:values_moved_as_they_are", same_v, "V of the kept cells unchanged, only moved")
    kv.seq_div(1, 0, None, 2)
    _check_keys(run, session, "div", kept)
    kv.seq_add(1, 0, None, 5)
    _check_keys(run, session, "add", kept)
    if kv.lanes > 1:
        kv.seq_cp(1, 2)
        rows = decode(session, {1: 9, 2: 9})
        same = np.array_equal(rows[1].view(np.uint16), rows[2].view(np.uint16))
        run.check("copy:decodes_as_the_source", same, "the copy and the source give the same bits for the same token")
    else:
        run.finding("not_exercised", "seq_cp needs a second lane; the package's decode batch is 1")
    kv.clear()


def _shift_failure(run: ProbeRun) -> None:
    """Every invalid edit is refused with its code and leaves the cells as they were."""
    session = run.session()
    kv = session.kv
    prefill(session, 1, prompt_of(session, 8))
    before = kv.positions(1).tolist()
    refusals = {
        "shift past the end": (lambda: kv.shift(1, 9), ErrorCode.KV_SHIFT_INVALID),
        "add past max_seq_len": (lambda: kv.seq_add(1, 0, None, kv.max_seq_len), ErrorCode.KV_SHIFT_INVALID),
        "divide by 0": (lambda: kv.seq_div(1, 0, None, 0), ErrorCode.KV_SHIFT_INVALID),
        "unknown sequence": (lambda: kv.seq_rm(42, 0, None), ErrorCode.KV_SEQUENCE_UNKNOWN),
    }
    for name, (action, expected) in refusals.items():
        code = code_of(action)
        run.check(
            f"refused:{name}", code == expected and kv.positions(1).tolist() == before, f"{code.name}, cells unchanged"
        )
    kv.allocate(1, 1)
    in_flight = code_of(lambda: kv.seq_rm(1, 0, 2))
    run.check(
        "refused:tokens in flight",
        in_flight == ErrorCode.KV_SHIFT_INVALID,
        f"an edit while a job is pending: {in_flight.name}",
    )
    kv.clear()
    generic.inject_faults(run, session)


def shifted_generation(session: Session, window: int, tokens_to_make: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Generate past `window` cells with llama.cpp's context shift (keep 4, drop half), on the device and on
    the reference with the same edits; greedy tokens from the device, fed to both."""
    config = session.calbin.config
    reference = session.calbin.reference()
    host = KvManager(config, 1, session.calbin.k_dtype, session.calbin.v_dtype)
    prompt = prompt_of(session, window // 2)
    device_rows = [prefill(session, 1, prompt)]
    start = host.allocate(1, len(prompt))
    host_rows = [reference.prefill(host.cache, 0, np.array(prompt), start)]
    host.apply(1)
    made = []
    for _ in range(tokens_to_make):
        if session.kv.length(1) >= window:
            for kv in (session.kv, host):
                kv.shift(1, discard=window // 2, keep=4)
        token = greedy(device_rows[-1])
        made.append(token)
        device_rows.append(decode(session, {1: token})[1])
        cell = host.allocate(1, 1)
        host_rows.append(reference.decode(host.cache, np.array([0]), np.array([token]), np.array([cell]))[0])
        host.apply(1)
    session.kv.free(1)
    return made, np.stack(device_rows), np.stack(host_rows)


def _shift_integration(run: ProbeRun) -> None:
    session = run.session()
    window = min(64, session.calbin.max_seq_len)
    made, on_device, on_reference = shifted_generation(session, window, 2 * window)
    report = compare(on_reference, on_device, Tolerance(max_rel=0.02, cosine_min=0.999, top1_min=0.95, topk_min=0.0))
    run.check(
        "generation_past_the_window", len(made) == 2 * window, f"{len(made)} tokens through a {window}-cell window"
    )
    run.check(
        "shifted_like_the_reference",
        report["passed"],
        "; ".join(report["failures"]) or "the device's logits follow the reference through every shift",
    )
    run.metrics["shift"] = {"window": window, "tokens": len(made), "cosine": report["cosine"], "top1": report["top1"]}
    generic.integrate(run, session)


KV_SHIFT = ProbeSpec(
    "kv_shift",
    "The llama.cpp KV edits the runtime's DoShift must carry (V26): remove, copy, keep, add and div, and the "
    "context shift built from them; moved keys re-rotated to their new positions, invalid edits refused.",
    generic.plans(
        runner=StagePlan("each edit and its effect on cells and positions; decoding after the edits", _shift_runner),
        golden=StagePlan(
            "moved keys equal fresh keys at the new positions, V moved as it is, a copy decodes as its source",
            _shift_golden,
        ),
        failure=StagePlan("every invalid edit refused with its code, cells unchanged; each fault kind", _shift_failure),
        integration=StagePlan(
            "generation past the context window with context shifts, against the reference doing the same",
            _shift_integration,
        ),
    ),
    capabilities=("kv-manager-api",),
    metrics=(
        MetricSpec("shift", "window, tokens generated, cosine and top-1 against the reference through the shifts"),
    ),
)

KV = [KV_MANAGER, KV_SEQ_MIN_MAX, KV_SHIFT]
