"""Probe kv_shift (V26): every row of the seed's table — llama.cpp's KV edits remove, copy, keep, add and divide,
its state write and read — and the context shift built from them, on a package with two lanes or more (copy and
keep work across sequences)."""

import numpy as np

from npu_sim.client import greedy
from npu_sim.dtypes import bf16_to_bits
from npu_sim.errors import ErrorCode, code_of
from npu_sim.golden import Tolerance, compare
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin
from npu_sim.model import KvCache
from npu_sim.probes import generic
from npu_sim.probes.kv import decode, prefill, prompt_of
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import NotExercised, Session

# What each edit of the runner plan must leave, as the caller judges the observations too
# (acceptance.probe_judging): the positions of sequence 1 (10 cells) after seq_rm(3, 6), seq_add(6, end, -3)
# and seq_div(0, end, 2); a copy of positions 0-1 into sequence 2; seq_keep(2); then a fresh 12-cell sequence
# after shift(discard 5, keep 3), and the position of the token decoded after it.
REMOVED = [0, 1, 2, 6, 7, 8, 9]
ADDED = list(range(7))
DIVIDED = [0, 0, 1, 1, 2, 2, 3]
COPIED_CELLS = 4
COPIED = [0, 0, 1, 1]
KEPT = [2]
SHIFTED = list(range(7))
NEXT_POSITION = 7
# The golden plan: a 20-token prompt, shift(discard 6, keep 2), then seq_div(0, end, 2), then seq_add(0, end, 5).
GOLDEN_PROMPT = 20
GOLDEN_DISCARD, GOLDEN_KEEP = 6, 2
GOLDEN_POSITIONS = {
    "shift": list(range(14)),
    "div": [p // 2 for p in range(14)],
    "add": [p // 2 + 5 for p in range(14)],
}
# The failure plan's invalid edits and the code each must be refused with.
REFUSALS = {
    "shift past the end": ErrorCode.KV_SHIFT_INVALID,
    "add past max_seq_len": ErrorCode.KV_SHIFT_INVALID,
    "divide by 0": ErrorCode.KV_SHIFT_INVALID,
    "unknown sequence": ErrorCode.KV_SEQUENCE_UNKNOWN,
    "a state that is not one": ErrorCode.KV_SHIFT_INVALID,
    "a state read into a sequence with cells": ErrorCode.KV_SHIFT_INVALID,
    "tokens in flight": ErrorCode.KV_SHIFT_INVALID,
}
FAILURE_PROMPT = 8
# The integration plan: a window of at most this many cells, generated through twice over.
WINDOW = 64
SHIFT_TOLERANCE = Tolerance(max_rel=0.02, cosine_min=0.999, top1_min=0.95, topk_min=0.0)


def kv_tolerance(dtype: str) -> float:
    """Re-rotating an S8 key requantises it: allow two quantisation steps there, float rounding otherwise."""
    return 0.1 if dtype == "s8" else 1e-4


def kept_tokens(tokens: list[int]) -> list[int]:
    """What the golden plan's shift keeps of its prompt."""
    return tokens[:GOLDEN_KEEP] + tokens[GOLDEN_KEEP + GOLDEN_DISCARD :]


def fresh_layer0(calbin: Calbin, tokens: list[int], positions: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Layer 0's keys and values depend only on each token and its position (values on the token alone): what
    they must be after an edit, [kv_heads, len(tokens), head_dim] each."""
    cache = KvCache(calbin.config, 1, calbin.k_dtype, calbin.v_dtype)
    cache.pos[0, : len(tokens)] = positions
    calbin.reference().prefill(cache, 0, np.array(tokens), 0)
    return cache.k.lane(0, 0, len(tokens)), cache.v.lane(0, 0, len(tokens))


def _observe_keys(run: ProbeRun, session: Session, name: str, tokens: list[int], seq_id: int = 1) -> None:
    kv = session.kv
    positions = run.observe(f"{name}.positions", kv.positions(seq_id))
    lane_keys = run.observe(f"{name}.keys", kv.cache.k.lane(0, kv.lane(seq_id), len(positions)))
    expected, _ = fresh_layer0(session.calbin, tokens, positions)
    error = float(np.max(np.abs(lane_keys - expected))) if len(tokens) else 0.0
    run.check(
        f"{name}:keys_rerotated",
        error <= kv_tolerance(session.calbin.k_dtype),
        f"layer-0 keys within {error:.2e} of fresh ones at the new positions",
    )


def _bits(row: np.ndarray) -> np.ndarray:
    return row.view(np.uint16)


def _shift_runner(run: ProbeRun) -> None:
    """Each edit of V26's table and its effect on cells and positions."""
    session = run.session()
    kv = session.kv
    prefill(session, 1, prompt_of(session, 10))
    kv.seq_rm(1, 3, 6)
    removed = run.observe("remove.positions", kv.positions(1)).tolist()
    run.check("remove", removed == REMOVED, f"after seq_rm(3, 6): {removed}")
    kv.seq_add(1, 6, None, -3)
    added = run.observe("add.positions", kv.positions(1)).tolist()
    run.check("add", added == ADDED, f"after seq_add(6, end, -3): {added}")
    kv.seq_div(1, 0, None, 2)
    divided = run.observe("div.positions", kv.positions(1)).tolist()
    run.check("div", divided == DIVIDED, f"after seq_div(0, end, 2): {divided}")
    copied = run.observe("copy.cells", kv.seq_cp(1, 2, 0, 2))
    copy = run.observe("copy.positions", kv.positions(2)).tolist()
    run.check("copy", copied == COPIED_CELLS and copy == COPIED, f"seq_cp of positions 0-1: {copy}")
    kv.seq_keep(2)
    kept = run.observe("keep.sequences", kv.sequences())
    run.check("keep", kept == KEPT, f"after seq_keep(2): sequences {kept}")
    saved = kv.state_write(2)
    restored = run.observe("state.cells", kv.state_read(3, saved))
    positions = run.observe("state.positions", kv.positions(3)).tolist()
    rows = decode(session, {2: 9, 3: 9})
    same = np.array_equal(
        run.observe("state.source_logits", _bits(rows[2])), run.observe("state.read_logits", _bits(rows[3]))
    )
    run.check(
        "state",
        restored == COPIED_CELLS and positions == COPIED and same,
        f"state write of sequence 2 read back as 3: {restored} cells, positions {positions}, "
        f"{'the same bits' if same else 'other bits'} for the same next token",
    )
    kv.clear()
    prefill(session, 1, prompt_of(session, 12))
    kv.shift(1, discard=5, keep=3)
    shifted = run.observe("context_shift.positions", kv.positions(1)).tolist()
    run.check("context_shift", shifted == SHIFTED, f"after shift(discard 5, keep 3): {shifted}")
    decode(session, {1: 1})
    next_position = run.observe("decode_after_edits.pos_max", kv.seq_pos_max(1))
    run.check("decode_after_edits", next_position == NEXT_POSITION, f"the next token went to position {next_position}")
    kv.clear()
    run.metrics["operations"] = ["seq_rm", "seq_add", "seq_div", "seq_cp", "seq_keep", "state", "shift"]


def _shift_golden(run: ProbeRun) -> None:
    """Moved keys read as if written at their new positions; V is moved as it is; a copy decodes as the source."""
    session = run.session()
    kv = session.kv
    tokens = prompt_of(session, GOLDEN_PROMPT)
    prefill(session, 1, tokens)
    v_before = kv.cache.v.lane(0, kv.lane(1), GOLDEN_PROMPT).copy()
    kv.shift(1, discard=GOLDEN_DISCARD, keep=GOLDEN_KEEP)
    kept = kept_tokens(tokens)
    _observe_keys(run, session, "shift", kept)
    v_after = run.observe("shift.values", kv.cache.v.lane(0, kv.lane(1), len(kept)))
    end = GOLDEN_KEEP + GOLDEN_DISCARD
    same_v = np.array_equal(v_after[:, :GOLDEN_KEEP], v_before[:, :GOLDEN_KEEP]) and np.array_equal(
        v_after[:, GOLDEN_KEEP:], v_before[:, end:]
    )
    run.check("shift:values_moved_as_they_are", same_v, "V of the kept cells unchanged, only moved")
    kv.seq_div(1, 0, None, 2)
    _observe_keys(run, session, "div", kept)
    kv.seq_add(1, 0, None, 5)
    _observe_keys(run, session, "add", kept)
    kv.seq_cp(1, 2)
    rows = decode(session, {1: 9, 2: 9})
    same = np.array_equal(
        run.observe("copy.source_logits", _bits(rows[1])), run.observe("copy.copy_logits", _bits(rows[2]))
    )
    run.check("copy:decodes_as_the_source", same, "the copy and the source give the same bits for the same token")
    kv.clear()


def _shift_failure(run: ProbeRun) -> None:
    """Every invalid edit is refused with its code and leaves the cells as they were."""
    session = run.session()
    kv = session.kv
    prefill(session, 1, prompt_of(session, FAILURE_PROMPT))
    before = kv.positions(1).tolist()
    actions = {
        "shift past the end": lambda: kv.shift(1, FAILURE_PROMPT + 1),
        "add past max_seq_len": lambda: kv.seq_add(1, 0, None, kv.max_seq_len),
        "divide by 0": lambda: kv.seq_div(1, 0, None, 0),
        "unknown sequence": lambda: kv.seq_rm(42, 0, None),
        "a state that is not one": lambda: kv.state_read(2, b"not a state"),
        "a state read into a sequence with cells": lambda: kv.state_read(1, kv.state_write(1)),
    }
    for name, action in actions.items():
        code = run.observe(f"refused:{name}.code", code_of(action))
        after = run.observe(f"refused:{name}.positions", kv.positions(1)).tolist()
        run.check(f"refused:{name}", code == REFUSALS[name] and after == before, f"{code.name}, cells unchanged")
    kv.allocate(1, 1)
    in_flight = run.observe("refused:tokens in flight.code", code_of(lambda: kv.seq_rm(1, 0, 2)))
    run.check(
        "refused:tokens in flight",
        in_flight == REFUSALS["tokens in flight"],
        f"an edit while a job is pending: {in_flight.name}",
    )
    kv.clear()
    generic.inject_faults(run, session)


def reference_shifted_rows(calbin: Calbin, prompt: list[int], tokens: list[int], window: int) -> np.ndarray:
    """The reference's logits for `prompt` then `tokens` fed one by one through a `window`-cell cache shifted
    as llama.cpp does (keep 4, drop half) whenever it is full: [1 + len(tokens), vocab]."""
    reference = calbin.reference()
    host = KvManager(calbin.config, 1, calbin.k_dtype, calbin.v_dtype)
    start = host.allocate(1, len(prompt))
    rows = [reference.prefill(host.cache, 0, np.array(prompt), start)]
    host.apply(1)
    for token in tokens:
        if host.length(1) >= window:
            host.shift(1, discard=window // 2, keep=4)
        cell = host.allocate(1, 1)
        rows.append(reference.decode(host.cache, np.array([0]), np.array([token]), np.array([cell]))[0])
        host.apply(1)
    return np.stack(rows)


def shifted_generation(session: Session, window: int, tokens_to_make: int) -> tuple[list[int], np.ndarray]:
    """Generate past `window` cells with llama.cpp's context shift (keep 4, drop half) on the device, greedy:
    the tokens made and the logits of each step."""
    prompt = prompt_of(session, window // 2)
    device_rows = [prefill(session, 1, prompt)]
    made = []
    for _ in range(tokens_to_make):
        if session.kv.length(1) >= window:
            session.kv.shift(1, discard=window // 2, keep=4)
        token = greedy(device_rows[-1])
        made.append(token)
        device_rows.append(decode(session, {1: token})[1])
    session.kv.free(1)
    return made, np.stack(device_rows)


def _shift_integration(run: ProbeRun) -> None:
    session = run.session()
    window = run.observe("shift.window", min(WINDOW, session.calbin.max_seq_len))
    made, on_device = shifted_generation(session, window, 2 * window)
    run.observe("shift.tokens", made)
    run.observe("shift.logits", bf16_to_bits(on_device))
    on_reference = reference_shifted_rows(session.calbin, prompt_of(session, window // 2), made, window)
    report = compare(on_reference, on_device, SHIFT_TOLERANCE)
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


def _two_lanes(run: ProbeRun) -> None:
    """Copy, keep and state move cells between sequences: one lane cannot show them."""
    if run.calbin().decode_lanes < 2:
        raise NotExercised(
            "copy, keep and state need a second lane and the package's decode batch is 1; V26's table asks for all six"
        )


KV_SHIFT = ProbeSpec(
    "kv_shift",
    "The llama.cpp KV semantics the runtime's DoShift must carry (V26's table): remove, copy, keep, add, div and "
    "state, and the context shift built from them; moved keys re-rotated to their new positions, a state read "
    "back decodes as its source, invalid edits refused. Needs a package of decode batch 2 or more.",
    generic.plans(
        runner=StagePlan(
            "each edit and the state write and read, their effect on cells and positions; decoding after them",
            _shift_runner,
        ),
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
    requires=_two_lanes,
    metrics=(
        MetricSpec("shift", "window, tokens generated, cosine and top-1 against the reference through the shifts"),
    ),
)
