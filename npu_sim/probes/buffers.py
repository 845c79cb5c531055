"""Probes of what a call hands back: output buffers and wait (I07, V22), and fixed tasks (I06)."""

import numpy as np

from npu_sim.client import recover, run_call, run_request
from npu_sim.device import BufferStatus
from npu_sim.errors import ErrorCode, code_of
from npu_sim.faults import Fault, FaultKind
from npu_sim.golden import compare
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import ProbeSpec, StagePlan
from npu_sim.protocol.context import Session
from npu_sim.stages.common import tolerances

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
    states = (
        run.observe("pending_and_running.first", first.status),
        run.observe("pending_and_running.second", second.status),
    )
    run.check("pending_and_running", states == (BufferStatus.RUNNING, BufferStatus.PENDING), f"two jobs: {states}")
    early = run.observe("no_output_before_done.code", code_of(lambda: first.logits))
    run.check(
        "no_output_before_done", early == ErrorCode.INVALID_ARGUMENT, f"reading a running job's logits: {early.name}"
    )
    short = run.observe("wait_times_out.code", first.wait(first.record.time.total_ms / 10))
    status = run.observe("wait_times_out.status", first.status)
    run.check(
        "wait_times_out",
        short == ErrorCode.TIMEOUT and status == BufferStatus.RUNNING,
        f"a short wait: {short.name}, still {status}",
    )
    done = run.observe("wait_completes.code", first.wait(1e9))
    status = run.observe("wait_completes.status", first.status)
    run.check("wait_completes", done == ErrorCode.SUCCESS and status == BufferStatus.DONE, f"then: {status}")
    negative = run.observe("negative_wait_refused.code", code_of(lambda: first.wait(-1.0)))
    run.check("negative_wait_refused", negative == ErrorCode.INVALID_ARGUMENT, f"wait(-1): {negative.name}")
    second.wait(1e9)
    kv.clear()
    other.clear()
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0))
    kv.allocate(1, 3)
    faulted = device.infer(prefill, kv, {1: [1, 2, 3]})
    code = run.observe("core_exception_state.code", faulted.wait(1e9))
    status = run.observe("core_exception_state.status", faulted.status)
    run.check(
        "core_exception_state",
        code == ErrorCode.CORE_EXCEPTION and status == BufferStatus.CORE_EXCEPTION,
        f"{code.name}, {status}",
    )
    recover(device, session.calbin, code)
    kv.clear()
    left = run.observe("buffers_given_back.dynamic_bytes", device.chiplets[session.handle.chiplets[0]].dynamic_bytes)
    run.check("buffers_given_back", left == 0, "no output buffer memory left after the waits")


def _buffer_failure(run: ProbeRun) -> None:
    """A hung job: every wait times out until a core reset aborts it; then its buffer reports JOB_ABORTED."""
    session = run.session()
    device, kv = session.device, session.kv
    device.inject(Fault(FaultKind.TIMEOUT, at_step=0))
    kv.allocate(1, 3)
    hung = device.infer(session.calbin.model_of_type("llm_prefill"), kv, {1: [1, 2, 3]})
    waits = run.observe("hang_times_out.codes", [hung.wait(1e3), hung.wait(1e6)])
    device.disarm_faults()
    run.check("hang_times_out", waits == [ErrorCode.TIMEOUT, ErrorCode.TIMEOUT], f"waits: {[w.name for w in waits]}")
    device.reset_core(session.handle.chiplets[0], 0)
    aborted = run.observe("aborted_by_reset.code", hung.wait(1.0))
    status = run.observe("aborted_by_reset.status", hung.status)
    run.check(
        "aborted_by_reset",
        aborted == ErrorCode.JOB_ABORTED and status == BufferStatus.CORE_EXCEPTION,
        f"{aborted.name}, {status}",
    )
    retry = device.infer(session.calbin.model_of_type("llm_prefill"), kv, {1: [1, 2, 3]})
    again = run.observe("resubmitted.code", retry.wait(1e9))
    run.check("resubmitted", again == ErrorCode.SUCCESS, "the same job submitted again completes")
    kv.clear()
    generic.inject_faults(run, session)


def _buffer_soak(run: ProbeRun) -> None:
    session = run.session()
    generic.load_and_soak(run, session)
    left = run.observe(
        "buffers_given_back.dynamic_bytes", session.device.chiplets[session.handle.chiplets[0]].dynamic_bytes
    )
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


# The runner plan decodes the package's golden prompt and its first `FIXED_STEPS` decode inputs.
FIXED_STEPS = 4


def _fixed_runner(run: ProbeRun) -> None:
    session = run.session()
    golden = session.calbin.goldens
    tokens = golden.decode_input_ids[:FIXED_STEPS].tolist()
    rows, held = _fixed_decode(session, golden.prompt_ids.tolist(), tokens)
    run.observe("buffer_held_once.dynamic_bytes", held)
    run.check(
        "buffer_held_once",
        len(set(held)) == 1 and held[0] > 0,
        f"dynamic memory during the submits: {sorted(set(held))} B",
    )
    plain = run_request(
        session.device, session.calbin, session.kv, 1, golden.prompt_ids.tolist(), len(tokens), forced=tokens
    )
    run.observe("same_as_infer.infer_code", plain.code)
    fixed = run.observe("same_as_infer.fixed", np.stack(rows).view(np.uint16))
    same = plain.ok and np.array_equal(fixed, run.observe("same_as_infer.infer", plain.logits_rows().view(np.uint16)))
    run.check("same_as_infer", same, "the fixed task's logits equal infer's, bit for bit")
    device, kv = session.device, session.kv
    kv.allocate(1, 3)
    run_call(device, kv, session.calbin.model_of_type("llm_prefill"), {1: [1, 2, 3]}, 1e9)
    task = device.create_fixed_task(session.calbin.model_of_type("llm_decode"), kv, [1])
    kv.allocate(1, 1)
    task.submit({1: [4]})
    busy = run.observe("busy_while_running.code", code_of(lambda: task.submit({1: [4]})))
    run.check("busy_while_running", busy == ErrorCode.BUSY, f"a second submit while the first runs: {busy.name}")
    task.release()
    kv.clear()


def _fixed_golden(run: ProbeRun) -> None:
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    rows, _ = _fixed_decode(session, golden.prompt_ids.tolist(), golden.decode_input_ids.tolist())
    run.observe("golden.logits", np.stack(rows).view(np.uint16))
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
    gone = run.observe("buffer_gone_after_clear.code", code_of(lambda: task.submit({1: [4]})))
    run.check(
        "buffer_gone_after_clear", gone == ErrorCode.INVALID_ARGUMENT, f"submit after clear_dynamic_memory: {gone.name}"
    )
    task = device.create_fixed_task(session.calbin.model_of_type("llm_decode"), kv, [1])
    recreated = run.observe("recreated.code", task.submit({1: [4]}).wait(1e9))
    run.check("recreated", recreated == ErrorCode.SUCCESS, "a new fixed task runs")
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
