"""What the device records: one row per call, device events, counters (I12, V22, V38) and the trace (V37).

The trace is Chrome trace-event JSON (the format Perfetto and chrome://tracing open): one process per
chiplet (a thread per core) and one for the host (PCIe transfers and ops that fell back to the CPU), a
complete event ("ph": "X") per transfer and per op, times in whole microseconds of device time.
"""

import math
from dataclasses import dataclass, field
from typing import Any

from npu_sim.timing import CallTime

# Which part of a call's infer time each op takes its share of (the trace splits a part evenly over its ops).
OP_PARTS = {
    "embedding": "overhead",
    "rms_norm": "overhead",
    "rope": "overhead",
    "moe_router": "overhead",
    "quantize": "overhead",
    "dequantize": "overhead",
    "qkv_matmul": "matmul",
    "o_matmul": "matmul",
    "moe_dense_group": "matmul",
    "lm_head": "matmul",
    "flash_attention": "attention",
    "all_reduce": "link",
    "all_to_all": "link",
    "stage_send": "link",
}
SAMPLING_OP = "topk_sampling"
HOST_PID = 0
# Threads of the host process in the trace: PCIe transfers, and ops that fell back to the CPU.
PCIE_TID, CPU_TID = 1, 2


@dataclass(frozen=True)
class CallRecord:
    call: int
    model: int  # model handle id
    model_name: str
    submodel: str
    queue: int
    lanes: int
    tokens: int
    queue_depth: int  # jobs of its model already in flight when this one was submitted
    start_ms: float
    end_ms: float  # math.inf for a job that hangs
    time: CallTime
    chiplets: tuple[int, ...]
    placement: tuple[tuple[str, str], ...]  # (op, "npu" or "cpu") as it ran
    h2d_bytes: int
    d2h_bytes: int
    d2d_bytes: int
    board_link_bytes: int
    sampled: bool
    fixed_task: bool


@dataclass(frozen=True)
class DeviceEvent:
    ms: float
    name: str  # "configure", "load", "unload", "reset_core", ...
    args: dict[str, Any] = field(default_factory=dict)


def counters(records: list[CallRecord], in_flight: int, max_queue_depth: int, clock_ms: float) -> dict[str, Any]:
    """Totals over `records` (modelled milliseconds, bytes); per-chiplet busy time and link bytes (V38)."""
    per_chiplet: dict[int, dict[str, float]] = {}
    for r in records:
        share = 1 / len(r.chiplets)
        for c in r.chiplets:
            row = per_chiplet.setdefault(c, {"busy_ms": 0.0, "d2d_bytes": 0.0, "calls": 0})
            row["busy_ms"] += r.time.infer_ms
            row["d2d_bytes"] += r.d2d_bytes * share
            row["calls"] += 1
    return {
        "calls": len(records),
        "queue_depth": in_flight,
        "max_queue_depth": max_queue_depth,
        "h2d_ms": sum(r.time.h2d_ms for r in records),
        "infer_ms": sum(r.time.infer_ms for r in records),
        "d2h_ms": sum(r.time.d2h_ms for r in records),
        "sampling_ms": sum(r.time.sampling_ms for r in records),
        "fallback_ms": sum(r.time.fallback_ms for r in records),
        "h2d_bytes": sum(r.h2d_bytes for r in records),
        "d2h_bytes": sum(r.d2h_bytes for r in records),
        "d2d_bytes": sum(r.d2d_bytes for r in records),
        "board_link_bytes": sum(r.board_link_bytes for r in records),
        "cpu_fallback_ops": sum(1 for r in records for _, where in r.placement if where == "cpu"),
        "chiplets": {f"chip{c}": {k: round(v, 3) for k, v in row.items()} for c, row in sorted(per_chiplet.items())},
        "clock_ms": clock_ms,
    }


def _microseconds(ms: float) -> int:
    """A moment on the trace's clock: whole microseconds, which a viewer reads exactly (Perfetto turns a
    fractional value into nanoseconds by truncation, which can move a slice's end past the next one's start)."""
    return round(ms * 1e3)


def _event(name: str, pid: int, tid: int, start_ms: float, ms: float, **args: Any) -> dict[str, Any]:
    # The end is rounded, not the duration: a slice that ends where the next begins still does after rounding.
    ts = _microseconds(start_ms)
    return {
        "name": name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": _microseconds(start_ms + ms) - ts,
        "args": args,
    }


def _call_events(r: CallRecord) -> list[dict[str, Any]]:
    t = r.time
    label = f"{r.model_name}:{r.submodel}#{r.call}"
    events = [_event(f"H2D {label}", HOST_PID, PCIE_TID, r.start_ms, t.h2d_ms, bytes=r.h2d_bytes)]
    cursor = r.start_ms + t.h2d_ms
    parts = dict(t.parts)
    npu_ops = [op for op, where in r.placement if where == "npu" and op in OP_PARTS]
    for op in npu_ops:
        group = [o for o in npu_ops if OP_PARTS[o] == OP_PARTS[op]]
        ms = parts.get(OP_PARTS[op], 0.0) / len(group)
        for chiplet in r.chiplets:
            events.append(_event(op, chiplet + 1, 0, cursor, ms, call=r.call, model=r.model_name, placement="npu"))
        cursor += ms
    host_ops = [op for op, where in r.placement if where == "cpu"]
    for op in host_ops:
        ms = t.fallback_ms / len(host_ops)
        events.append(_event(op, HOST_PID, CPU_TID, cursor, ms, call=r.call, model=r.model_name, placement="cpu"))
        cursor += ms
    if r.sampled:
        for chiplet in r.chiplets[:1]:
            events.append(_event(SAMPLING_OP, chiplet + 1, 0, cursor, t.sampling_ms, call=r.call, model=r.model_name))
        cursor += t.sampling_ms
    events.append(_event(f"D2H {label}", HOST_PID, PCIE_TID, cursor, t.d2h_ms, bytes=r.d2h_bytes))
    return events


def chrome_trace(
    records: list[CallRecord], events: list[DeviceEvent], chiplets: int, identity: dict[str, Any]
) -> dict[str, Any]:
    """The device's activity as Chrome trace-event JSON."""
    trace: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}},
        {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": PCIE_TID, "args": {"name": "PCIe"}},
        {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": CPU_TID, "args": {"name": "CPU fallback"}},
    ]
    for chiplet in range(chiplets):
        name = f"board {chiplet // 2} chiplet {chiplet % 2}"
        trace.append({"name": "process_name", "ph": "M", "pid": chiplet + 1, "tid": 0, "args": {"name": name}})
    for r in records:
        if math.isfinite(r.end_ms):
            trace += _call_events(r)
        trace.append(
            {
                "name": "queue_depth",
                "ph": "C",
                "pid": HOST_PID,
                "tid": 0,
                "ts": _microseconds(r.start_ms),
                "args": {"jobs": r.queue_depth + 1},
            }
        )
    for e in events:
        trace.append(
            {"name": e.name, "ph": "i", "s": "g", "pid": HOST_PID, "tid": 0, "ts": _microseconds(e.ms), "args": e.args}
        )
    return {
        "traceEvents": trace,
        "displayTimeUnit": "ms",
        "otherData": {"device": identity, "clock": "modelled device time"},
    }
