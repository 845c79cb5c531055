"""A minimal caller of the virtual device: one request at a time, and the documented recovery paths."""

from dataclasses import dataclass, field

import numpy as np

from npu_sim.device import DeviceStatus, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, SubModel

# A wait gives a call this many times its modelled duration before calling it a time-out.
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
) -> RequestResult:
    """Prefill `prompt`, then `steps` decode steps fed greedily, or with `forced` tokens when given.

    Stops at the first error and reports its code instead of raising. The sequence's KV is freed
    at the end either way.
    """
    result = RequestResult(ErrorCode.SUCCESS)
    prefill, decode = calbin.model_of_type("llm_prefill"), calbin.model_of_type("llm_decode")
    try:
        start = kv.allocate(seq_id, len(prompt))
        timeout = TIMEOUT_FACTOR * device.timing.prefill_call(len(prompt), start).total_ms
        logits = run_call(device, kv, prefill, {seq_id: prompt}, timeout)[seq_id]
        result.prefill_logits = logits
        for step in range(steps):
            token = forced[step] if forced is not None else greedy(logits)
            context = kv.allocate(seq_id, 1) + 1
            timeout = TIMEOUT_FACTOR * device.timing.decode_call([context]).total_ms
            result.decode_inputs.append(token)
            logits = run_call(device, kv, decode, {seq_id: [token]}, timeout)[seq_id]
            result.decode_logits.append(logits)
    except CalrtError as error:
        result.code, result.message = error.code, error.message
    finally:
        if seq_id in kv.sequences():
            kv.free(seq_id)
    return result


def run_call(
    device: VirtualDevice, kv: KvManager, submodel: SubModel, tokens: dict[int, list[int]], timeout_ms: float
) -> dict[int, np.ndarray]:
    """Infer, wait, and commit every sequence's KV; any failure is raised as its code."""
    buffer = device.infer(submodel, kv, tokens)
    code = buffer.wait(timeout_ms)
    if code != ErrorCode.SUCCESS:
        raise CalrtError(code, f"wait on {submodel.name} returned {code.name}")
    for seq_id in tokens:
        kv.apply(seq_id)
    return buffer.logits


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
        # Any core reset aborts the job that outlived its wait.
        device.reset_core(0, 0)
        return ["reset core 0.0"]
    if code == ErrorCode.OUT_OF_MEMORY:
        device.clear_dynamic_memory()
        return ["clear dynamic memory"]
    return []
