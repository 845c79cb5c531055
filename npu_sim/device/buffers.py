"""Output buffers (I07): the state of one submitted job, and wait with a time-out. A runtime that offers a
job cancel (V23) adds one state, cancelled."""

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from npu_sim.errors import CalrtError, ErrorCode

if TYPE_CHECKING:
    from npu_sim.device.records import CallRecord
    from npu_sim.device.virtual_device import VirtualDevice
    from npu_sim.kv import KvManager


class BufferStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CORE_EXCEPTION = "core_exception"
    CANCELLED = "cancelled"


@dataclass
class Job:
    model: int  # the model handle's id
    chiplets: tuple[int, ...]
    queue: int
    start_ms: float
    end_ms: float  # math.inf for a job that hangs
    outcome: ErrorCode  # what the job ends with: SUCCESS or CORE_EXCEPTION
    buffer_bytes: int  # dynamic device memory its output buffer holds (0 for a fixed task's own buffer)
    buffer_chiplet: int
    memory_epoch: int  # clearing dynamic memory starts a new epoch; older buffers are gone already
    logits: dict[int, np.ndarray] = field(default_factory=dict)
    token_ids: dict[int, int] | None = None  # device sampling: what comes back instead of the logits
    aborted: bool = False
    finished: bool = False  # its end has been processed
    released: bool = False  # its output buffer's device memory has been given back
    fault_core: tuple[int, int] = (0, 0)
    submitted_ms: float = 0.0
    kv_cells: tuple[tuple[int, int], ...] = ()  # (sequence, cells) of the allocated KV cells the job writes
    kv: "KvManager | None" = None
    cancelled: bool = False

    @property
    def hangs(self) -> bool:
        return math.isinf(self.end_ms)


class OutputBuffer:
    """The result of one infer call: status, wait with time-out, then the logits or the sampled token ids."""

    def __init__(self, device: "VirtualDevice", job: Job, record: "CallRecord") -> None:
        self._device = device
        self._job = job
        self.record = record

    @property
    def status(self) -> BufferStatus:
        with self._device.lock:
            job, now = self._job, self._device.clock_ms
            if job.cancelled:
                return BufferStatus.CANCELLED
            if job.aborted:
                return BufferStatus.CORE_EXCEPTION
            if now < job.start_ms:
                return BufferStatus.PENDING
            if now < job.end_ms:
                return BufferStatus.RUNNING
            return BufferStatus.DONE if job.outcome == ErrorCode.SUCCESS else BufferStatus.CORE_EXCEPTION

    def wait(self, timeout_ms: float) -> ErrorCode:
        """Let up to `timeout_ms` of device time pass; return SUCCESS, TIMEOUT or the job's error."""
        if timeout_ms < 0:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "timeout must not be negative")
        device, job = self._device, self._job
        with device.lock:
            if not job.aborted:
                device.advance(min(job.end_ms, device.clock_ms + timeout_ms) - device.clock_ms)
            if job.aborted:
                return ErrorCode.JOB_ABORTED
            if device.clock_ms < job.end_ms:
                return ErrorCode.TIMEOUT
            device.release(job)
            return job.outcome

    @property
    def job(self) -> Job:
        return self._job

    def _done(self) -> Job:
        if self.status != BufferStatus.DONE:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"the output is {self.status}, not done")
        return self._job

    @property
    def logits(self) -> dict[int, np.ndarray]:
        """BF16 logits [vocab] per sequence id, once the buffer is done."""
        job = self._done()
        if job.token_ids is not None:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "the call sampled on the device: only token ids came back")
        return job.logits

    @property
    def token_ids(self) -> dict[int, int]:
        """The token the device sampled per sequence id, once the buffer is done."""
        job = self._done()
        if job.token_ids is None:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "the call did not sample on the device")
        return job.token_ids
