"""Probes of a job's lifecycle: cancel and time-out (V23: what happens to its DMA, KV and buffer), and a reset
after a drain (V51: nothing in flight is lost)."""

import numpy as np

from npu_sim.client import TIMEOUT_FACTOR
from npu_sim.device import BufferStatus, DeviceStatus, OutputBuffer
from npu_sim.errors import ErrorCode, code_of
from npu_sim.faults import Fault, FaultKind
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin
from npu_sim.probes import generic
from npu_sim.probes.faults import _golden_request
from npu_sim.probes.kv import package_prompt, prompt_of
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import Session


def _submit_prefill(session: Session, seq_id: int, tokens: list[int], kv: KvManager | None = None) -> OutputBuffer:
    kv = kv or session.kv
    kv.allocate(seq_id, len(tokens))
    return session.device.infer(session.calbin.model_of_type("llm_prefill"), kv, {seq_id: tokens})


def _timeout_of(session: Session, tokens: int) -> float:
    return TIMEOUT_FACTOR * session.handle.timing.prefill_call(tokens, 0).total_ms


def _gone(run: ProbeRun, check: str, session: Session, seq_id: int) -> bool:
    """The sequence holds no KV cell: what the cancelled job allocated came back."""
    return seq_id not in run.observe(f"{check}.sequences", session.kv.sequences())


def _memory_back(run: ProbeRun, check: str, session: Session) -> bool:
    return run.observe(f"{check}.dynamic_bytes", _dynamic_bytes(session)) == 0


def _dynamic_bytes(session: Session) -> int:
    return sum(chiplet.dynamic_bytes for chiplet in session.device.chiplets)


# job_cancel (V23)
# What the runner plan observes is judged by the caller too (acceptance.probe_judging): the prompt's length.
CANCEL_PROMPT = 6


def _cancel_runner(run: ProbeRun) -> None:
    """A pending job cancelled, a running one cancelled, a hung one timed out then cancelled; a finished one
    cannot be. After each: its KV cells and buffer memory back, nothing else disturbed, the next request runs."""
    session = run.session()
    device = session.device
    device.enable_parallel_mode(2)
    prompt = prompt_of(session, CANCEL_PROMPT)
    # A second KV manager's request queued behind the first (a package of one lane has room for one sequence).
    other = device.create_kv_manager(session.calbin)
    first, queued = _submit_prefill(session, 1, prompt), _submit_prefill(session, 1, prompt, other)
    was_pending = run.observe("cancel_pending.before", queued.status.value) == BufferStatus.PENDING
    device.cancel(queued)
    first_code = run.observe("cancel_pending.first_code", first.wait(_timeout_of(session, len(prompt))))
    session.kv.apply(1)
    run.check(
        "cancel_pending",
        was_pending
        and run.observe("cancel_pending.status", queued.status.value) == BufferStatus.CANCELLED
        and run.observe("cancel_pending.code", queued.wait(1.0)) == ErrorCode.JOB_ABORTED
        and run.observe("cancel_pending.other_sequences", other.sequences()) == []
        and run.observe("cancel_pending.cells", session.kv.length(1)) == len(prompt)
        and first_code == ErrorCode.SUCCESS,
        f"a queued job cancelled: {queued.status}, its KV cells back; the job before it ends {first_code.name}",
    )
    session.kv.free(1)
    running = _submit_prefill(session, 3, prompt)
    job = running.job
    device.advance((job.start_ms + job.end_ms) / 2 - device.clock_ms)
    was_running = run.observe("cancel_running.before", running.status.value) == BufferStatus.RUNNING
    device.cancel(running)
    refused = run.observe("cancel_running.output_code", code_of(lambda: running.logits))
    run.check(
        "cancel_running",
        was_running
        and run.observe("cancel_running.status", running.status.value) == BufferStatus.CANCELLED
        and refused == ErrorCode.INVALID_ARGUMENT
        and _gone(run, "cancel_running", session, 3)
        and _memory_back(run, "cancel_running", session)
        and run.observe("cancel_running.in_flight", device.in_flight()) == 0,
        f"a running job cancelled: its DMA stopped, no output ({refused.name}), its cells and buffer back",
    )
    device.inject(Fault(FaultKind.TIMEOUT, at_step=0))
    hung = _submit_prefill(session, 4, prompt)
    device.disarm_faults()
    timed_out = run.observe("timeout_then_cancel.code", hung.wait(_timeout_of(session, len(prompt))))
    device.cancel(hung)
    after = _golden_request(session)
    run.observe("timeout_then_cancel.served_code", after.code)
    run.check(
        "timeout_then_cancel",
        timed_out == ErrorCode.TIMEOUT
        and _gone(run, "timeout_then_cancel", session, 4)
        and _memory_back(run, "timeout_then_cancel", session)
        and after.ok,
        f"a hung job's wait gives {timed_out.name}; cancelled, the chiplets are free without a reset and the "
        f"next request {'runs' if after.ok else f'fails ({after.code.name})'}",
    )
    done = _submit_prefill(session, 5, prompt)
    done.wait(_timeout_of(session, len(prompt)))
    too_late = run.observe("finished_not_cancelled.code", code_of(lambda: device.cancel(done)))
    session.kv.apply(5)
    run.check(
        "finished_not_cancelled",
        too_late == ErrorCode.INVALID_ARGUMENT
        and run.observe("finished_not_cancelled.status", done.status.value) == BufferStatus.DONE
        and run.observe("finished_not_cancelled.cells", session.kv.length(5)) == len(prompt),
        f"cancelling a finished job: {too_late.name}; its results and cells stand",
    )
    session.kv.free(5)
    run.metrics["cancelled"] = sum(1 for event in device.events if event.name == "cancel")


def _cancel_golden(run: ProbeRun) -> None:
    """A job cancelled mid-run beside a sequence that goes on: the other sequence still matches the golden."""
    session = run.session()
    running = _submit_prefill(session, 9, prompt_of(session, 6))
    session.device.advance(1e-3)
    session.device.cancel(running)
    generic.compare_with_golden(run, session)


JOB_CANCEL = ProbeSpec(
    "job_cancel",
    "A job's cancel and time-out (V23): a pending and a running job cancelled, a hung job's wait timed out and the "
    "job cancelled; its DMA stops, the KV cells allocated for it are rolled back, its output buffer's memory comes "
    "back, the jobs behind it run, a finished job cannot be cancelled.",
    generic.plans(
        runner=StagePlan("pending, running and timed-out jobs cancelled; their DMA, KV and buffer", _cancel_runner),
        golden=StagePlan("after a cancelled job the golden request matches the golden", _cancel_golden),
    ),
    capabilities=("job-cancel-timeout",),
    metrics=(MetricSpec("cancelled", "jobs cancelled"),),
)


# reset_drain (V51)
# What the plans observe is judged by the caller too (acceptance.probe_judging): the drained sequences' prompts.
DRAINED = (1, 2, 3)


def drained_prompt(calbin: Calbin, seq_id: int) -> list[int]:
    """The prompt of drained sequence `seq_id`, from the package alone."""
    return package_prompt(calbin, 4 + seq_id, seed=seq_id)


def _drain_runner(run: ProbeRun) -> None:
    """Jobs in flight drained, their outputs read and released, then the resets: nothing in flight was lost.
    The same resets without the drain abort them."""
    session = run.session()
    device = session.device
    device.enable_parallel_mode(4)
    prompts = {seq_id: drained_prompt(session.calbin, seq_id) for seq_id in DRAINED}
    # A KV manager per request, so a package of one lane has three in flight.
    kvs = {seq_id: device.create_kv_manager(session.calbin) for seq_id in prompts}
    buffers = {s: _submit_prefill(session, s, tokens, kvs[s]) for s, tokens in prompts.items()}
    in_flight = run.observe("drain_then_reset.in_flight", device.in_flight())
    drained = run.observe(
        "drain_then_reset.code", device.drain(sum(_timeout_of(session, len(t)) for t in prompts.values()))
    )
    outputs = {seq_id: buffer.wait(0.0) for seq_id, buffer in buffers.items()}
    run.observe("drain_then_reset.output_codes", list(outputs.values()))
    for seq_id, kv in kvs.items():
        kv.apply(seq_id)
        kv.free(seq_id)
    device.reset_core(session.handle.chiplets[0], 0)
    device.clear_dynamic_memory()
    memory_back = run.observe("drain_then_reset.dynamic_bytes", _dynamic_bytes(session)) == 0
    kept = [s for s, buffer in buffers.items() if buffer.status == BufferStatus.DONE]
    run.observe("drain_then_reset.kept", kept)
    same = len(kept) == len(prompts)
    if same:
        drained_rows = run.observe(
            "drain_then_reset.drained", np.stack([buffers[s].logits[s] for s in kept]).view(np.uint16)
        )
        alone = run.observe(
            "drain_then_reset.alone", np.stack([_alone(session, s, prompts[s]) for s in kept]).view(np.uint16)
        )
        same = np.array_equal(drained_rows, alone)
    run.check(
        "drain_then_reset",
        in_flight == 3
        and drained == ErrorCode.SUCCESS
        and all(code == ErrorCode.SUCCESS for code in outputs.values())
        and memory_back
        and same,
        f"{in_flight} jobs in flight drained ({drained.name}): they end {sorted({c.name for c in outputs.values()})}; "
        f"after the reset {len(kept)} of their outputs kept, "
        f"{'each the bits it gives run alone' if same else 'not all of them the bits each gives run alone'}",
    )
    undrained = _submit_prefill(session, 1, prompts[1])
    device.reset_core(session.handle.chiplets[0], 0)
    lost = run.observe("reset_without_drain_loses_the_job.code", undrained.wait(1.0))
    session.kv.free(1)
    run.check(
        "reset_without_drain_loses_the_job",
        lost == ErrorCode.JOB_ABORTED,
        f"the same reset with a job in flight: {lost.name}",
    )
    run.metrics["drained"] = in_flight


def _alone(session: Session, seq_id: int, tokens: list[int]) -> np.ndarray:
    """The prefill's logits with nothing else in flight: what the drained job must have given."""
    buffer = _submit_prefill(session, seq_id, tokens)
    buffer.wait(_timeout_of(session, len(tokens)))
    session.kv.free(seq_id)
    return buffer.logits[seq_id]


def _drain_failure(run: ProbeRun) -> None:
    """A hung job: the drain times out naming it; the reset then aborts only that job, the device serves again."""
    session = run.session()
    device = session.device
    device.inject(Fault(FaultKind.TIMEOUT, at_step=0))
    hung = _submit_prefill(session, 1, prompt_of(session, 4))
    device.disarm_faults()
    drained = run.observe("drain_times_out_on_a_hung_job.code", device.drain(_timeout_of(session, 4)))
    left = run.observe("drain_times_out_on_a_hung_job.in_flight", device.in_flight())
    device.reset_core(session.handle.chiplets[0], 0)
    aborted = run.observe("drain_times_out_on_a_hung_job.aborted", hung.wait(0.0))
    session.kv.free(1)
    status = run.observe("drain_times_out_on_a_hung_job.status", device.status.value)
    served = run.observe("drain_times_out_on_a_hung_job.served_code", _golden_request(session).code)
    run.check(
        "drain_times_out_on_a_hung_job",
        drained == ErrorCode.TIMEOUT
        and left == 1
        and aborted == ErrorCode.JOB_ABORTED
        and status == DeviceStatus.READY
        and served == ErrorCode.SUCCESS,
        f"the drain gives {drained.name} with {left} job left; the reset aborts it ({aborted.name}), then it serves",
    )
    generic.inject_faults(run, session)


RESET_DRAIN = ProbeSpec(
    "reset_drain",
    "A reset after a drain (V51): the jobs in flight drained, their outputs read and released, then ResetCCU and "
    "ClearDynamicMem lose nothing; the same reset with a job in flight aborts it; a hung job makes the drain time "
    "out, and the reset then takes only it.",
    generic.plans(
        runner=StagePlan("jobs drained, read and released, then reset: none lost; undrained: aborted", _drain_runner),
        failure=StagePlan("a hung job: the drain times out, the reset aborts only it; each fault kind", _drain_failure),
    ),
    capabilities=("device-reset",),
    metrics=(MetricSpec("drained", "jobs in flight when the drain began"),),
)

LIFECYCLE = [JOB_CANCEL, RESET_DRAIN]
