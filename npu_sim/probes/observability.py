"""Probes of what the device tells about itself: counters and a Chrome trace (I12, V22, V37, V38), and the
op placement trace with CPU fallbacks (V11)."""

import json
from collections.abc import Callable
from typing import Any

from npu_sim.client import recover, run_request
from npu_sim.faults import Fault, FaultKind
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import NotExercised, Session

TRACE_FILE = "trace.json"
_EVENT_FIELDS = {"name", "ph", "pid", "tid", "ts"}


def trace_problems(trace: Any) -> list[str]:
    """Why a Chrome trace-event document would not open in Perfetto or chrome://tracing."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the document is not an object with a traceEvents list"]
    problems = []
    for i, event in enumerate(trace["traceEvents"]):
        missing = _EVENT_FIELDS - set(event) if event.get("ph") != "M" else {"name", "ph", "pid"} - set(event)
        if missing:
            problems.append(f"event {i} lacks {sorted(missing)}")
        elif event["ph"] == "X" and not (isinstance(event.get("dur"), int | float) and event["dur"] >= 0):
            problems.append(f"complete event {i} ({event['name']}) has no duration")
    return problems or _unnested(trace["traceEvents"])


def _unnested(events: list[dict[str, Any]]) -> list[str]:
    """Complete events that start inside another on their track (pid, tid) and end after it: Perfetto drops
    such a slice, as it only shows slices that nest."""
    tracks: dict[tuple[Any, Any], list[tuple[Any, Any, int]]] = {}
    for i, event in enumerate(events):
        if event["ph"] == "X":
            tracks.setdefault((event["pid"], event["tid"]), []).append((event["ts"], -event["dur"], i))
    problems = []
    for track in tracks.values():
        enclosing: list[Any] = []  # the ends of the slices around the current one, innermost last
        for ts, negative_dur, i in sorted(track):
            while enclosing and enclosing[-1] <= ts:
                enclosing.pop()
            end = ts - negative_dur
            if enclosing and end > enclosing[-1]:
                problems.append(f"complete event {i} ({events[i]['name']}) overlaps the one before it on its track")
            enclosing.append(end)
    return problems


def write_trace(run: ProbeRun, session: Session) -> dict[str, Any]:
    """The device's trace as a file next to the result (listed in produced_files), checked for Perfetto."""
    trace = session.device.trace()
    text = json.dumps(trace, allow_nan=False)
    problems = trace_problems(json.loads(text))
    calls = [r for r in session.device.call_log if r.end_ms != float("inf")]
    transfers = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith(("H2D", "D2H"))]
    run.check("trace_opens", not problems, "; ".join(problems[:3]) or f"{len(trace['traceEvents'])} trace events")
    run.check(
        "trace_covers_every_call",
        len(transfers) == 2 * len(calls),
        f"{len(transfers)} H2D/D2H events for {len(calls)} calls",
    )
    path = run.file_path(TRACE_FILE)
    if path is not None:
        path.write_text(text)
        run.add_file(path)
    run.metrics["trace_events"] = len(trace["traceEvents"])
    return trace


def _counters_runner(run: ProbeRun) -> None:
    session = run.session()
    device = session.device
    generic.exercise(run, session)
    counters, calls = device.counters(), device.call_log
    sums = {
        "calls": len(calls),
        "h2d_bytes": sum(r.h2d_bytes for r in calls),
        "d2h_bytes": sum(r.d2h_bytes for r in calls),
        "d2d_bytes": sum(r.d2d_bytes for r in calls),
    }
    run.check(
        "counters_add_up",
        all(counters[k] == v for k, v in sums.items()),
        f"counters { ({k: counters[k] for k in sums}) }",
    )
    per_chiplet = counters["chiplets"]
    run.check(
        "per_chiplet",
        sorted(per_chiplet) == [f"chip{c}" for c in session.calbin.chiplets],
        f"busy time and link bytes on {sorted(per_chiplet)}",
    )
    device.reset_counters()
    zeroed = device.counters()
    run_request(device, session.calbin, session.kv, 1, [1, 2, 3], 1)
    after = device.counters()
    run.check(
        "reset_counters",
        zeroed["calls"] == 0 and after["calls"] == 2 and after["clock_ms"] >= zeroed["clock_ms"],
        "zero after a reset, counting again after; the clock goes on",
    )
    write_trace(run, session)


def _counters_golden(run: ProbeRun) -> None:
    """Every call's bytes as the package's I/O makes them: 4 per token in, 2 per logit out (A11)."""
    session = run.session()
    generic.compare_with_golden(run, session)
    vocab = session.calbin.config.vocab
    wrong = [
        r.call for r in session.device.call_log if r.h2d_bytes != 4 * r.tokens or r.d2h_bytes != 2 * vocab * r.lanes
    ]
    run.check(
        "bytes_per_call",
        not wrong,
        f"calls whose bytes differ: {wrong[:5]}"
        if wrong
        else f"{len(session.device.call_log)} calls: 4 B per token in, {2 * vocab} B per lane out",
    )


def _counters_failure(run: ProbeRun) -> None:
    session = run.session()
    session.device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=1))
    failed = run_request(session.device, session.calbin, session.kv, 1, [1, 2, 3], 3)
    session.device.disarm_faults()
    counted = session.device.counters()["calls"] == len(session.device.call_log) == 2
    run.check(
        "faulted_call_counted",
        not failed.ok and counted,
        f"{session.device.counters()['calls']} calls counted, the second faulted",
    )
    trace = write_trace(run, session)
    marked = any(e.get("name") == "core_exception" for e in trace["traceEvents"])
    run.check("fault_in_trace", marked, "the trace marks the core exception")
    recover(session.device, session.calbin, failed.code)
    generic.inject_faults(run, session)


def _traced(plan: Callable[[ProbeRun, Session], None]) -> Callable[[ProbeRun], None]:
    def run_traced(run: ProbeRun) -> None:
        session = run.session()
        plan(run, session)
        trace = write_trace(run, session)
        depths = [e for e in trace["traceEvents"] if e.get("ph") == "C"]
        run.check(
            "queue_depth_in_trace", len(depths) == len(session.device.call_log), f"{len(depths)} queue-depth samples"
        )

    return run_traced


COUNTERS_TRACE = ProbeSpec(
    "counters_trace",
    "Queue, transfer and per-chiplet counters and their reset (I12, V22, V38), and the device's activity as a "
    "Chrome trace-event file that Perfetto opens with every slice (V37), written next to the result as "
    "counters_trace-trace.json.",
    generic.plans(
        runner=StagePlan(
            "counters equal the calls' sums, per chiplet, reset; the trace file for every call", _counters_runner
        ),
        golden=StagePlan("the golden comparison; every call's bytes as the package's I/O makes them", _counters_golden),
        failure=StagePlan("a faulted call is counted and marked in the trace; each fault kind", _counters_failure),
        integration=StagePlan(
            "the serving loop, traced, with queue depth samples", _traced(lambda run, s: generic.integrate(run, s))
        ),
        soak=StagePlan(
            "the soak, traced, with queue depth samples", _traced(lambda run, s: generic.load_and_soak(run, s))
        ),
    ),
    capabilities=("device-counters-trace",),
    metrics=(MetricSpec("trace_events", "events in the trace file"), MetricSpec("counters", "the device counters")),
)


# cpu_fallback (V11)


def check_placement(run: ProbeRun, session: Session) -> None:
    """Every call ran each op where the package says: the CPU ops it declares, and no other."""
    declared = {op: where for sub in session.calbin.submodels for op, where in sub.ops}
    undeclared, calls = set(), session.device.call_log
    for record in calls:
        undeclared |= {op for op, where in record.placement if where == "cpu" and declared.get(op) != "cpu"}
    ran_on_cpu = sorted({op for record in calls for op, where in record.placement if where == "cpu"})
    declared_cpu = sorted(op for op, where in declared.items() if where == "cpu")
    run.check(
        "placement_as_declared",
        bool(calls) and not undeclared and ran_on_cpu == declared_cpu,
        f"on the CPU: {ran_on_cpu or 'nothing'}; declared: {declared_cpu or 'nothing'}"
        + (f"; not declared: {sorted(undeclared)}" if undeclared else ""),
    )
    run.metrics.update(
        {
            "declared_fallbacks": declared_cpu,
            "observed_fallbacks": ran_on_cpu,
            "fallback_ms": round(sum(r.time.fallback_ms for r in calls), 4),
        }
    )


def _declares_a_fallback(run: ProbeRun) -> None:
    """V11 asks for a package with a CPU-fallback op: one that places every op on the NPU proves nothing here."""
    if not run.calbin().meta.cpu_fallback_ops():
        raise NotExercised("the package places no op on the CPU; V11 asks for a package with a CPU-fallback op")


def _placed(plan: Callable[[ProbeRun, Session], None]) -> Callable[[ProbeRun], None]:
    def run_placed(run: ProbeRun) -> None:
        session = run.session()
        plan(run, session)
        check_placement(run, session)

    return run_placed


CPU_FALLBACK = ProbeSpec(
    "cpu_fallback",
    "The op placement trace (V11): each call records where each op ran; the package declares at least one op "
    "on the CPU, and the probe passes only when exactly the ops the package declares ran there.",
    generic.plans(
        runner=StagePlan("the minimal example; every op where the package places it", _placed(generic.exercise)),
        golden=StagePlan(
            "the golden comparison with the fallbacks in place; placement", _placed(generic.compare_with_golden)
        ),
        failure=StagePlan("each fault kind; placement", _placed(generic.inject_faults)),
        integration=StagePlan("the serving loop; placement", _placed(generic.integrate)),
        soak=StagePlan("the soak (fallback time in the breakdown); placement", _placed(generic.load_and_soak)),
    ),
    capabilities=("custom-kernel-sdk",),
    requires=_declares_a_fallback,
    metrics=(
        MetricSpec("declared_fallbacks", "ops the package places on the CPU"),
        MetricSpec("observed_fallbacks", "ops that ran on the CPU"),
        MetricSpec("fallback_ms", "modelled time of the host ops and their transfers"),
    ),
)

OBSERVABILITY = [COUNTERS_TRACE, CPU_FALLBACK]
