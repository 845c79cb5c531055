"""Probes of where models live: a single-chiplet package with chip affinity (V30) and two models configured at
once (V31: separate reservations, queues, KV and faults); helpers the residency probe shares."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npu_sim.client import RequestResult, recover, run_request
from npu_sim.device import DeviceStatus, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.loaded_calbin import Calbin
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.probes.together import serve_together
from npu_sim.protocol.context import NotExercised, Recorder, Session
from npu_sim.stages import integration, soak

SECOND = "second"


def golden_request(session: Session, seq_id: int = 1) -> RequestResult:
    g = session.calbin.goldens
    steps = min(4, g.decode_steps)
    forced = g.decode_input_ids[:steps].tolist()
    return run_request(session.device, session.calbin, session.kv, seq_id, g.prompt_ids.tolist(), steps, forced=forced)


def same_bits(a: RequestResult, b: RequestResult) -> bool:
    return a.ok and b.ok and np.array_equal(a.logits_rows().view(np.uint16), b.logits_rows().view(np.uint16))


# single_chiplet (V30)


def _single_runner(run: ProbeRun) -> None:
    session = run.session()
    calbin, device = session.calbin, session.device
    mine = calbin.chiplets
    others = [c.reserved_bytes for c in device.chiplets if c.index not in mine]
    run.check("one_chiplet", len(mine) == 1 and session.handle.chiplets == tuple(mine), f"configured on chiplet {mine}")
    run.check("other_chiplet_free", others == [0] * len(others), f"reserved on the other chiplets: {others}")
    generic.exercise(run, session)
    calls = device.call_log
    run.check(
        "stays_on_its_chiplet",
        all(r.chiplets == tuple(mine) and r.d2d_bytes == 0 for r in calls),
        f"{len(calls)} calls on chiplet {mine}, {sum(r.d2d_bytes for r in calls)} bytes across the chiplet link",
    )
    run.metrics["chip_affinity"] = mine[0]


def _single_failure(run: ProbeRun) -> None:
    """Resetting a core of the other chiplet leaves this package's job running."""
    session = run.session()
    other = next(c.index for c in session.device.chiplets if c.index not in session.calbin.chiplets)
    session.kv.allocate(1, 3)
    buffer = session.device.infer(session.calbin.model_of_type("llm_prefill"), session.kv, {1: [1, 2, 3]})
    session.device.reset_core(other, 0)
    code = buffer.wait(1e9)
    run.check(
        "other_chiplet_reset_isolated",
        code == ErrorCode.SUCCESS,
        f"the job ended with {code.name} after chiplet {other} was reset",
    )
    session.kv.free(1)
    generic.inject_faults(run, session)


SINGLE_CHIPLET = ProbeSpec(
    "single_chiplet",
    "A single-chiplet package with chip affinity (V30): it reserves and runs on its chiplet only.",
    generic.plans(
        runner=StagePlan(
            "configured on its chiplet only; every call there, nothing on the chiplet link", _single_runner
        ),
        failure=StagePlan("a reset of the other chiplet does not touch its job; each fault kind", _single_failure),
    ),
    capabilities=("single-chiplet", "two-models-one-chiplet"),
    features=("single_chiplet",),
    metrics=(MetricSpec("chip_affinity", "the chiplet it ran on"),),
)


# multi_model (V31) and residency (V35)


@dataclass
class Pair:
    device: VirtualDevice
    first: Session
    second: Session

    @property
    def placement(self) -> str:
        a, b = set(self.first.handle.chiplets), set(self.second.handle.chiplets)
        if a == b:
            return "same chiplets" if len(a) > 1 else "same chiplet"
        return "one per chiplet" if not a & b else "overlapping"


def second_declares(feature: str) -> Callable[[ProbeRun], None]:
    def check(run: ProbeRun) -> None:
        path = run.package(SECOND)
        try:
            second = run.ctx.load(path)
        except CalrtError as error:
            raise NotExercised(f"packages.{SECOND} cannot be loaded: {error}") from error
        if not second.declares(feature):
            raise NotExercised(f"packages.{SECOND} does not declare {feature}")

    return check


def _other_copy(run: ProbeRun) -> Calbin:
    """The second package, loaded on its own even when it is the same file as the first."""
    path = run.package(SECOND)
    if path == run.ctx.job.calbin:
        return run.ctx.make_device().create_calbin(path)
    return run.ctx.load(path)


def _pair(run: ProbeRun, load_second: bool = False, quota: int | None = None) -> Pair:
    device = run.ctx.make_device()
    first = run.calbin()
    second = _other_copy(run)
    handle_a = device.configure(first)
    handle_b = device.load(second, quota) if load_second else device.configure(second)
    return Pair(
        device,
        Session(device, first, handle_a, device.create_kv_manager(first)),
        Session(device, second, handle_b, device.create_kv_manager(second)),
    )


def configured_pair(run: ProbeRun, load_second: bool = False) -> Pair | None:
    try:
        return _pair(run, load_second)
    except CalrtError as error:
        run.check("configured_together", False, str(error))
        return None


def served_alone(run: ProbeRun, calbin: Calbin) -> RequestResult:
    device = run.ctx.make_device()
    handle = device.configure(calbin)
    return golden_request(Session(device, calbin, handle, device.create_kv_manager(calbin)))


def _multi_runner(run: ProbeRun) -> None:
    pair = configured_pair(run)
    if pair is None:
        return
    device, a, b = pair.device, pair.first, pair.second
    run.check("configured_together", True, f"{a.calbin.name} and {b.calbin.name}: {pair.placement}")
    expected = [sum(s.calbin.reservations.get(c.index, (0, 0))[0] for s in (a, b)) for c in device.chiplets]
    run.check(
        "separate_reservations",
        [c.reserved_bytes for c in device.chiplets] == expected,
        f"DRAM reserved per chiplet: {expected}",
    )
    run.check(
        "separate_kv",
        a.kv is not b.kv and a.kv.owner is a.calbin and b.kv.owner is b.calbin,
        "each model has its own KV manager",
    )
    a.kv.allocate(1, 3)
    b.kv.allocate(1, 3)
    try:
        first = device.infer(a.calbin.model_of_type("llm_prefill"), a.kv, {1: [1, 2, 3]})
        second = device.infer(b.calbin.model_of_type("llm_prefill"), b.kv, {1: [1, 2, 3]})
        queues = (
            f"both accepted with one job in flight allowed per queue: {first.wait(1e9).name}, {second.wait(1e9).name}"
        )
        separate = True
    except CalrtError as error:
        queues, separate = f"the second model's job was refused: {error}", False
    run.check("separate_queues", separate, queues)
    for session in (a, b):
        for seq_id in session.kv.sequences():
            session.kv.free(seq_id)
    results = [golden_request(a), golden_request(b)]
    run.check("both_serve", all(r.ok for r in results), "; ".join(r.message or "ok" for r in results))
    run.metrics.update({"placement": pair.placement, "chiplets": [list(a.handle.chiplets), list(b.handle.chiplets)]})


def _multi_golden(run: ProbeRun) -> None:
    """Each model, run while the other has a job in flight, gives the bits it gives alone, and its golden."""
    pair = configured_pair(run)
    if pair is None:
        return
    device = pair.device
    device.enable_parallel_mode(2)
    for mine, other in ((pair.first, pair.second), (pair.second, pair.first)):
        other.kv.allocate(9, 3)
        pending = device.infer(other.calbin.model_of_type("llm_prefill"), other.kv, {9: [4, 5, 6]})
        together = golden_request(mine)
        pending.wait(1e9)
        other.kv.free(9)
        alone = served_alone(run, mine.calbin)
        run.check(
            f"{mine.calbin.name}:bit_identical",
            same_bits(together, alone),
            "the same bits beside the other model as alone",
        )
        generic.compare_with_golden(run, mine)


def _multi_failure(run: ProbeRun) -> None:
    """A core exception in the first model: the second keeps serving, bit-identical, without any reset."""
    pair = configured_pair(run)
    if pair is None:
        return
    device, a, b = pair.device, pair.first, pair.second
    clean = served_alone(run, b.calbin)
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0, chiplet=a.handle.chiplets[0]))
    failed = golden_request(a)
    device.disarm_faults()
    run.check(
        "fault_in_first",
        failed.code == ErrorCode.CORE_EXCEPTION,
        f"the first model's request ended with {failed.code.name}",
    )
    during = golden_request(b)
    run.check(
        "second_bit_identical", same_bits(during, clean), f"the second model, the first faulted: {during.code.name}"
    )
    run.check(
        "second_not_faulted",
        b.handle.fault is None and device.status == DeviceStatus.FAULT,
        "only the faulted model waits for a reset",
    )
    actions = recover(device, a.calbin, failed.code)
    run.check("first_recovers", golden_request(a).ok, f"after {', '.join(actions)}")


def _serve_both(run: ProbeRun, pair: Pair, work: Callable[[Recorder, Session], object]) -> list[Recorder]:
    """Each model served by its own thread on the shared device; their checks come back under the model's name."""
    return serve_together(run, [(s.calbin.name, s) for s in (pair.first, pair.second)], work)


def _check_side_by_side(run: ProbeRun, pair: Pair) -> None:
    depth = pair.device.counters()["max_queue_depth"]
    run.check("served_side_by_side", depth > 1, f"up to {depth} jobs of the two models in flight at once")


def _multi_integration(run: ProbeRun) -> None:
    pair = configured_pair(run)
    if pair is None:
        return
    params = generic.stage_params(run, integration.PARAMS)
    _serve_both(run, pair, lambda rec, session: integration.routine(rec, session, params))
    _check_side_by_side(run, pair)


def _multi_soak(run: ProbeRun) -> None:
    pair = configured_pair(run)
    if pair is None:
        return
    params = generic.stage_params(run, soak.PARAMS)
    recorders = _serve_both(run, pair, lambda rec, session: soak.routine(rec, session, params))
    run.metrics["models"] = {
        rec.label.removeprefix(run.label).removesuffix(": "): {
            k: rec.metrics.get(k) for k in ("throughput_tokens_per_s", "ttft_ms", "decode_tokens_per_s", "errors")
        }
        for rec in recorders
    }
    _check_side_by_side(run, pair)


MULTI_MODEL = ProbeSpec(
    "multi_model",
    "Two packages configured at once, on one chiplet or one per chiplet (V31): separate reservations, queues "
    "and KV; a core exception in one leaves the other's outputs bit-identical. The second package is the "
    "job's packages.second.",
    generic.plans(
        runner=StagePlan(
            "both configured; reservations add up, KV managers and queues are separate; both serve", _multi_runner
        ),
        golden=StagePlan(
            "each model beside the other's job gives the bits it gives alone; each against its golden", _multi_golden
        ),
        failure=StagePlan(
            "a core exception in one: the other bit-identical without a reset; the first recovers", _multi_failure
        ),
        integration=StagePlan("each model's serving loop in its own thread on the shared device", _multi_integration),
        soak=StagePlan("both soaked at once, each in its own thread; per-model figures", _multi_soak),
    ),
    capabilities=("two-models-one-chiplet", "single-chiplet"),
    features=("multi_model",),
    requires=second_declares("multi_model"),
    metrics=(
        MetricSpec("placement", "same chiplet, same chiplets, one per chiplet"),
        MetricSpec("models", "per-model soak figures"),
    ),
)


# models_per_chiplet (V31)


def _one_per_chiplet(run: ProbeRun) -> None:
    """V31 asks for two independent models, each configured on a chiplet of its own: two single-chiplet packages
    of different chip affinity."""
    second_declares("single_chiplet")(run)
    second_declares("multi_model")(run)
    mine, other = run.calbin().chiplets, run.ctx.load(run.package(SECOND)).chiplets
    if set(mine) & set(other):
        raise NotExercised(
            f"both packages run on chiplet {sorted(set(mine) & set(other))}; V31 asks for one model per chiplet"
        )


def _per_chiplet_runner(run: ProbeRun) -> None:
    """Each model reserves and runs on its own chiplet only, and both run at the same time."""
    pair = configured_pair(run)
    if pair is None:
        return
    device, a, b = pair.device, pair.first, pair.second
    run.check(
        "one_per_chiplet", pair.placement == "one per chiplet", f"{a.calbin.name} and {b.calbin.name}: {pair.placement}"
    )
    own = [
        c.reserved_bytes
        == sum(s.calbin.reservations.get(c.index, (0, 0))[0] for s in (a, b) if c.index in s.handle.chiplets)
        for c in device.chiplets
    ]
    run.check("own_reservations", all(own), f"DRAM reserved per chiplet: {[c.reserved_bytes for c in device.chiplets]}")
    a.kv.allocate(1, 3)
    b.kv.allocate(1, 3)
    first = device.infer(a.calbin.model_of_type("llm_prefill"), a.kv, {1: [1, 2, 3]})
    second = device.infer(b.calbin.model_of_type("llm_prefill"), b.kv, {1: [1, 2, 3]})
    overlap = second.job.start_ms < first.job.end_ms
    codes = first.wait(1e9), second.wait(1e9)
    run.check(
        "run_at_once",
        overlap and codes == (ErrorCode.SUCCESS, ErrorCode.SUCCESS),
        f"the second model's job started at {second.job.start_ms:.3f} ms, the first's ended at "
        f"{first.job.end_ms:.3f} ms: {'at once' if overlap else 'one after the other'}",
    )
    for session in (a, b):
        session.kv.free(1)
    results = [golden_request(a), golden_request(b)]
    run.check("both_serve", all(r.ok for r in results), "; ".join(r.message or "ok" for r in results))
    run.metrics["chiplets"] = [list(a.handle.chiplets), list(b.handle.chiplets)]


def _per_chiplet_failure(run: ProbeRun) -> None:
    """Fault isolation: a core exception in one model and the reset of its chiplet leave the other model's job
    in flight and its outputs bit-identical; the faulted one recovers."""
    pair = configured_pair(run)
    if pair is None:
        return
    device, a, b = pair.device, pair.first, pair.second
    clean = served_alone(run, b.calbin)
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0, chiplet=a.handle.chiplets[0]))
    failed = golden_request(a)
    device.disarm_faults()
    during = golden_request(b)
    run.check(
        "fault_isolated",
        failed.code == ErrorCode.CORE_EXCEPTION and same_bits(during, clean) and b.handle.fault is None,
        f"the first model ended with {failed.code.name}; the second, beside it, gives the bits it gives alone",
    )
    b.kv.allocate(1, 3)
    in_flight = device.infer(b.calbin.model_of_type("llm_prefill"), b.kv, {1: [1, 2, 3]})
    device.reset_core(a.handle.chiplets[0], (a.handle.fault or (0, 0))[1])
    code = in_flight.wait(1e9)
    b.kv.free(1)
    run.check(
        "reset_isolated",
        code == ErrorCode.SUCCESS and a.handle.fault is None,
        f"the first model's chiplet reset with the second's job in flight: that job ends {code.name}",
    )
    run.check("first_recovers", golden_request(a).ok, "after its core reset, the first model serves")


MODELS_PER_CHIPLET = ProbeSpec(
    "models_per_chiplet",
    "Two independent models, one per chiplet (V31): two single-chiplet packages of different chip affinity "
    "configured at once, each reserving and running on its own chiplet, both at the same time; a core exception "
    "in one and the reset of its chiplet leave the other's job in flight and its outputs bit-identical. The second "
    "package is the job's packages.second.",
    generic.plans(
        runner=StagePlan("each on its own chiplet, both at once; both serve", _per_chiplet_runner),
        golden=StagePlan(
            "each model beside the other's job gives the bits it gives alone; each against its golden", _multi_golden
        ),
        failure=StagePlan(
            "a core exception and its chiplet's reset in one: the other's job and bits untouched", _per_chiplet_failure
        ),
        integration=StagePlan("each model's serving loop in its own thread on the shared device", _multi_integration),
        soak=StagePlan("both soaked at once, each in its own thread; per-model figures", _multi_soak),
    ),
    capabilities=("two-models-two-chiplets",),
    features=("single_chiplet", "multi_model"),
    requires=_one_per_chiplet,
    metrics=(
        MetricSpec("chiplets", "the chiplets of each model"),
        MetricSpec("models", "per-model soak figures"),
    ),
)


MODELS = [SINGLE_CHIPLET, MULTI_MODEL, MODELS_PER_CHIPLET]
