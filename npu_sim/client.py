"""A minimal caller of the virtual device: one request at a time, and the documented recovery paths."""

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from npu_sim.device import DeviceStatus, OutputBuffer, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, SubModel
from npu_sim.sampling import SamplingParams

# A wait gives a call this many times its modelled duration before calling it a time-out, counted from
# when the call starts running: a job queued behind others' (parallel mode, two models) is not timed out
# for waiting its turn.
TIMEOUT_FACTOR = 5.0


def greedy(logits: np.ndarray) -> int:
    """The argmax of BF16 logits, first index on ties (as the goldens are made)."""
    return int(np.argmax(np.asarray(logits).astype(np.float32)))


@dataclass
class RequestResult:
    code: ErrorCode
    message: str = ""
    prefill_logits: np.ndarray | None = None
    decode_logits: list[np.ndarray] = field(default_factory=list)
    decode_inputs: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)  # device sampling: the token after the prefill and each step

    @property
    def ok(self) -> bool:
        return self.code == ErrorCode.SUCCESS

    def logits_rows(self) -> np.ndarray:
        """The prefill's logits, then each decode step's: [1 + steps, vocab] BF16."""
        if self.prefill_logits is None:
            raise ValueError("the request produced no logits")
        return np.stack([self.prefill_logits, *self.decode_logits])


def run_request(
    device: VirtualDevice,
    calbin: Calbin,
    kv: KvManager,
    seq_id: int,
    prompt: list[int],
    steps: int,
    forced: list[int] | None = None,
    sampling: SamplingParams | None = None,
) -> RequestResult:
    """Prefill `prompt`, then `steps` decode steps fed greedily, or with `forced` tokens when given.

    With `sampling`, the device samples each next token (V17) and returns token ids, not logits.
    Stops at the first error and reports its code instead of raising. The sequence's KV is freed at
    the end either way.
    """
    result = RequestResult(ErrorCode.SUCCESS)
    prefill, decode = calbin.model_of_type("llm_prefill"), calbin.model_of_type("llm_decode")
    try:
        timing = device.handle_of(calbin).timing
        start = kv.allocate(seq_id, len(prompt))
        timeout = TIMEOUT_FACTOR * timing.prefill_call(len(prompt), start).total_ms
        buffer = run_call(device, kv, prefill, {seq_id: prompt}, timeout, sampling)
        token = _take(result, buffer, seq_id, sampling, prefill=True)
        for step in range(steps):
            token = forced[step] if forced is not None else token
            context = kv.allocate(seq_id, 1) + 1
            timeout = TIMEOUT_FACTOR * timing.decode_call([context]).total_ms
            result.decode_inputs.append(token)
            buffer = run_call(device, kv, decode, {seq_id: [token]}, timeout, sampling)
            token = _take(result, buffer, seq_id, sampling, prefill=False)
    except CalrtError as error:
        result.code, result.message = error.code, error.message
    finally:
        if seq_id in kv.sequences():
            kv.free(seq_id)
    return result


def _take(
    result: RequestResult, buffer: OutputBuffer, seq_id: int, sampling: SamplingParams | None, prefill: bool
) -> int:
    """Record the call's output; return the next token (sampled on the device, or greedy)."""
    if sampling is not None:
        result.sampled.append(buffer.token_ids[seq_id])
        return result.sampled[-1]
    logits = buffer.logits[seq_id]
    if prefill:
        result.prefill_logits = logits
    else:
        result.decode_logits.append(logits)
    return greedy(logits)


def run_call(
    device: VirtualDevice,
    kv: KvManager,
    submodel: SubModel,
    tokens: dict[int, list[int]],
    timeout_ms: float,
    sampling: SamplingParams | Mapping[int, SamplingParams] | None = None,
) -> OutputBuffer:
    """Infer, wait, and commit every sequence's KV; any failure is raised as its code."""
    buffer = device.infer(submodel, kv, tokens, sampling)
    queued_ms = max(0.0, buffer.record.start_ms - device.clock_ms)
    code = buffer.wait(queued_ms + timeout_ms)
    if code != ErrorCode.SUCCESS:
        raise CalrtError(code, f"wait on {submodel.name} returned {code.name}")
    for seq_id in tokens:
        kv.apply(seq_id)
    return buffer


def recover(device: VirtualDevice, calbin: Calbin, code: ErrorCode) -> list[str]:
    """Bring service back after a failed request, using the smallest reset that clears the failure.

    The failed request's sequences are already freed (run_request does it); it is run again from
    its prompt.
    """
    if device.status == DeviceStatus.CRASHED:
        device.reset_device()
        device.configure(calbin)
        return ["reset device", "configure calbin"]
    if device.status == DeviceStatus.FAULT and device.faulted_core is not None:
        chiplet, core = device.faulted_core
        device.reset_core(chiplet, core)
        return [f"reset core {chiplet}.{core}"]
    if code == ErrorCode.TIMEOUT:
        # Resetting a core of the model's first chiplet aborts the job that outlived its wait.
        chiplet = device.handle_of(calbin).chiplets[0]
        device.reset_core(chiplet, 0)
        return [f"reset core {chiplet}.0"]
    if code == ErrorCode.OUT_OF_MEMORY:
        device.clear_dynamic_memory()
        return ["clear dynamic memory"]
    return []
