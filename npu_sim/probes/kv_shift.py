"""Probe kv_shift (V26): every row of the seed's table — llama.cpp's KV edits remove, copy, keep, add and divide,
its state write and read — and the context shift built from them, on a package with two lanes or more (copy and
keep work across sequences)."""

import numpy as np

from npu_sim.client import greedy
from npu_sim.errors import ErrorCode, code_of
from npu_sim.golden import Tolerance, compare
from npu_sim.kv import KvManager
from npu_sim.model import KvCache
from npu_sim.probes import generic
from npu_sim.probes.kv import decode, prefill, prompt_of
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import NotExercised, Session


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
    copied = kv.seq_cp(1, 2, 0, 2)
    run.check(
        "copy",
        copied == 4 and kv.positions(2).tolist() == [0, 0, 1, 1],
        f"seq_cp of positions 0-1: {kv.positions(2).tolist()}",
    )
    kv.seq_keep(2)
    run.check("keep", kv.sequences() == [2], f"after seq_keep(2): sequences {kv.sequences()}")
    saved = kv.state_write(2)
    restored = kv.state_read(3, saved)
    positions = kv.positions(3).tolist()
    rows = decode(session, {2: 9, 3: 9})
    same = np.array_equal(rows[2].view(np.uint16), rows[3].view(np.uint16))
    run.check(
        "state",
        restored == 4 and positions == [0, 0, 1, 1] and same,
        f"state write of sequence 2 read back as 3: {restored} cells, positions {positions}, "
        f"{'the same bits' if same else 'other bits'} for the same next token",
    )
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
    run.metrics["operations"] = ["seq_rm", "seq_add", "seq_div", "seq_cp", "seq_keep", "state", "shift"]


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
    kv.seq_cp(1, 2)
    rows = decode(session, {1: 9, 2: 9})
    same = np.array_equal(rows[1].view(np.uint16), rows[2].view(np.uint16))
    run.check("copy:decodes_as_the_source", same, "the copy and the source give the same bits for the same token")
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
        "a state that is not one": (lambda: kv.state_read(2, b"not a state"), ErrorCode.KV_SHIFT_INVALID),
        "a state read into a sequence with cells": (
            lambda: kv.state_read(1, kv.state_write(1)),
            ErrorCode.KV_SHIFT_INVALID,
        ),
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
