"""Probe residency (V35): load and unload a model while the other keeps serving, with handles, quotas and a
modelled load time."""

import threading
from collections.abc import Callable
from typing import Any

from npu_sim.client import run_request
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.probes import generic
from npu_sim.probes.models import Pair, configured_pair, golden_request, same_bits, second_declares, served_alone
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import Recorder, Session
from npu_sim.stages import integration, soak


def _load_cycle(pair: Pair) -> dict[str, Any]:
    """Unload the resident second model and load it again; what that looked like."""
    device = pair.device
    device.unload(pair.second.handle)
    gone = device.models.get(pair.second.handle.id) is None
    handle = device.load(pair.second.calbin)
    pair.second = Session(device, pair.second.calbin, handle, pair.second.kv)
    return {"unloaded": gone, "load_ms": handle.ready_ms - device.clock_ms}


def _residency_runner(run: ProbeRun) -> None:
    pair = configured_pair(run, load_second=True)
    if pair is None:
        return
    device, a, b = pair.device, pair.first, pair.second
    load_ms = b.handle.ready_ms - device.clock_ms
    run.check("load_is_modelled", load_ms > 0, f"{b.calbin.name} is usable {load_ms:.3f} ms after its load began")
    first = golden_request(a)
    run.check(
        "first_serves_during_the_load",
        first.ok and device.call_log[0].start_ms < b.handle.ready_ms,
        "the resident model ran while the other loaded",
    )
    b.kv.allocate(1, 3)
    buffer = device.infer(b.calbin.model_of_type("llm_prefill"), b.kv, {1: [1, 2, 3]})
    run.check(
        "second_waits_for_its_load",
        buffer.record.start_ms >= b.handle.ready_ms,
        f"its first job starts at {buffer.record.start_ms:.3f} ms",
    )
    try:
        device.unload(b.handle)
        busy = ErrorCode.SUCCESS
    except CalrtError as error:
        busy = error.code
    run.check("unload_refused_in_flight", busy == ErrorCode.BUSY, f"unload with a job in flight: {busy.name}")
    buffer.wait(1e9)
    b.kv.free(1)
    reserved = [c.reserved_bytes for c in device.chiplets]
    cycle = _load_cycle(pair)
    after = [c.reserved_bytes for c in device.chiplets]
    run.check(
        "unload_and_reload", cycle["unloaded"] and reserved == after, f"reservations {reserved} after unload and reload"
    )
    handle = pair.second.handle
    device.unload(handle)
    stale = run_request(device, b.calbin, b.kv, 1, [1, 2], 0).code
    run.check("unloaded_is_gone", stale == ErrorCode.NOT_CONFIGURED, f"a request to the unloaded model: {stale.name}")
    small = device.load(b.calbin, quota_bytes=16)
    over = run_request(device, b.calbin, b.kv, 1, [1, 2], 0).code
    run.check(
        "quota_enforced",
        over == ErrorCode.OUT_OF_MEMORY and golden_request(a).ok,
        f"over its 16-byte quota: {over.name}; the other still serves",
    )
    run.metrics.update({"load_ms": round(load_ms, 3), "quota_handle": small.id, "placement": pair.placement})


def _residency_golden(run: ProbeRun) -> None:
    pair = configured_pair(run, load_second=True)
    if pair is None:
        return
    for _ in range(2):
        _load_cycle(pair)
    for session in (pair.first, pair.second):
        generic.compare_with_golden(run, session)


def _residency_failure(run: ProbeRun) -> None:
    """A core exception in the loaded model; the resident one is untouched; unload and reload recover it."""
    pair = configured_pair(run, load_second=True)
    if pair is None:
        return
    device, a = pair.device, pair.first
    clean = served_alone(run, a.calbin)
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0, chiplet=pair.second.handle.chiplets[0]))
    failed = golden_request(pair.second)
    device.disarm_faults()
    run.check(
        "fault_in_loaded", failed.code == ErrorCode.CORE_EXCEPTION, f"the loaded model's request: {failed.code.name}"
    )
    run.check("resident_bit_identical", same_bits(golden_request(a), clean), "the resident model, unchanged")
    _load_cycle(pair)
    run.check("reload_recovers", golden_request(pair.second).ok, "after unload and load, the loaded model serves again")


def _cycling(run: ProbeRun, pair: Pair, work: Callable[[Recorder, Session], object]) -> int:
    """The resident model does `work` in a thread while the other is unloaded and loaded over and over."""
    done = threading.Event()
    errors: list[BaseException] = []
    rec = run.part("resident")

    def serve() -> None:
        try:
            work(rec, pair.first)
        except BaseException as error:  # the probe reports it
            errors.append(error)
        finally:
            done.set()

    thread = threading.Thread(target=serve)
    thread.start()
    cycles = 0
    while not done.wait(0.002):
        _load_cycle(pair)
        cycles += 1
    thread.join()
    if errors:
        raise errors[0]
    run.take(rec)
    run.metrics.update(rec.metrics)
    return cycles


def _residency_integration(run: ProbeRun) -> None:
    pair = configured_pair(run, load_second=True)
    if pair is None:
        return
    params = generic.stage_params(run, integration.PARAMS)
    cycles = _cycling(run, pair, lambda rec, session: integration.routine(rec, session, params))
    run.check(
        "loads_while_serving", cycles > 0, f"{cycles} unload/load cycles of the second model during the serving loop"
    )


def _residency_soak(run: ProbeRun) -> None:
    pair = configured_pair(run, load_second=True)
    if pair is None:
        return
    params = generic.stage_params(run, soak.PARAMS)
    cycles = _cycling(run, pair, lambda rec, session: soak.routine(rec, session, params))
    run.check("loads_while_serving", cycles > 0, f"{cycles} unload/load cycles of the second model during the soak")
    run.metrics["load_cycles"] = cycles


RESIDENCY = ProbeSpec(
    "residency",
    "Dynamic residency (V35): the job's packages.second is loaded, unloaded and loaded again while the package "
    "keeps serving; handles, quotas and a modelled load time.",
    generic.plans(
        runner=StagePlan(
            "load with a modelled time while the other serves; unload refused in flight; reload; quota",
            _residency_runner,
        ),
        golden=StagePlan("after unload/load cycles both models match their goldens", _residency_golden),
        failure=StagePlan(
            "a core exception in the loaded model; the resident one unchanged; reload recovers", _residency_failure
        ),
        integration=StagePlan(
            "the resident model's serving loop while the other is unloaded and loaded", _residency_integration
        ),
        soak=StagePlan("the resident model's soak while the other is unloaded and loaded", _residency_soak),
    ),
    capabilities=("dynamic-resident-multi-model",),
    features=("residency", "multi_model"),
    requires=second_declares("residency"),
    metrics=(
        MetricSpec("load_ms", "modelled time from the start of a load until the model takes jobs"),
        MetricSpec("load_cycles", "unload/load cycles during the soak"),
    ),
)
