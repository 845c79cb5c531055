"""Probes of the runtime's calling surface: parallel mode (I08, V20), output buffers and wait (I07, V22),
fixed tasks (I06), the C API (I13), and version, dtype sizes and full debug (I14)."""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npu_sim import c_api
from npu_sim.client import TIMEOUT_FACTOR, recover, run_call, run_request
from npu_sim.device import MAX_IN_FLIGHT, BufferStatus, OutputBuffer
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.golden import compare
from npu_sim.kv import KvManager
from npu_sim.model import KvCache
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import Recorder, Session
from npu_sim.stages import integration, soak
from npu_sim.stages.common import tolerances


def code_of(action: Callable[[], object]) -> ErrorCode:
    try:
        outcome = action()
    except CalrtError as error:
        return error.code
    return outcome if isinstance(outcome, ErrorCode) else ErrorCode.SUCCESS


def _prompt(queue: int, job: int) -> list[int]:
    return [1 + queue, 2 + job, 3 + queue * job]


# parallel_mode (I08, V20)


@dataclass
class Submitted:
    queue: int
    order: int
    buffer: OutputBuffer
    kv: KvManager
    seq_id: int


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
            code = item.buffer.wait(1e9)
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
                    buffer = device.infer(prefill, kv, {seq_id: _prompt(queue, order)}, queue=queue)
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
    depth = device.counters()["max_queue_depth"]
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
    run.check(
        "overflow_is_queue_full",
        len(buffers) == p["max_in_flight"] and refused == ErrorCode.QUEUE_FULL,
        f"{len(buffers)} jobs accepted, the next: {refused.name}",
    )
    for buffer in buffers:
        buffer.wait(1e9)
    too_many = code_of(lambda: device.enable_parallel_mode(MAX_IN_FLIGHT + 1))
    run.check(
        "limit_bounded",
        too_many == ErrorCode.INVALID_ARGUMENT,
        f"enable_parallel_mode({MAX_IN_FLIGHT + 1}): {too_many.name}",
    )
    run.metrics.update({"jobs": expected, "overflows_retried": outcome.overflows, "max_queue_depth": depth})


def _parallel_golden(run: ProbeRun) -> None:
    """What concurrent threads got equals the same prefills run one at a time, bit for bit."""
    p = run.params
    session = run.session()
    session.device.enable_parallel_mode(p["max_in_flight"])
    outcome = submit_from_threads(session, p["threads"], p["jobs_per_thread"])
    alone = run.session()
    differ = []
    for item in outcome.done:
        seq = alone.kv
        seq.allocate(1, 3)
        timeout = TIMEOUT_FACTOR * alone.handle.timing.prefill_call(3).total_ms
        expected = run_call(
            alone.device, seq, alone.calbin.model_of_type("llm_prefill"), {1: _prompt(item.queue, item.order)}, timeout
        )
        seq.free(1)
        if not np.array_equal(expected.logits[1].view(np.uint16), item.buffer.logits[item.seq_id].view(np.uint16)):
            differ.append((item.queue, item.order))
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
    codes = [b.wait(1e9) for b in buffers]
    expected = [ErrorCode.CORE_EXCEPTION] + [ErrorCode.JOB_ABORTED] * (count - 1)
    run.check("fault_with_jobs_in_flight", codes == expected, f"codes {[c.name for c in codes]}")
    actions = recover(device, session.calbin, ErrorCode.CORE_EXCEPTION)
    again = [device.infer(session.calbin.model_of_type("llm_prefill"), kv, {s: [1, 2, 3]}) for s in range(1, count + 1)]
    run.check(
        "jobs_run_after_reset", all(b.wait(1e9) == ErrorCode.SUCCESS for b in again), f"after {', '.join(actions)}"
    )
    kv.clear()


def _parallel_serving(run: ProbeRun, routine: Callable[[Recorder, Session], object]) -> None:
    """Two threads each serve on their own KV manager of the same model, in parallel mode."""
    session = run.session()
    device = session.device
    device.enable_parallel_mode(run.params["max_in_flight"])
    sessions = [session, Session(device, session.calbin, session.handle, device.create_kv_manager(session.calbin))]
    recorders = [run.part(f"thread {i}") for i in range(2)]
    errors: list[BaseException] = []

    def serve(rec: Recorder, own: Session) -> None:
        try:
            routine(rec, own)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=serve, args=pair) for pair in zip(recorders, sessions, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    for rec in recorders:
        run.take(rec)
    depth = device.counters()["max_queue_depth"]
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


# output_buffer (I07, V22)


def _buffer_runner(run: ProbeRun) -> None:
    session = run.session()
    device, kv = session.device, session.kv
    prefill = session.calbin.model_of_type("llm_prefill")
    device.enable_parallel_mode(2)
    other = device.create_kv_manager(session.calbin)  # a second sequence, whatever the decode batch
    kv.allocate(1, 3)
    other.allocate(1, 3)
    first = device.infer(prefill, kv, {1: [1, 2, 3]})
    second = device.infer(prefill, other, {1: [4, 5, 6]})
    states = (first.status, second.status)
    run.check("pending_and_running", states == (BufferStatus.RUNNING, BufferStatus.PENDING), f"two jobs: {states}")
    early = code_of(lambda: first.logits)
    run.check(
        "no_output_before_done", early == ErrorCode.INVALID_ARGUMENT, f"reading a running job's logits: {early.name}"
    )
    short = first.wait(first.record.time.total_ms / 10)
    run.check(
        "wait_times_out",
        short == ErrorCode.TIMEOUT and first.status == BufferStatus.RUNNING,
        f"a short wait: {short.name}, still {first.status}",
    )
    run.check(
        "wait_completes",
        first.wait(1e9) == ErrorCode.SUCCESS and first.status == BufferStatus.DONE,
        f"then: {first.status}",
    )
    negative = code_of(lambda: first.wait(-1.0))
    run.check("negative_wait_refused", negative == ErrorCode.INVALID_ARGUMENT, f"wait(-1): {negative.name}")
    second.wait(1e9)
    kv.clear()
    other.clear()
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0))
    kv.allocate(1, 3)
    faulted = device.infer(prefill, kv, {1: [1, 2, 3]})
    code = faulted.wait(1e9)
    run.check(
        "core_exception_state",
        code == ErrorCode.CORE_EXCEPTION and faulted.status == BufferStatus.CORE_EXCEPTION,
        f"{code.name}, {faulted.status}",
    )
    recover(device, session.calbin, code)
    kv.clear()
    run.check(
        "buffers_given_back",
        device.chiplets[session.handle.chiplets[0]].dynamic_bytes == 0,
        "no output buffer memory left after the waits",
    )


def _buffer_failure(run: ProbeRun) -> None:
    """A hung job: every wait times out until a core reset aborts it; then its buffer reports JOB_ABORTED."""
    session = run.session()
    device, kv = session.device, session.kv
    device.inject(Fault(FaultKind.TIMEOUT, at_step=0))
    kv.allocate(1, 3)
    hung = device.infer(session.calbin.model_of_type("llm_prefill"), kv, {1: [1, 2, 3]})
    waits = [hung.wait(1e3), hung.wait(1e6)]
    device.disarm_faults()
    run.check("hang_times_out", waits == [ErrorCode.TIMEOUT, ErrorCode.TIMEOUT], f"waits: {[w.name for w in waits]}")
    device.reset_core(session.handle.chiplets[0], 0)
    aborted = hung.wait(1.0)
    run.check(
        "aborted_by_reset",
        aborted == ErrorCode.JOB_ABORTED and hung.status == BufferStatus.CORE_EXCEPTION,
        f"{aborted.name}, {hung.status}",
    )
    retry = device.infer(session.calbin.model_of_type("llm_prefill"), kv, {1: [1, 2, 3]})
    run.check("resubmitted", retry.wait(1e9) == ErrorCode.SUCCESS, "the same job submitted again completes")
    kv.clear()
    generic.inject_faults(run, session)


def _buffer_soak(run: ProbeRun) -> None:
    session = run.session()
    generic.load_and_soak(run, session)
    left = session.device.chiplets[session.handle.chiplets[0]].dynamic_bytes
    run.check("buffers_given_back", left == 0, f"{left} B of output buffers left after the soak")


OUTPUT_BUFFER = ProbeSpec(
    "output_buffer",
    "Output buffers (I07, V22): pending, running, done and core exception; wait with a time-out; nothing to "
    "read before done; buffers given back.",
    generic.plans(
        runner=StagePlan(
            "the states of two jobs, a short wait, a full wait, refusals, a core exception", _buffer_runner
        ),
        failure=StagePlan(
            "a hung job times out until a reset aborts it; it runs again; each fault kind", _buffer_failure
        ),
        soak=StagePlan("the soak; no output buffer memory left afterwards", _buffer_soak),
    ),
    capabilities=("output-buffer-wait",),
)


# fixed_task (I06)


def _fixed_decode(session: Session, prompt: list[int], tokens: list[int]) -> tuple[list[np.ndarray], list[int]]:
    """Prefill, then decode `tokens` through one fixed task; the dynamic memory held after each submit."""
    device, kv = session.device, session.kv
    decode = session.calbin.model_of_type("llm_decode")
    kv.allocate(1, len(prompt))
    first = run_call(device, kv, session.calbin.model_of_type("llm_prefill"), {1: prompt}, 1e9).logits[1]
    task = device.create_fixed_task(decode, kv, [1])
    rows, held = [first], []
    for token in tokens:
        kv.allocate(1, 1)
        buffer = task.submit({1: [token]})
        held.append(device.chiplets[session.handle.chiplets[0]].dynamic_bytes)
        buffer.wait(1e9)
        kv.apply(1)
        rows.append(buffer.logits[1])
    task.release()
    kv.free(1)
    return rows, held


def _fixed_runner(run: ProbeRun) -> None:
    session = run.session()
    golden = session.calbin.goldens
    tokens = golden.decode_input_ids[:4].tolist()
    rows, held = _fixed_decode(session, golden.prompt_ids.tolist(), tokens)
    run.check(
        "buffer_held_once",
        len(set(held)) == 1 and held[0] > 0,
        f"dynamic memory during the submits: {sorted(set(held))} B",
    )
    plain = run_request(
        session.device, session.calbin, session.kv, 1, golden.prompt_ids.tolist(), len(tokens), forced=tokens
    )
    same = plain.ok and np.array_equal(np.stack(rows).view(np.uint16), plain.logits_rows().view(np.uint16))
    run.check("same_as_infer", same, "the fixed task's logits equal infer's, bit for bit")
    device, kv = session.device, session.kv
    kv.allocate(1, 3)
    run_call(device, kv, session.calbin.model_of_type("llm_prefill"), {1: [1, 2, 3]}, 1e9)
    task = device.create_fixed_task(session.calbin.model_of_type("llm_decode"), kv, [1])
    kv.allocate(1, 1)
    task.submit({1: [4]})
    busy = code_of(lambda: task.submit({1: [4]}))
    run.check("busy_while_running", busy == ErrorCode.BUSY, f"a second submit while the first runs: {busy.name}")
    task.release()
    kv.clear()


def _fixed_golden(run: ProbeRun) -> None:
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    rows, _ = _fixed_decode(session, golden.prompt_ids.tolist(), golden.decode_input_ids.tolist())
    limits = tolerances(run.stage_params)
    reports = {
        "prefill_logits": compare(golden.prefill_logits, np.stack(rows[:1]), limits["prefill_logits"]),
        "decode_logits": compare(golden.decode_logits, np.stack(rows[1:]), limits["decode_logits"]),
    }
    for name, report in reports.items():
        run.check(f"golden:{name}", report["passed"], "; ".join(report["failures"]) or "within tolerance")
    run.metrics["tensors"] = {name: {k: r[k] for k in ("max_abs", "cosine", "top1")} for name, r in reports.items()}


def _fixed_failure(run: ProbeRun) -> None:
    session = run.session()
    device, kv = session.device, session.kv
    kv.allocate(1, 3)
    run_call(device, kv, session.calbin.model_of_type("llm_prefill"), {1: [1, 2, 3]}, 1e9)
    task = device.create_fixed_task(session.calbin.model_of_type("llm_decode"), kv, [1])
    device.clear_dynamic_memory()
    kv.allocate(1, 1)
    gone = code_of(lambda: task.submit({1: [4]}))
    run.check(
        "buffer_gone_after_clear", gone == ErrorCode.INVALID_ARGUMENT, f"submit after clear_dynamic_memory: {gone.name}"
    )
    task = device.create_fixed_task(session.calbin.model_of_type("llm_decode"), kv, [1])
    run.check("recreated", task.submit({1: [4]}).wait(1e9) == ErrorCode.SUCCESS, "a new fixed task runs")
    task.release()
    kv.clear()
    generic.inject_faults(run, session)


FIXED_TASK = ProbeSpec(
    "fixed_task",
    "Fixed tasks (I06): a decode sub-model bound once to its sequences and one output buffer, submitted again "
    "and again; the same logits as infer without a buffer per call.",
    generic.plans(
        runner=StagePlan("one buffer held across submits, the same bits as infer, BUSY while running", _fixed_runner),
        golden=StagePlan("the golden path decoded through a fixed task, against the golden", _fixed_golden),
        failure=StagePlan(
            "after clear_dynamic_memory the task is refused, a new one runs; each fault kind", _fixed_failure
        ),
    ),
    capabilities=("fixed-task-infer",),
)


# c_api_nonblocking (I13)


def _c_runner(run: ProbeRun) -> None:
    session = run.session()
    device, kv = session.device, session.kv
    prefill = session.calbin.model_of_type("llm_prefill")
    vocab = session.calbin.config.vocab
    kv.allocate(1, 3)
    handles: list[OutputBuffer] = []
    code = c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles)
    run.check(
        "nonblocking_returns_at_once",
        code == 0 and handles[0].status != BufferStatus.DONE,
        f"code {code}, status {handles[0].status}",
    )
    run.check(
        "wait_timeout_code",
        c_api.calrt_wait(handles[0], 0.0) == int(ErrorCode.TIMEOUT),
        "wait(0) on a running job returns 18",
    )
    out = np.zeros(vocab, dtype=np.uint16)
    codes = c_api.calrt_wait(handles[0], 1e9), c_api.calrt_get_output(handles[0], 1, out)
    kv.apply(1)
    kv.free(1)
    kv.allocate(1, 3)
    blocking = {1: np.zeros(vocab, dtype=np.uint16)}
    code = c_api.calrt_infer_blocking(device, prefill, kv, {1: [1, 2, 3]}, 1e9, blocking)
    kv.apply(1)
    kv.free(1)
    run.check(
        "blocking_equals_nonblocking",
        codes == (0, 0) and code == 0 and np.array_equal(out, blocking[1]),
        f"codes {codes}, {code}",
    )
    kv.allocate(1, 2)
    bad = c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, vocab]}, handles)
    shape = c_api.calrt_infer_nonblocking(device, session.calbin.model_of_type("llm_decode"), kv, {1: [1, 2]}, handles)
    run.check(
        "errors_are_codes",
        (bad, shape) == (int(ErrorCode.INVALID_ARGUMENT), int(ErrorCode.SHAPE_MISMATCH)),
        f"codes {bad}, {shape}",
    )
    kv.clear()


def _c_golden(run: ProbeRun) -> None:
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    device, kv, calbin = session.device, session.kv, session.calbin
    vocab = calbin.config.vocab
    rows = []
    prompt = golden.prompt_ids.tolist()
    kv.allocate(1, len(prompt))
    out = {1: np.zeros(vocab, dtype=np.uint16)}
    codes = [c_api.calrt_infer_blocking(device, calbin.model_of_type("llm_prefill"), kv, {1: prompt}, 1e9, out)]
    rows.append(out[1].copy())
    kv.apply(1)
    for token in golden.decode_input_ids.tolist():
        kv.allocate(1, 1)
        codes.append(c_api.calrt_infer_blocking(device, calbin.model_of_type("llm_decode"), kv, {1: [token]}, 1e9, out))
        rows.append(out[1].copy())
        kv.apply(1)
    kv.free(1)
    limits = tolerances(run.stage_params)
    if run.check("codes", all(c == 0 for c in codes), f"{len(codes)} blocking calls returned {sorted(set(codes))}"):
        report = compare(golden.decode_logits, np.stack(rows[1:]), limits["decode_logits"])
        run.check("golden:decode_logits", report["passed"], "; ".join(report["failures"]) or "within tolerance")


def _c_failure(run: ProbeRun) -> None:
    session = run.session()
    device, kv = session.device, session.kv
    prefill = session.calbin.model_of_type("llm_prefill")
    handles: list[OutputBuffer] = []
    device.inject(Fault(FaultKind.BUSY, at_step=0))
    kv.allocate(1, 3)
    busy = c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles)
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0))
    c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles)
    core = c_api.calrt_wait(handles[-1], 1e9)
    device.disarm_faults()
    run.check(
        "faults_as_codes",
        (busy, core) == (int(ErrorCode.BUSY), int(ErrorCode.CORE_EXCEPTION)),
        f"busy {busy}, core exception {core}",
    )
    recover(device, session.calbin, ErrorCode(core))
    run.check(
        "serves_after_recovery",
        c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles) == 0,
        "the same job submitted again is accepted",
    )
    handles[-1].wait(1e9)
    kv.clear()
    generic.inject_faults(run, session)


C_API_NONBLOCKING = ProbeSpec(
    "c_api_nonblocking",
    "The C API (I13): blocking, non-blocking and wait, every outcome an int code from the table, outputs copied "
    "into the caller's buffers.",
    generic.plans(
        runner=StagePlan(
            "non-blocking returns at once, wait times out then completes, blocking gives the same bits, "
            "errors as codes",
            _c_runner,
        ),
        golden=StagePlan("the golden path through blocking calls, against the golden", _c_golden),
        failure=StagePlan("busy and core exception as codes; recovery; each fault kind", _c_failure),
    ),
    capabilities=("c-api-nonblocking",),
)


# full_debug (I14)


def reference_dump(session: Session, prompt: list[int]) -> list[np.ndarray]:
    model = session.calbin.reference()
    model.dump = []
    model.prefill(
        KvCache(session.calbin.config, 1, session.calbin.k_dtype, session.calbin.v_dtype), 0, np.array(prompt), 0
    )
    return model.dump


def _debug_runner(run: ProbeRun) -> None:
    session = run.session()
    device = session.device
    identity = device.identity
    run.check("version", device.version() == identity.calrt, f"the runtime reports CalRT {device.version()}")
    sizes = {name: device.dtype_bit_size(name) for name in ("bf16", "f32", "s8", "s32")}
    unknown = code_of(lambda: device.dtype_bit_size("f7"))
    run.check(
        "dtype_bit_size",
        sizes == {"bf16": 16, "f32": 32, "s8": 8, "s32": 32} and unknown == ErrorCode.DTYPE_MISMATCH,
        f"{sizes}; f7: {unknown.name}",
    )
    prompt = session.calbin.goldens.prompt_ids.tolist()
    plain = run_request(device, session.calbin, session.kv, 1, prompt, 0)
    device.set_full_debug(True)
    debugged = run_request(device, session.calbin, session.kv, 1, prompt, 0)
    call = device.call_log[-1]
    dump = device.debug_dumps.get(call.call, [])
    layers, hidden = session.calbin.config.layers, session.calbin.config.hidden
    run.check(
        "dump_per_layer",
        len(dump) == layers and all(d.shape == (len(prompt), hidden) for d in dump),
        f"{len(dump)} layers of {[d.shape for d in dump][:1]}",
    )
    cost = call.time.d2h_ms > device.call_log[-2].time.d2h_ms
    run.check(
        "debug_costs_d2h",
        cost,
        f"D2H {call.time.d2h_ms:.4f} ms with debug, {device.call_log[-2].time.d2h_ms:.4f} ms without",
    )
    same = (
        plain.ok
        and debugged.ok
        and np.array_equal(plain.logits_rows().view(np.uint16), debugged.logits_rows().view(np.uint16))
    )
    run.check("output_unchanged", same, "the logits are the same bits with full debug on")
    device.set_full_debug(False)
    run.metrics["layers_dumped"] = len(dump)


def _debug_golden(run: ProbeRun) -> None:
    """Each layer's output in the dump equals the reference's for the same layer."""
    session = run.session()
    session.device.set_full_debug(True)
    prompt = session.calbin.goldens.prompt_ids.tolist()
    run_request(session.device, session.calbin, session.kv, 1, prompt, 0)
    dump = session.device.debug_dumps[session.device.call_log[-1].call]
    expected = reference_dump(session, prompt)
    worst = min(compare(e, d)["cosine"] or 0.0 for e, d in zip(expected, dump, strict=True))
    run.check("layers_match_reference", worst >= 0.9999, f"lowest cosine of a layer against the reference: {worst:.8f}")
    generic.compare_with_golden(run, session)


def _debugging(plan: Callable[[ProbeRun, Session], None]) -> Callable[[ProbeRun], None]:
    def run_with_debug(run: ProbeRun) -> None:
        session = run.session()
        session.device.set_full_debug(True)
        plan(run, session)
        dumps = session.device.debug_dumps
        layers = session.calbin.config.layers
        complete = bool(dumps) and all(len(dump) == layers for dump in dumps.values())
        run.check("dumped_every_layer", complete, f"{len(dumps)} calls dumped, {layers} layers each")

    return run_with_debug


FULL_DEBUG = ProbeSpec(
    "full_debug",
    "Version, dtype bit sizes and full debug (I14): with full debug every call also returns each layer's "
    "output, equal to the reference's, at a D2H cost, with the logits unchanged.",
    generic.plans(
        runner=StagePlan("version, dtype sizes, a dump per layer, its D2H cost, unchanged logits", _debug_runner),
        golden=StagePlan("every layer of the dump against the reference's; the golden comparison", _debug_golden),
        failure=StagePlan(
            "each fault kind with full debug on", _debugging(lambda run, s: generic.inject_faults(run, s))
        ),
        integration=StagePlan(
            "the serving loop with full debug on", _debugging(lambda run, s: generic.integrate(run, s))
        ),
        soak=StagePlan(
            "the soak with full debug on (its D2H shows in the breakdown)",
            _debugging(lambda run, s: generic.load_and_soak(run, s)),
        ),
    ),
    capabilities=("full-debug",),
    metrics=(MetricSpec("layers_dumped", "layer outputs in one call's dump"),),
)

RUNTIME = [PARALLEL_MODE, OUTPUT_BUFFER, FIXED_TASK, C_API_NONBLOCKING, FULL_DEBUG]
