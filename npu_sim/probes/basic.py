"""Probes of the package itself: a target's health, the golden comparison, the golden read back (I11),
decode at batch N (V18) and the prefill shape profile (V19)."""

import math
from dataclasses import dataclass, field

import numpy as np

from npu_sim.calbin.goldens import LaneGoldens
from npu_sim.client import TIMEOUT_FACTOR, run_call, run_request
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.golden import compare
from npu_sim.kv import kv_cache_bytes
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import NotExercised, Session
from npu_sim.stages import golden as golden_stage
from npu_sim.stages import health
from npu_sim.stages.common import golden_steps, tolerances


def _health(run: ProbeRun) -> None:
    session = run.session()
    reference = run.ctx.golden(session.calbin)
    params = {"decode_steps": run.stage_params.get("decode_steps") or 2}
    health.routine(run, session, reference, tolerances(run.stage_params), golden_steps(params, reference))


HEALTH = ProbeSpec(
    "health",
    "A known-good package still loads, decodes and matches its golden: for target health checks.",
    generic.plans(health=StagePlan("load, a couple of decode steps, their golden comparison", _health)),
    metrics=(MetricSpec("tensors", "max_abs, max_rel, cosine, top1, topk per golden tensor"),),
)

GOLDEN = ProbeSpec(
    "golden",
    "The device's logits against the golden the job names: the vendor's file (golden_source vendor) or the "
    "package's own (golden_source package).",
    generic.plans(),
    metrics=(MetricSpec("tensors", "per tensor: errors, cosine, top-k agreement, histogram, tolerance"),),
)


# golden_readback (I11)


def _readback_runner(run: ProbeRun) -> None:
    calbin = run.calbin()
    read = calbin.read_golden()
    loaded = calbin.goldens.arrays()
    same = [name for name, array in read.arrays().items() if name in loaded and np.array_equal(array, loaded[name])]
    run.check("golden_read_back", len(same) == len(loaded), f"{len(same)} of {len(loaded)} arrays read back unchanged")
    inside = all(ids.min() >= 0 and ids.max() < calbin.config.vocab for ids in (read.prompt_ids, read.decode_input_ids))
    run.check("golden_inputs_valid", inside, f"{len(read.prompt_ids)} prompt ids, {read.decode_steps} decode inputs")
    run.metrics["arrays"] = sorted(read.arrays())


def _readback_golden(run: ProbeRun) -> None:
    """V42: the golden's inputs, read back from the package, reproduce its outputs on the device."""
    session = run.session()
    read = session.calbin.read_golden()
    golden_stage.routine(run, session, read, tolerances(run.stage_params), golden_steps(run.stage_params, read))


def _readback_failure(run: ProbeRun) -> None:
    session = run.session()
    before = session.calbin.read_golden().arrays()
    session.device.inject(Fault(FaultKind.DEVICE_CRASH))
    crashed = generic_request_code(session)
    session.device.reset_device()
    session.device.configure(session.calbin)
    after = session.calbin.read_golden().arrays()
    same = all(np.array_equal(before[name], after[name]) for name in before)
    run.check("crash_reported", crashed == ErrorCode.DEVICE_CRASHED, f"the request ended with {crashed.name}")
    run.check("golden_read_back_after_reset", same, "the golden reads back unchanged after a device reset")
    generic.inject_faults(run, session)


def generic_request_code(session: Session) -> ErrorCode:
    """The code a request on the golden prompt ends with."""
    golden = session.calbin.goldens
    return run_request(session.device, session.calbin, session.kv, 9, golden.prompt_ids.tolist(), 1).code


GOLDEN_READBACK = ProbeSpec(
    "golden_readback",
    "The SDK reads the package's golden back (I11), and its inputs reproduce its outputs on the device (V42).",
    generic.plans(
        runner=StagePlan(
            "read the golden back from the package; every array unchanged, inputs in range", _readback_runner
        ),
        golden=StagePlan("the read-back golden's inputs on the device, compared with its outputs", _readback_golden),
        failure=StagePlan(
            "after a device crash and reset the golden reads back unchanged; each fault kind", _readback_failure
        ),
    ),
    capabilities=("golden-readback",),
    metrics=(MetricSpec("arrays", "the arrays read back"), MetricSpec("tensors", "as the golden stage")),
)


# decode_batch (V18, V24)


def _lane_goldens(run: ProbeRun) -> LaneGoldens:
    """The golden's lanes; NotExercised unless the package's decode batch is the probe's and the golden
    has a golden per lane."""
    calbin, batch = run.calbin(), run.params["batch"]
    if calbin.decode_lanes != batch:
        raise NotExercised(f"the package's decode batch is {calbin.decode_lanes}; the probe asks for {batch}")
    golden = run.ctx.golden(calbin)
    if golden.lanes is None or golden.lanes.lanes < batch:
        have = 0 if golden.lanes is None else golden.lanes.lanes
        raise NotExercised(f"the golden ({golden.source}) has per-lane goldens for {have} lanes, not {batch}")
    return golden.lanes


def _has_lane_goldens(run: ProbeRun) -> None:
    _lane_goldens(run)


@dataclass
class LaneRun:
    rows: dict[int, list[np.ndarray]] = field(default_factory=dict)  # per lane: prefill row, then decode rows
    largest: int = 0  # lanes in the fullest decode call
    spread: int = 0  # how far apart the positions in one decode call were, at most
    error: CalrtError | None = None


def run_lanes(session: Session, lanes: LaneGoldens, batch: int) -> LaneRun:
    """Every lane's prompt, then its decode steps fed its golden tokens, with lanes overlapping: a few new
    lanes are prefilled each round while the earlier ones decode, so one decode call carries lanes at
    different positions. Returns each lane's logits rows, the largest decode call and the first error."""
    device, calbin, kv = session.device, session.calbin, session.kv
    prefill, decode = calbin.model_of_type("llm_prefill"), calbin.model_of_type("llm_decode")
    steps = lanes.decode_input_ids.shape[1]
    per_round = math.ceil(batch / max(1, steps - 1))
    result = LaneRun({lane: [] for lane in range(batch)})
    rows = result.rows
    done = dict.fromkeys(range(batch), 0)
    timing = session.handle.timing
    try:
        for round_ in range(batch + steps):
            for lane in range(round_ * per_round, min(batch, (round_ + 1) * per_round)):
                prompt = lanes.prompts[lane].tolist()
                kv.allocate(lane + 1, len(prompt))
                timeout = TIMEOUT_FACTOR * timing.prefill_call(len(prompt)).total_ms
                rows[lane].append(run_call(device, kv, prefill, {lane + 1: prompt}, timeout).logits[lane + 1])
            active = [lane for lane in range(batch) if rows[lane] and done[lane] < steps]
            if not active:
                continue
            contexts = [kv.allocate(lane + 1, 1) + 1 for lane in active]
            tokens = {lane + 1: [int(lanes.decode_input_ids[lane, done[lane]])] for lane in active}
            out = run_call(device, kv, decode, tokens, TIMEOUT_FACTOR * timing.decode_call(contexts).total_ms).logits
            result.largest = max(result.largest, len(active))
            result.spread = max(result.spread, max(contexts) - min(contexts))
            for lane in active:
                rows[lane].append(out[lane + 1])
                done[lane] += 1
    except CalrtError as raised:
        result.error = raised
    for seq_id in kv.sequences():
        kv.free(seq_id)
    return result


def check_batch_capacity(run: ProbeRun, batch: int) -> bool:
    """A08: each chiplet's DRAM reservation (A05) holds its parameter blocks (A02/A03) and its share of
    `batch` lanes' KV at max_seq_len (layers x KV heads x 2 x head dim x context x bytes); and the timing
    model finds the package's parameters and KV within a chiplet at the scale it stands for."""
    calbin = run.calbin()
    reservations = calbin.meta.reservations
    kv = kv_cache_bytes(calbin.config, calbin.max_seq_len, batch, calbin.k_dtype, calbin.v_dtype)
    kv_share = kv // max(1, len(reservations))
    short = []
    for chiplet, (dram, _) in sorted(reservations.items()):
        params = sum(b.size or 0 for b in calbin.meta.blocks if b.chip_mask >> chiplet & 1)
        if dram is None or dram < params + kv_share:
            short.append(
                f"chip{chiplet}.dram_reserved {dram} B < {params} B of parameters + {kv_share} B of KV for "
                f"{batch} lanes at {calbin.max_seq_len} positions"
            )
    run.metrics["kv_bytes_for_batch"] = kv
    fits = run.check(
        "kv_capacity",
        bool(reservations) and not short,
        "; ".join(short) or f"every chiplet's reservation holds its parameters and {batch} lanes' KV",
    )
    return run.check("timing_capacity", calbin.timing.predicted, calbin.timing.note) and fits


def _batch_runner(run: ProbeRun) -> None:
    lanes = _lane_goldens(run)
    batch, session = run.params["batch"], run.session()
    if not check_batch_capacity(run, batch):
        return
    result = run_lanes(session, lanes, batch)
    error = result.error
    run.check("lanes_completed", error is None, str(error) if error else f"{batch} lanes prefilled and decoded")
    largest, spread = result.largest, result.spread
    run.check(
        "lanes_overlapped",
        largest == batch and spread > 0,
        f"the largest decode call carried {largest} of {batch} lanes, positions up to {spread} apart",
    )
    rows = [r for lane_rows in result.rows.values() for r in lane_rows]
    finite = bool(rows) and all(np.isfinite(r.astype(np.float32)).all() for r in rows)
    run.check("logits_finite", finite, f"{len(rows)} rows of logits")
    run.check("kv_released", session.kv.used_tokens == 0, f"{session.kv.used_tokens} KV tokens in use afterwards")
    run.metrics.update({"batch": batch, "largest_decode_call": largest, "counters": session.device.counters()})


def compare_lanes(run: ProbeRun, lanes: LaneGoldens, rows: dict[int, list[np.ndarray]], batch: int) -> bool:
    limit = tolerances(run.stage_params)["decode_logits"]
    failing, worst = [], 1.0
    for lane in range(batch):
        expected = np.concatenate([lanes.prefill_logits[lane : lane + 1], lanes.decode_logits[lane]])
        if len(rows[lane]) != len(expected):
            failing.append(f"lane {lane}: {len(rows[lane])} rows, expected {len(expected)}")
            continue
        report = compare(expected, np.stack(rows[lane]), limit)
        worst = min(worst, report["cosine"] or 0.0)
        if not report["passed"]:
            failing.append(f"lane {lane}: {'; '.join(report['failures'])}")
    run.metrics["worst_lane_cosine"] = worst
    return run.check("lane_goldens", not failing, "; ".join(failing[:4]) or f"all {batch} lanes within tolerance")


def _batch_golden(run: ProbeRun) -> None:
    lanes = _lane_goldens(run)
    batch = run.params["batch"]
    result = run_lanes(run.session(), lanes, batch)
    if run.check("lanes_completed", result.error is None, str(result.error or "all lanes ran")):
        compare_lanes(run, lanes, result.rows, batch)


def _batch_failure(run: ProbeRun) -> None:
    """A core exception in a decode call carrying every lane: each lane's request fails, the core reset
    brings service back, and the whole batch run again matches the lane goldens."""
    lanes = _lane_goldens(run)
    batch, session = run.params["batch"], run.session()
    steps = lanes.decode_input_ids.shape[1]
    # Calls before the fault: all prefills plus the decode rounds until every lane is in.
    rounds_to_full = math.ceil(batch / math.ceil(batch / max(1, steps - 1)))
    session.device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=batch + rounds_to_full - 1))
    failed = run_lanes(session, lanes, batch)
    session.device.disarm_faults()
    code = failed.error.code if failed.error else ErrorCode.SUCCESS
    run.check("batch_fault_reported", code == ErrorCode.CORE_EXCEPTION, f"the batch ended with {code.name}")
    if session.device.faulted_core is not None:
        session.device.reset_core(*session.device.faulted_core)
    again = run_lanes(session, lanes, batch)
    if run.check("batch_after_recovery", again.error is None, str(again.error or "the batch ran again")):
        compare_lanes(run, lanes, again.rows, batch)


def _batch_integration(run: ProbeRun) -> None:
    batch = run.params["batch"]
    # Long enough that the first lanes are still decoding when the last one joins.
    generic.integrate(
        run,
        sequences=max(run.stage_params.get("sequences") or 0, 2 * batch),
        max_new_tokens=max(run.stage_params.get("max_new_tokens") or 0, batch + 3),
    )
    run.check(
        "batch_filled",
        run.metrics["max_active"] == batch,
        f"up to {run.metrics['max_active']} of {batch} lanes per step",
    )


def _batch_soak(run: ProbeRun) -> None:
    batch = run.params["batch"]
    generic.load_and_soak(run, concurrency=batch)
    run.check(
        "batch_filled",
        run.metrics["max_active"] == batch,
        f"up to {run.metrics['max_active']} of {batch} lanes per step",
    )


DECODE_BATCH = ProbeSpec(
    "decode_batch",
    "Decode at batch N with overlapping sequences, each lane against its own golden (V18). A package whose "
    "decode batch is not N proves nothing about N: not_exercised.",
    generic.plans(
        runner=StagePlan(
            "the reservations hold N lanes' KV beside the parameters (A08) and the timing model fits the package; "
            "N lanes joining a few per round, so decode calls mix positions; all complete",
            _batch_runner,
        ),
        golden=StagePlan("every lane's prefill and decode logits against its lane golden", _batch_golden),
        failure=StagePlan(
            "a core exception in a full batch, the reset, the batch again against the goldens", _batch_failure
        ),
        integration=StagePlan("the serving loop with 2N sequences; some step carries all N lanes", _batch_integration),
        soak=StagePlan("the soak at concurrency N; some step carries all N lanes", _batch_soak),
    ),
    capabilities=("decode-batch-4", "decode-batch-8", "decode-batch-16", "kv-batch-layout"),
    requires=_has_lane_goldens,
    params=(ParamSpec("batch", "integer", 8, "the decode batch the package must have", minimum=1, maximum=64),),
    metrics=(
        MetricSpec("largest_decode_call", "lanes in the fullest decode call"),
        MetricSpec("worst_lane_cosine", "the lowest cosine of any lane against its golden"),
        MetricSpec("kv_bytes_for_batch", "A08's KV bytes for N lanes at max_seq_len"),
    ),
)


# prefill_shapes (V19, R12)


def _lengths(session: Session) -> list[int]:
    declared = session.calbin.prefill_lengths
    top = session.calbin.max_seq_len
    return declared or sorted({1, 7, 16, top // 2, top})


def _prefill(session: Session, prompts: dict[int, list[int]]) -> dict[int, np.ndarray]:
    prefill = session.calbin.model_of_type("llm_prefill")
    timeout = TIMEOUT_FACTOR * session.handle.timing.prefill_call(sum(map(len, prompts.values()))).total_ms
    try:
        for seq_id, prompt in prompts.items():
            session.kv.allocate(seq_id, len(prompt))
        return run_call(session.device, session.kv, prefill, prompts, timeout).logits
    finally:
        for seq_id in prompts:
            if seq_id in session.kv.sequences():
                session.kv.free(seq_id)


def _prompt(session: Session, length: int) -> list[int]:
    return list(np.random.default_rng(length).integers(0, session.calbin.config.vocab, length))


def _shapes_runner(run: ProbeRun) -> None:
    session = run.session()
    calbin, lengths = session.calbin, _lengths(session)
    ran = []
    for length in lengths:
        logits = _prefill(session, {1: _prompt(session, length)})[1]
        ran.append(length if np.isfinite(logits.astype(np.float32)).all() else -length)
    run.check(
        "declared_lengths_run",
        ran == lengths,
        f"prefilled {lengths} ({'static' if calbin.prefill_lengths else 'dynamic'})",
    )
    if calbin.prefill_lengths:
        short = calbin.prefill_lengths[0] - 1 or None
        if short:
            _prefill(session, {1: _prompt(session, short)})
            padded = session.device.call_log[-1].time.total_ms
            bucket = session.handle.timing.prefill_call(calbin.prefill_lengths[0]).total_ms
            run.check(
                "padded_to_the_profile",
                math.isclose(padded, bucket),
                f"{short} tokens cost the {calbin.prefill_lengths[0]}-token shape",
            )
        too_long = max(calbin.prefill_lengths) + 1
        if too_long <= calbin.max_seq_len:
            try:
                _prefill(session, {1: _prompt(session, too_long)})
                code = ErrorCode.SUCCESS
            except CalrtError as error:
                code = error.code
            run.check("beyond_the_profile_refused", code == ErrorCode.SHAPE_MISMATCH, f"{too_long} tokens: {code.name}")
    batch = calbin.model_of_type("llm_prefill").batch
    if batch > 1:
        prompts = {i + 1: _prompt(session, lengths[i % len(lengths)] // 2 or 1) for i in range(batch)}
        together = _prefill(session, prompts)
        alone = {seq_id: _prefill(session, {seq_id: prompt})[seq_id] for seq_id, prompt in prompts.items()}
        same = all(np.array_equal(together[s].view(np.uint16), alone[s].view(np.uint16)) for s in prompts)
        run.check("prefill_batch", same, f"{batch} sequences in one call equal them one at a time")
    run.metrics.update({"lengths": lengths, "prefill_batch": batch, "static": bool(calbin.prefill_lengths)})


def _shapes_golden(run: ProbeRun) -> None:
    session = run.session()
    limit = tolerances(run.stage_params)["prefill_logits"]
    failing, reports = [], {}
    for length in _lengths(session):
        prompt = _prompt(session, length)
        logits = _prefill(session, {1: prompt})[1]
        report = compare(session.calbin.reference_logits(prompt, [0])[:1], logits[None, :], limit)
        reports[str(length)] = {k: report[k] for k in ("max_abs", "cosine", "top1")}
        if not report["passed"]:
            failing.append(f"{length} tokens: {'; '.join(report['failures'])}")
    run.check(
        "prefill_lengths_match_reference", not failing, "; ".join(failing) or f"{len(reports)} lengths within tolerance"
    )
    run.metrics["lengths"] = reports
    generic.compare_with_golden(run, session)


def _shapes_failure(run: ProbeRun) -> None:
    """Past a static profile the sub-model refuses the shape; past max_seq_len the KV cache has no room."""
    session = run.session()
    calbin = session.calbin
    longest = max(calbin.prefill_lengths) if calbin.prefill_lengths else calbin.max_seq_len
    expected = ErrorCode.SHAPE_MISMATCH if longest < calbin.max_seq_len else ErrorCode.KV_NO_CAPACITY
    try:
        _prefill(session, {1: _prompt(session, longest + 1)})
        code = ErrorCode.SUCCESS
    except CalrtError as error:
        code = error.code
    run.check("too_long_refused", code == expected, f"{longest + 1} tokens: {code.name}, expected {expected.name}")
    still = _prefill(session, {1: _prompt(session, 3)})[1]
    run.check(
        "serves_after_refusal", bool(np.isfinite(still.astype(np.float32)).all()), "a 3-token prefill runs afterwards"
    )
    generic.inject_faults(run, session)


PREFILL_SHAPES = ProbeSpec(
    "prefill_shapes",
    "Prefill at the lengths and batch the package declares (V19): a static profile pads to its next length "
    "(R12) and refuses longer prompts; a dynamic one takes any length up to max_seq_len.",
    generic.plans(
        runner=StagePlan(
            "prefill at each declared length (or a spread for dynamic), padding, refusal, batch", _shapes_runner
        ),
        golden=StagePlan("each length's logits against the reference, then the golden comparison", _shapes_golden),
        failure=StagePlan(
            "an over-long prompt refused with SHAPE_MISMATCH and service goes on; each fault kind", _shapes_failure
        ),
    ),
    capabilities=("prefill-batch-dynamic-shape",),
    metrics=(MetricSpec("lengths", "the prefill lengths exercised, and per length the error against the reference"),),
)

BASIC = [HEALTH, GOLDEN, GOLDEN_READBACK, DECODE_BATCH, PREFILL_SHAPES]
