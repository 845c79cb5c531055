"""Probes of errors and recovery: the error codes 0-29 (I15), their mapping to what a service does and a
client sees (V53), the reset scopes (I10, V50-V52), and a fault with its documented recovery per feature."""

import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from npu_sim.client import RequestResult, recover, run_request
from npu_sim.device import DeviceStatus
from npu_sim.errors import ERROR_TABLE, SERVICE_ERRORS, ErrorCode, ServiceAction, code_of
from npu_sim.faults import EXPECTED_CODES, Fault, FaultKind
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan
from npu_sim.probes.triggers import TRIGGERS
from npu_sim.protocol.context import Session
from npu_sim.sampling import SamplingParams
from npu_sim.server import Request, serve
from npu_sim.stages import integration

# error_codes (I15)


def _codes_runner(run: ProbeRun) -> None:
    """Every code of the table reached through the runtime by its documented trigger, or marked reserved."""
    numbers = run.observe("thirty_codes.numbers", sorted(int(code) for code in ERROR_TABLE))
    run.check("thirty_codes", numbers == list(range(30)), f"codes {numbers[0]}..{numbers[-1]}, {len(numbers)} of them")
    path = Path(run.calbin().path)
    reached: list[str] = []
    wrong: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        got_codes = run.observe(
            "every_code_reached.codes", [trigger(path, Path(scratch)) for trigger in TRIGGERS.values()]
        )
    for code, got in zip(TRIGGERS, got_codes, strict=True):
        (reached if got == code else wrong).append(f"{code.name}" if got == code else f"{code.name} gave {got.name}")
    run.observe("the_rest_reserved.reserved", sorted(int(code) for code, info in ERROR_TABLE.items() if info.reserved))
    reserved = sorted(code.name for code, info in ERROR_TABLE.items() if info.reserved)
    run.check("every_code_reached", not wrong, "; ".join(wrong) or f"{len(reached)} codes reached by their triggers")
    unreached = sorted(code.name for code in ERROR_TABLE if code not in TRIGGERS and not ERROR_TABLE[code].reserved)
    run.check(
        "the_rest_reserved",
        not unreached,
        f"reserved: {', '.join(reserved)}" + (f"; unreached: {unreached}" if unreached else ""),
    )
    run.metrics.update({"reached": reached, "reserved": reserved})


ERROR_CODES = ProbeSpec(
    "error_codes",
    "The runtime's error codes 0-29 (I15): each one the simulator produces is reached through the runtime by a "
    "documented trigger and reported with its number; the others are marked reserved.",
    generic.plans(runner=StagePlan("every code's trigger against the package, the code compared", _codes_runner)),
    capabilities=("error-codes",),
    metrics=(
        MetricSpec("reached", "codes reached by their triggers"),
        MetricSpec("reserved", "codes nothing produces"),
    ),
)


# error_mapping (V53)

SERVED = 4  # the requests of a short serving loop with a fault armed
UNDER_LOAD = 8  # the requests of the soak plan's loop


def serve_with(
    session: Session, fault: Fault | None, retries: int, sequences: int = SERVED, new_tokens: int = 4
) -> list[Request]:
    """A short serving loop with one fault armed, mapping each failure as SERVICE_ERRORS says."""
    vocab = session.calbin.config.vocab
    requests = [Request(i + 1, [(7 * i + j) % vocab for j in range(3 + i)], new_tokens) for i in range(sequences)]
    if fault is not None:
        session.device.inject(fault)
    serve(session.device, session.calbin, session.kv, requests, concurrency=session.kv.lanes, retries=retries)
    session.device.disarm_faults()
    return requests


def _mapping_runner(run: ProbeRun) -> None:
    run.observe("every_code_mapped.codes", sorted(int(code) for code in SERVICE_ERRORS))
    missing = [code.name for code in ErrorCode if code not in SERVICE_ERRORS]
    run.check(
        "every_code_mapped",
        not missing,
        f"unmapped: {missing}" if missing else "all 30 codes map to an action and a status",
    )
    session = run.session()
    bad = Request(1, [1, session.calbin.config.vocab], 2)
    serve(session.device, session.calbin, session.kv, [bad], concurrency=1, retries=run.params["retries"])
    run.observe("client_error_rejected.code", bad.error or ErrorCode.SUCCESS)
    run.observe("client_error_rejected.http_status", bad.service_status or 200)
    run.observe("client_error_rejected.retries", bad.attempts)
    run.check(
        "client_error_rejected",
        (bad.error, bad.service_status, bad.attempts) == (ErrorCode.INVALID_ARGUMENT, 400, 0),
        f"a token outside the vocabulary: {bad.error and bad.error.name}, HTTP {bad.service_status}, "
        f"{bad.attempts} retries",
    )
    run.metrics["mapping"] = {
        code.name: {"action": s.action.value, "http_status": s.http_status} for code, s in SERVICE_ERRORS.items()
    }


def _mapping_failure(run: ProbeRun) -> None:
    """Each fault kind once in a serving loop: what the client sees is what the mapping says."""
    retries = run.params["retries"]
    outcomes = {}
    for kind, code in EXPECTED_CODES.items():
        session = run.session()
        requests = serve_with(session, Fault(kind, at_step=2), retries)
        statuses = Counter(run.observe(f"{kind.value}.statuses", [r.service_status or 200 for r in requests]))
        service = SERVICE_ERRORS[code]
        retried = run.observe(f"{kind.value}.retries", sum(r.attempts for r in requests))
        # Every fault kind maps to retry or recover (or is silent): the clients all get their tokens.
        ok = dict(statuses) == {200: len(requests)} and (service.action == ServiceAction.NONE or retried > 0)
        run.check(
            f"{kind.value}",
            ok,
            f"{code.name} maps to {service.action.value}: clients got {dict(statuses)} after {retried} retries",
        )
        outcomes[kind.value] = {
            "code": code.name,
            "action": service.action.value,
            "statuses": dict(statuses),
            "retries": retried,
        }
    run.metrics["faults"] = outcomes


def _mapping_integration(run: ProbeRun) -> None:
    session = run.session()
    params = generic.stage_params(run, integration.PARAMS)
    requests = integration.requests_for(session, params)
    session.device.inject(Fault(FaultKind.BUSY, at_step=1, count=2))
    trace = serve(
        session.device,
        session.calbin,
        session.kv,
        requests,
        concurrency=session.kv.lanes,
        retries=run.params["retries"],
    )
    session.device.disarm_faults()
    failed = [r for r in requests if r.error is not None]
    run.observe("busy_retried_transparently.failed", len(failed))
    run.observe("busy_retried_transparently.retries", trace.retries)
    run.check(
        "busy_retried_transparently",
        not failed and trace.retries > 0,
        f"{len(requests) - len(failed)}/{len(requests)} completed after {trace.retries} retries",
    )
    generic.integrate(run, session)


def _mapping_soak(run: ProbeRun) -> None:
    session = run.session()
    requests = serve_with(
        session, Fault(FaultKind.CORE_EXCEPTION, at_step=5), run.params["retries"], sequences=UNDER_LOAD, new_tokens=8
    )
    failed = [r for r in requests if r.error is not None]
    run.observe("recovered_and_retried_under_load.statuses", [r.service_status or 200 for r in requests])
    run.check(
        "recovered_and_retried_under_load",
        not failed,
        f"{len(requests) - len(failed)}/{len(requests)} completed after a core exception",
    )
    generic.load_and_soak(run, session)


ERROR_MAPPING = ProbeSpec(
    "error_mapping",
    "Runtime codes mapped to what the serving loop does and what a client sees (V53): retry with back-off, "
    "recover and retry, reject (4xx), unavailable (5xx).",
    generic.plans(
        runner=StagePlan("every code mapped; a bad request rejected with 400 and not retried", _mapping_runner),
        failure=StagePlan("each fault kind in a serving loop: clients see what the mapping says", _mapping_failure),
        integration=StagePlan(
            "BUSY twice in the serving loop, retried without the clients noticing", _mapping_integration
        ),
        soak=StagePlan("a core exception under load recovered and retried; the soak", _mapping_soak),
    ),
    capabilities=("error-mapping", "error-codes"),
    params=(
        ParamSpec(
            "retries", "integer", 2, "runs again a request gets after a retryable failure", minimum=1, maximum=10
        ),
    ),
    metrics=(
        MetricSpec("mapping", "code -> action and HTTP status"),
        MetricSpec("faults", "per fault kind: statuses the clients got and retries"),
    ),
)


# device_reset (I10, V50-V52)


def _golden_request(session: Session) -> RequestResult:
    g = session.calbin.goldens
    return run_request(
        session.device, session.calbin, session.kv, 1, g.prompt_ids.tolist(), 2, g.decode_input_ids[:2].tolist()
    )


def _resets_runner(run: ProbeRun) -> None:
    session = run.session()
    device, kv, calbin = session.device, session.kv, session.calbin
    prefill = calbin.model_of_type("llm_prefill")
    chiplet = session.handle.chiplets[0]
    for name, reset, what in (
        ("reset_core", lambda: device.reset_core(chiplet, 0), "aborts the job in flight"),
        (
            "clear_dynamic_memory",
            device.clear_dynamic_memory,
            "frees every output buffer, aborting the job that held one",
        ),
    ):
        kv.allocate(7, 3)
        in_flight = device.infer(prefill, kv, {7: [1, 2, 3]})
        reset()
        aborted = run.observe(f"{name}.code", in_flight.wait(1.0))
        kv.free(7)
        freed = run.observe(f"{name}.dynamic_bytes", sum(c.dynamic_bytes for c in device.chiplets)) == 0
        next_request = _golden_request(session)
        run.observe(f"{name}.served_code", next_request.code)
        run.check(
            name,
            aborted == ErrorCode.JOB_ABORTED and freed and next_request.ok,
            f"{what} ({aborted.name}); the next request {'runs' if next_request.ok else 'fails'} "
            "without configuring again",
        )
    prefill_kv = run.observe("reset_configuration.first_cell", kv.allocate(5, 2)) == 0
    device.reset_configuration()
    gone = run.observe("reset_configuration.code", _golden_request(session).code)
    run.observe("reset_configuration.sequences", kv.sequences())
    run.check(
        "reset_configuration",
        prefill_kv and gone == ErrorCode.NOT_CONFIGURED and kv.sequences() == [],
        f"drops the model and empties its KV; a request then: {gone.name}",
    )
    device.configure(calbin)
    served = run.observe("configure_again.code", _golden_request(session).code)
    run.check("configure_again", served == ErrorCode.SUCCESS, "configured again, it serves")
    device.inject(Fault(FaultKind.DEVICE_CRASH, at_step=0))
    crashed = run.observe("reset_device.crashed", _golden_request(session).code)
    device.disarm_faults()
    refused = run.observe("reset_device.core_reset", code_of(lambda: device.reset_core(chiplet, 0)))
    device.reset_device()
    after = run.observe("reset_device.before_configure", _golden_request(session).code)
    device.configure(calbin)
    served = run.observe("reset_device.served_code", _golden_request(session).code)
    status = run.observe("reset_device.status", device.status.value)
    run.check(
        "reset_device",
        crashed == ErrorCode.DEVICE_CRASHED
        and refused == ErrorCode.DEVICE_CRASHED
        and after == ErrorCode.NOT_CONFIGURED
        and served == ErrorCode.SUCCESS
        and status == DeviceStatus.READY,
        f"a crash ({crashed.name}) refuses a core reset ({refused.name}); after the device reset: {after.name} "
        "until configured",
    )


def _then_configure(reset: Callable[[], None], session: Session) -> None:
    reset()
    session.device.configure(session.calbin)


def _resets_golden(run: ProbeRun) -> None:
    """After each reset scope (and what it requires), the golden request matches the golden."""
    session = run.session()
    device = session.device
    steps = {
        "reset_core": lambda: device.reset_core(session.handle.chiplets[0], 0),
        "clear_dynamic_memory": device.clear_dynamic_memory,
        "reset_configuration": lambda: _then_configure(device.reset_configuration, session),
        "reset_device": lambda: _then_configure(device.reset_device, session),
    }
    for name, action in steps.items():
        action()
        part = run.part(name)
        generic.compare_with_golden(part, session)
        run.take(part)


def _resets_integration(run: ProbeRun) -> None:
    """A crash in the middle of the serving loop: the device reset and the new configure, then the rest served."""
    session = run.session()
    # More sequences than lanes, so some arrive after the crash.
    params = generic.stage_params(run, integration.PARAMS, sequences=3 * session.kv.lanes)
    requests = integration.requests_for(session, params)
    session.device.inject(Fault(FaultKind.DEVICE_CRASH, at_step=4))
    trace = serve(session.device, session.calbin, session.kv, requests, concurrency=session.kv.lanes)
    session.device.disarm_faults()
    crashed_ms = next(e.ms for e in session.device.events if e.name == "device_crash")
    later = [r for r in requests if r.arrival_ms >= crashed_ms]
    served = [r for r in later if r.error is None]
    run.observe("served_after_a_device_reset.device_resets", trace.recoveries.count("reset device"))
    run.observe("served_after_a_device_reset.later", len(later))
    run.observe("served_after_a_device_reset.served", len(served))
    run.check(
        "served_after_a_device_reset",
        "reset device" in trace.recoveries and bool(later) and len(served) == len(later),
        f"recoveries {trace.recoveries}; {len(served)}/{len(later)} requests that came after the crash completed",
    )


DEVICE_RESET = ProbeSpec(
    "device_reset",
    "The reset scopes (I10, V50-V52): reset_core, clear_dynamic_memory, reset_configuration, reset_device, "
    "what each aborts and clears, and what must be done again after it.",
    generic.plans(
        runner=StagePlan(
            "each scope: what it aborts, frees and drops, and what the next request needs", _resets_runner
        ),
        golden=StagePlan("after each scope the golden request matches the golden", _resets_golden),
        integration=StagePlan("a crash mid-loop: device reset, configure, the rest served", _resets_integration),
    ),
    capabilities=("device-reset",),
)


# fault_recovery


def _recovery_runner(run: ProbeRun) -> None:
    """Each fault kind, the documented recovery for its code, and the device ready to serve again."""
    session = run.session()
    outcomes = {}
    for kind, code in EXPECTED_CODES.items():
        session.device.inject(Fault(kind, at_step=1))
        failed = _golden_request(session)
        run.observe(f"{kind.value}.code", failed.code)
        session.device.disarm_faults()
        actions = recover(session.device, session.calbin, failed.code)
        status = run.observe(f"{kind.value}.status", session.device.status.value)
        served = run.observe(f"{kind.value}.served_code", _golden_request(session).code)
        ready = status == DeviceStatus.READY and served == ErrorCode.SUCCESS
        run.check(
            kind.value,
            failed.code == code and ready,
            f"{failed.code.name}; recovery: {', '.join(actions) or 'none needed'}; "
            f"then {'serving' if ready else 'not serving'}",
        )
        outcomes[kind.value] = actions
    run.metrics["recoveries"] = outcomes


def _recovery_failure(run: ProbeRun) -> None:
    """Every fault kind against the golden, then a fault in each feature the package declares."""
    session = run.session()
    generic.inject_faults(run, session)
    if session.calbin.declares("sampling"):
        params = SamplingParams(0.8, 40, 0.95, 7)
        prompt = session.calbin.goldens.prompt_ids.tolist()
        clean = run_request(session.device, session.calbin, session.kv, 1, prompt, 4, sampling=params)
        session.device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=2))
        failed = run_request(session.device, session.calbin, session.kv, 1, prompt, 4, sampling=params)
        session.device.disarm_faults()
        recover(session.device, session.calbin, failed.code)
        again = run_request(session.device, session.calbin, session.kv, 1, prompt, 4, sampling=params)
        run.check(
            "sampling:recovered", again.sampled == clean.sampled, f"after {failed.code.name}: the same sampled tokens"
        )


def _recovery_integration(run: ProbeRun) -> None:
    """Each fault kind once in its own serving loop: the loop recovers and the requests after it complete."""
    for kind in EXPECTED_CODES:
        session = run.session()
        requests = serve_with(session, Fault(kind, at_step=2), retries=0, sequences=6)
        run.observe(f"{kind.value}.last_codes", [r.error or ErrorCode.SUCCESS for r in requests[-2:]])
        after = [r for r in requests[-2:] if r.error is None]
        run.check(
            kind.value,
            len(after) == 2,
            f"{sum(r.error is None for r in requests)}/{len(requests)} completed, the last two after the fault",
        )


def _recovery_soak(run: ProbeRun) -> None:
    """The soak with four faults on the way, recovered and the requests retried: the clients see no error."""
    session = run.session()
    kinds = [FaultKind.BUSY, FaultKind.CORE_EXCEPTION, FaultKind.TIMEOUT, FaultKind.MEMORY_EXHAUSTION]
    for i, kind in enumerate(kinds):
        session.device.inject(Fault(kind, at_step=3 * (i + 1)))
    # A request may be caught by every one of the faults: it may be retried that often.
    generic.load_and_soak(run, session, retries=len(kinds))
    recoveries = run.metrics["recoveries"]
    run.observe("recovered_every_time.recoveries", len(recoveries))
    run.observe("recovered_every_time.retries", run.metrics["retries"])
    run.check(
        "recovered_every_time",
        len(recoveries) == 3 and run.metrics["retries"] >= 4,
        f"recoveries {recoveries}; {run.metrics['retries']} requests retried",
    )


FAULT_RECOVERY = ProbeSpec(
    "fault_recovery",
    "Each fault kind with its documented recovery, and a fault in each feature the package declares (sampling: "
    "the same tokens after recovery).",
    generic.plans(
        runner=StagePlan("each fault kind, its code, its recovery, the device serving again", _recovery_runner),
        failure=StagePlan("each fault kind against the golden; a fault in each declared feature", _recovery_failure),
        integration=StagePlan(
            "each fault kind in its own serving loop; the requests after it complete", _recovery_integration
        ),
        soak=StagePlan("the soak with four faults on the way; recovered each time", _recovery_soak),
    ),
    capabilities=("error-mapping", "output-buffer-wait", "device-reset"),
    metrics=(MetricSpec("recoveries", "per fault kind, the recovery applied"),),
)

FAULTS = [ERROR_CODES, ERROR_MAPPING, DEVICE_RESET, FAULT_RECOVERY]
