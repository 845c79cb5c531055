"""Probe parallel_mode (I08, V20): SubmitJob from several threads at once, each queue in order, the limit."""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npu_sim.client import TIMEOUT_FACTOR, recover, run_call
from npu_sim.device import MAX_IN_FLIGHT, OutputBuffer
from npu_sim.errors import CalrtError, ErrorCode, code_of
from npu_sim.faults import Fault, FaultKind
from npu_sim.kv import KvManager
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan
from npu_sim.probes.together import serve_together
from npu_sim.protocol.context import Recorder, Session
from npu_sim.stages import integration, soak


def job_prompt(queue: int, job: int) -> list[int]:
    """The prefill a thread submits as its queue's `job`-th (the caller replays it: acceptance.probe_judging)."""
    return [1 + queue, 2 + job, 3 + queue * job]


@dataclass
class Submitted:
    queue: int
    order: int
    buffer: OutputBuffer
    kv: KvManager
    seq_id: int
    code: ErrorCode | None = None  # what its wait returned, once settled


@dataclass
class Concurrent:
    done: list[Submitted] = field(default_factory=list)
    overflows: int = 0
    errors: list[str] = field(default_factory=list)


def submit_from_threads(session: Session, threads: int, jobs: int) -> Concurrent:
    """`threads` threads, each on its own queue and KV manager, submit `jobs` prefills without waiting
    between them; on QUEUE_FULL a thread waits for its own oldest job (or retries when it has none)."""
    device, calbin = session.device, session.calbin
    prefill = calbin.model_of_type("llm_prefill")
    outcome = Concurrent()
    lock = threading.Lock()

    def work(queue: int) -> None:
        kv = device.create_kv_manager(calbin)
        outstanding: list[Submitted] = []

        def settle(item: Submitted) -> None:
            code = item.code = item.buffer.wait(1e9)
            if code == ErrorCode.SUCCESS:
                kv.apply(item.seq_id)
            kv.free(item.seq_id)
            with lock:
                outcome.done.append(item)
                if code != ErrorCode.SUCCESS:
                    outcome.errors.append(f"queue {queue} job {item.order}: {code.name}")

        for order in range(jobs):
            seq_id = order + 1
            while len(outstanding) >= kv.lanes:
                settle(outstanding.pop(0))
            kv.allocate(seq_id, 3)
            while True:
                try:
                    buffer = device.infer(prefill, kv, {seq_id: job_prompt(queue, order)}, queue=queue)
                    break
                except CalrtError as error:
                    if error.code != ErrorCode.QUEUE_FULL:
                        raise
                    with lock:
                        outcome.overflows += 1
                    if outstanding:
                        settle(outstanding.pop(0))
                    else:
                        time.sleep(0.0005)
            outstanding.append(Submitted(queue, order, buffer, kv, seq_id))
        for item in outstanding:
            settle(item)

    workers = [threading.Thread(target=work, args=(queue,)) for queue in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outcome


def _parallel_runner(run: ProbeRun) -> None:
    p = run.params
    session = run.session()
    device = session.device
    device.enable_parallel_mode(p["max_in_flight"])
    outcome = submit_from_threads(session, p["threads"], p["jobs_per_thread"])
    _observe_jobs(run, "all_jobs_done", outcome)
    run.observe("per_queue_order.end_ms", [item.buffer.record.end_ms for item in outcome.done])
    expected = p["threads"] * p["jobs_per_thread"]
    ok = len(outcome.done) == expected and not outcome.errors
    run.check("all_jobs_done", ok, "; ".join(outcome.errors[:3]) or f"{expected} jobs from {p['threads']} threads")
    disorder = []
    for queue in range(p["threads"]):
        ends = [
            item.buffer.record.end_ms for item in sorted(outcome.done, key=lambda i: i.order) if item.queue == queue
        ]
        if ends != sorted(ends) or len(set(ends)) != len(ends):
            disorder.append(queue)
    run.check(
        "per_queue_order",
        not disorder,
        f"queues out of order: {disorder}" if disorder else "each queue's jobs finished in submission order",
    )
    depth = run.observe("jobs_in_flight_at_once.max_queue_depth", device.counters()["max_queue_depth"])
    run.check(
        "jobs_in_flight_at_once",
        1 < depth <= p["max_in_flight"],
        f"up to {depth} jobs in flight, limit {p['max_in_flight']}",
    )
    buffers, refused = [], ErrorCode.SUCCESS
    for _ in range(p["max_in_flight"] + 1):
        kv = device.create_kv_manager(session.calbin)  # a sequence of its own for each job
        kv.allocate(1, 3)
        try:
            buffers.append(device.infer(session.calbin.model_of_type("llm_prefill"), kv, {1: [1, 2, 3]}))
        except CalrtError as error:
            refused = error.code
            break
    run.observe("overflow_is_queue_full.accepted", len(buffers))
    run.observe("overflow_is_queue_full.code", refused)
    run.check(
        "overflow_is_queue_full",
        len(buffers) == p["max_in_flight"] and refused == ErrorCode.QUEUE_FULL,
        f"{len(buffers)} jobs accepted, the next: {refused.name}",
    )
    for buffer in buffers:
        buffer.wait(1e9)
    too_many = run.observe("limit_bounded.code", code_of(lambda: device.enable_parallel_mode(MAX_IN_FLIGHT + 1)))
    run.check(
        "limit_bounded",
        too_many == ErrorCode.INVALID_ARGUMENT,
        f"enable_parallel_mode({MAX_IN_FLIGHT + 1}): {too_many.name}",
    )
    run.metrics.update({"jobs": expected, "overflows_retried": outcome.overflows, "max_queue_depth": depth})


def _observe_jobs(run: ProbeRun, check: str, outcome: Concurrent) -> None:
    """Each finished job's queue, order and code, in the order they finished."""
    run.observe(f"{check}.queues", [item.queue for item in outcome.done])
    run.observe(f"{check}.orders", [item.order for item in outcome.done])
    run.observe(f"{check}.codes", [item.code for item in outcome.done])


def _parallel_golden(run: ProbeRun) -> None:
    """What concurrent threads got equals the same prefills run one at a time, bit for bit."""
    p = run.params
    session = run.session()
    session.device.enable_parallel_mode(p["max_in_flight"])
    outcome = submit_from_threads(session, p["threads"], p["jobs_per_thread"])
    _observe_jobs(run, "same_as_one_at_a_time", outcome)
    together = [item.buffer.logits[item.seq_id].view(np.uint16) for item in outcome.done]
    alone = run.session()
    one_at_a_time = []
    for item in outcome.done:
        seq = alone.kv
        seq.allocate(1, 3)
        timeout = TIMEOUT_FACTOR * alone.handle.timing.prefill_call(3).total_ms
        expected = run_call(
            alone.device,
            seq,
            alone.calbin.model_of_type("llm_prefill"),
            {1: job_prompt(item.queue, item.order)},
            timeout,
        )
        seq.free(1)
        one_at_a_time.append(expected.logits[1].view(np.uint16))
    run.observe("same_as_one_at_a_time.together", np.stack(together))
    run.observe("same_as_one_at_a_time.alone", np.stack(one_at_a_time))
    differ = [
        (item.queue, item.order)
        for item, got, wanted in zip(outcome.done, together, one_at_a_time, strict=True)
        if not np.array_equal(got, wanted)
    ]
    run.check(
        "same_as_one_at_a_time",
        not differ and bool(outcome.done),
        f"jobs that differ: {differ[:5]}" if differ else f"{len(outcome.done)} jobs bit-identical",
    )
    generic.compare_with_golden(run, session)


def _parallel_failure(run: ProbeRun) -> None:
    """A core exception with several jobs in flight: the faulted job reports it, the others are aborted;
    after the core reset the same jobs run."""
    p = run.params
    session = run.session()
    device, kv = session.device, session.kv
    device.enable_parallel_mode(p["max_in_flight"])
    count = min(kv.lanes, p["max_in_flight"])
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0))
    buffers = []
    for seq_id in range(1, count + 1):
        kv.allocate(seq_id, 3)
        buffers.append(device.infer(session.calbin.model_of_type("llm_prefill"), kv, {seq_id: [1, 2, 3]}))
    device.disarm_faults()
    codes = run.observe("fault_with_jobs_in_flight.codes", [b.wait(1e9) for b in buffers])
    expected = [ErrorCode.CORE_EXCEPTION] + [ErrorCode.JOB_ABORTED] * (count - 1)
    run.check("fault_with_jobs_in_flight", codes == expected, f"codes {[c.name for c in codes]}")
    actions = recover(device, session.calbin, ErrorCode.CORE_EXCEPTION)
    again = [device.infer(session.calbin.model_of_type("llm_prefill"), kv, {s: [1, 2, 3]}) for s in range(1, count + 1)]
    codes = run.observe("jobs_run_after_reset.codes", [b.wait(1e9) for b in again])
    run.check("jobs_run_after_reset", all(c == ErrorCode.SUCCESS for c in codes), f"after {', '.join(actions)}")
    kv.clear()


def _parallel_serving(run: ProbeRun, routine: Callable[[Recorder, Session], object]) -> None:
    """Two threads each serve on their own KV manager of the same model, in parallel mode."""
    session = run.session()
    device = session.device
    device.enable_parallel_mode(run.params["max_in_flight"])
    second = Session(device, session.calbin, session.handle, device.create_kv_manager(session.calbin))
    recorders = serve_together(run, [("thread 0", session), ("thread 1", second)], routine)
    depth = run.observe("served_in_parallel.max_queue_depth", device.counters()["max_queue_depth"])
    run.check("served_in_parallel", depth > 1, f"up to {depth} jobs in flight from the two threads")
    run.metrics.update(
        {
            "max_queue_depth": depth,
            "serving_threads": {
                rec.label: {"completed": rec.metrics.get("completed"), "concurrency": rec.metrics.get("concurrency")}
                for rec in recorders
            },
        }
    )


def _parallel_integration(run: ProbeRun) -> None:
    params = generic.stage_params(run, integration.PARAMS)
    _parallel_serving(run, lambda rec, own: integration.routine(rec, own, params))


def _parallel_soak(run: ProbeRun) -> None:
    params = generic.stage_params(run, soak.PARAMS)
    # The job's load split between the two threads: the device sees the concurrency the job asked for.
    half = params | {
        "requests": max(1, params["requests"] // 2),
        "concurrency": max(1, params["concurrency"] // 2),
    }
    _parallel_serving(run, lambda rec, own: soak.routine(rec, own, half))


PARALLEL_MODE = ProbeSpec(
    "parallel_mode",
    "Parallel mode (I08, V20): SubmitJob from several threads at once, up to a maximum in flight, each queue's "
    "jobs finishing in submission order, QUEUE_FULL on overflow.",
    generic.plans(
        runner=StagePlan(
            "threads submitting concurrently: all done, per-queue order, jobs in flight, overflow", _parallel_runner
        ),
        golden=StagePlan(
            "what the threads got equals the same jobs one at a time, bit for bit; the golden", _parallel_golden
        ),
        failure=StagePlan(
            "a core exception with jobs in flight: one CORE_EXCEPTION, the rest JOB_ABORTED; reset; again",
            _parallel_failure,
        ),
        integration=StagePlan("two threads serving the same model in parallel mode", _parallel_integration),
        soak=StagePlan(
            "two threads soaking the same model in parallel mode, the job's load split between them", _parallel_soak
        ),
    ),
    capabilities=("parallel-mode", "c-api-nonblocking"),
    params=(
        ParamSpec("threads", "integer", 4, "threads submitting at once", minimum=2, maximum=16),
        ParamSpec("jobs_per_thread", "integer", 6, "jobs each thread submits", minimum=1, maximum=64),
        ParamSpec("max_in_flight", "integer", 4, "the parallel-mode limit", minimum=2, maximum=MAX_IN_FLIGHT),
    ),
    metrics=(
        MetricSpec("max_queue_depth", "most jobs in flight at once"),
        MetricSpec("overflows_retried", "QUEUE_FULL refusals the threads retried"),
        MetricSpec("serving_threads", "integration and soak: each thread's completed requests and concurrency"),
    ),
)
