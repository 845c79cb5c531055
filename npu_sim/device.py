"""The virtual device: the CalRT 0.7.6 surface the seed describes, on a modelled clock.

One physical device (I09) with two chiplets of two cores (M06). A calbin is created from a package
(compatibility checked against the device), configured (its DRAM reserved on every chiplet), and its
sub-models looked up by exact name (not by substring, R07). `infer` is asynchronous: it returns an
output buffer whose status moves pending -> running -> done (or core exception) as the device clock
passes the job's modelled start and end; `wait` advances the clock by at most its time-out.

Jobs run one after another in submission order; the numerics are computed at submission, the clock
only decides when a caller may see them. Every failure is an error code (a raised CalrtError or a
code returned by wait), never a spin (R05) or an abort (R06).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import numpy as np

from npu_sim.chips import CALCULET_2C
from npu_sim.dtypes import bf16_to_bits, bits_to_bf16, to_bf16
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, SubModel, load_calbin
from npu_sim.timing import CallTime, TimingModel

CALRT_VERSION = "0.7.6"
# The seed records no driver or firmware version; these are the simulator's defaults.
DRIVER_VERSION = "2.3.0"
FIRMWARE_VERSION = "1.8.0"
MAX_IN_FLIGHT = 16


class DeviceStatus(StrEnum):
    READY = "ready"
    FAULT = "fault"  # a core exception is waiting for its core to be reset
    CRASHED = "crashed"  # only a device reset helps


class BufferStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CORE_EXCEPTION = "core_exception"


@dataclass
class Chiplet:
    index: int
    cores: int
    dram_bytes: int
    reserved_bytes: int = 0  # the configured calbin's static reservation
    dynamic_bytes: int = 0  # output buffers and anything else allocated per call

    @property
    def free_bytes(self) -> int:
        return self.dram_bytes - self.reserved_bytes - self.dynamic_bytes


@dataclass(frozen=True)
class CallRecord:
    call: int
    submodel: str
    lanes: int
    tokens: int
    queue_depth: int  # jobs already in flight when this one was submitted
    time: CallTime
    h2d_bytes: int
    d2h_bytes: int
    d2d_bytes: int


@dataclass
class _Job:
    start_ms: float
    end_ms: float  # math.inf for a job that hangs
    outcome: ErrorCode  # what the job ends with: SUCCESS or CORE_EXCEPTION
    buffer_bytes: int
    memory_epoch: int  # clearing dynamic memory starts a new epoch; older buffers are gone already
    logits: dict[int, np.ndarray] = field(default_factory=dict)
    aborted: bool = False
    finished: bool = False  # its end has been processed
    released: bool = False  # its output buffer's device memory has been given back
    fault_core: tuple[int, int] = (0, 0)


class OutputBuffer:
    """The result of one infer call (I07): status, wait with time-out, and the logits when done."""

    def __init__(self, device: "VirtualDevice", job: _Job, record: CallRecord) -> None:
        self._device = device
        self._job = job
        self.record = record

    @property
    def status(self) -> BufferStatus:
        job, now = self._job, self._device.clock_ms
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
        job, device = self._job, self._device
        if not job.aborted:
            device.advance(min(job.end_ms, device.clock_ms + timeout_ms) - device.clock_ms)
        if job.aborted:
            return ErrorCode.JOB_ABORTED
        if device.clock_ms < job.end_ms:
            return ErrorCode.TIMEOUT
        device.release(job)
        return job.outcome

    @property
    def logits(self) -> dict[int, np.ndarray]:
        """BF16 logits [vocab] per sequence id, once the buffer is done."""
        if self.status != BufferStatus.DONE:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"the output is {self.status}, not done")
        return self._job.logits


class VirtualDevice:
    def __init__(
        self,
        *,
        calrt_version: str = CALRT_VERSION,
        driver_version: str = DRIVER_VERSION,
        firmware_version: str = FIRMWARE_VERSION,
        chip: str = CALCULET_2C.name,
        physical_devices: int = 1,
        dram_bytes_per_chiplet: int = CALCULET_2C.dram_bytes_per_chiplet,
        timing: TimingModel | None = None,
        faults: Sequence[Fault] = (),
    ) -> None:
        if physical_devices != 1:
            raise CalrtError(
                ErrorCode.MULTI_DEVICE_UNSUPPORTED,
                f"{physical_devices} physical devices asked for; CalRT 0.7.6 drives one",
            )
        # The topology is always calculet-2c's; `chip` is the name the device reports to calbins.
        self.calrt_version = calrt_version
        self.driver_version = driver_version
        self.firmware_version = firmware_version
        self.chip = chip
        self.chiplets = [
            Chiplet(i, CALCULET_2C.cores_per_chiplet, dram_bytes_per_chiplet) for i in range(CALCULET_2C.chiplets)
        ]
        self.timing = timing or TimingModel()
        self.clock_ms = 0.0
        self.max_in_flight = 1
        self.configured: Calbin | None = None
        self.call_log: list[CallRecord] = []
        self._status = DeviceStatus.READY
        self._faulted_core: tuple[int, int] | None = None
        self._jobs: list[_Job] = []  # unfinished jobs, in submission order
        self._busy_until_ms = 0.0
        self._memory_epoch = 0
        self._calls = 0
        self._armed: list[tuple[int, Fault]] = []
        self._kv_managers: list[KvManager] = []
        self._max_queue_depth = 0
        for fault in faults:
            self.inject(fault)

    # Identity and status

    def version(self) -> str:
        return self.calrt_version

    def target(self) -> dict[str, str]:
        """What compatibility is checked against."""
        return {
            "calrt": self.calrt_version,
            "driver": self.driver_version,
            "firmware": self.firmware_version,
            "chip": self.chip,
        }

    @property
    def status(self) -> DeviceStatus:
        return self._status

    @property
    def faulted_core(self) -> tuple[int, int] | None:
        """The (chiplet, core) whose exception is waiting for a reset."""
        return self._faulted_core

    def in_flight(self) -> int:
        return sum(1 for job in self._jobs if not job.aborted and job.end_ms > self.clock_ms)

    def counters(self) -> dict[str, float | int]:
        """Queue depth and H2D / infer / D2H totals (I12); per-call figures are in call_log."""
        log = self.call_log
        return {
            "calls": len(log),
            "queue_depth": self.in_flight(),
            "max_queue_depth": self._max_queue_depth,
            "h2d_ms": sum(r.time.h2d_ms for r in log),
            "infer_ms": sum(r.time.infer_ms for r in log),
            "d2h_ms": sum(r.time.d2h_ms for r in log),
            "h2d_bytes": sum(r.h2d_bytes for r in log),
            "d2h_bytes": sum(r.d2h_bytes for r in log),
            "d2d_bytes": sum(r.d2d_bytes for r in log),
            "clock_ms": self.clock_ms,
        }

    # Loading and configuring

    def create_calbin(self, path: str | Path) -> Calbin:
        """Validate a package, check it against this device, and load it on the host (R03)."""
        return load_calbin(path, self.target())

    def configure(self, calbin: Calbin) -> None:
        """Reserve the calbin's DRAM on every chiplet it uses and make it the resident calbin."""
        self._check_not_crashed()
        if self.configured is not None:
            raise CalrtError(ErrorCode.ALREADY_CONFIGURED, f"{self.configured.manifest['name']} is configured")
        used = self.chiplets[: calbin.chiplets]
        for chiplet in used:
            if chiplet.free_bytes < calbin.dram_per_chiplet:
                raise CalrtError(
                    ErrorCode.OUT_OF_MEMORY,
                    f"chiplet {chiplet.index} has {chiplet.free_bytes} B free; "
                    f"the calbin needs {calbin.dram_per_chiplet} B",
                )
        for chiplet in used:
            chiplet.reserved_bytes = calbin.dram_per_chiplet
        self.configured = calbin

    def create_kv_manager(self, calbin: Calbin) -> KvManager:
        """A KV manager sized by the calbin: its decode batch in lanes, max_seq_len tokens each."""
        kv = KvManager(calbin.config, calbin.decode_lanes, calbin.v_dtype)
        self._kv_managers.append(kv)
        return kv

    def enable_parallel_mode(self, max_in_flight: int) -> None:
        """Allow up to `max_in_flight` submitted jobs that have not finished (I08, V20)."""
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"max_in_flight must be 1..{MAX_IN_FLIGHT}")
        self.max_in_flight = max_in_flight

    # Inference

    def infer(self, submodel: SubModel, kv: KvManager, tokens: Mapping[int, Sequence[int]]) -> OutputBuffer:
        """Submit one job: token ids per sequence id. Each sequence must have exactly these tokens allocated."""
        self._check_ready()
        calbin = self.configured
        if calbin is None or submodel not in calbin.submodels:
            raise CalrtError(ErrorCode.NOT_CONFIGURED, f"sub-model {submodel.name!r} is not configured on the device")
        if kv.config != calbin.config:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "the KV manager belongs to another calbin")
        seq_ids, arrays = self._check_inputs(calbin, submodel, kv, tokens)
        queue_depth = self.in_flight()
        if queue_depth >= self.max_in_flight:
            raise CalrtError(ErrorCode.QUEUE_FULL, f"{queue_depth} jobs in flight, the limit is {self.max_in_flight}")

        call, firing = self._calls, self._firing(self._calls)
        self._calls += 1
        if FaultKind.BUSY in firing:
            raise CalrtError(ErrorCode.BUSY, "the device is busy")
        if FaultKind.DEVICE_CRASH in firing:
            self._crash()
            raise CalrtError(ErrorCode.DEVICE_CRASHED, "the device stopped responding")
        if FaultKind.MEMORY_EXHAUSTION in firing:
            # Something else took all dynamic memory; it stays taken until cleared.
            self.chiplets[0].dynamic_bytes += self.chiplets[0].free_bytes
        buffer_bytes = len(seq_ids) * calbin.config.vocab * 2
        if self.chiplets[0].free_bytes < buffer_bytes:
            raise CalrtError(ErrorCode.OUT_OF_MEMORY, f"no room for a {buffer_bytes} B output buffer")
        self.chiplets[0].dynamic_bytes += buffer_bytes

        lanes, positions = kv.lanes_positions(seq_ids)
        if submodel.smodel_type == "llm_prefill":
            time = self.timing.prefill_call(len(arrays[0]), int(positions[0]))
            token_count = len(arrays[0])
        else:
            time = self.timing.decode_call([int(p) + 1 for p in positions])
            token_count = len(seq_ids)
        if FaultKind.SLOW_DEVICE in firing:
            time = time.scaled(firing[FaultKind.SLOW_DEVICE].slow_factor)
        start = max(self.clock_ms, self._busy_until_ms)
        hangs = FaultKind.TIMEOUT in firing
        job = _Job(
            start_ms=start,
            end_ms=math.inf if hangs else start + time.total_ms,
            outcome=ErrorCode.CORE_EXCEPTION if FaultKind.CORE_EXCEPTION in firing else ErrorCode.SUCCESS,
            buffer_bytes=buffer_bytes,
            memory_epoch=self._memory_epoch,
        )
        if FaultKind.CORE_EXCEPTION in firing:
            job.fault_core = (firing[FaultKind.CORE_EXCEPTION].chiplet, firing[FaultKind.CORE_EXCEPTION].core)
        d2d_before = calbin.executor.d2d_bytes
        if job.outcome == ErrorCode.SUCCESS and not hangs:
            job.logits = self._run(calbin, submodel, kv, seq_ids, arrays, lanes, positions)
            if FaultKind.CORRUPTED_OUTPUT in firing:
                self._corrupt(job.logits, firing[FaultKind.CORRUPTED_OUTPUT].flipped_bits, call)
            if FaultKind.KV_APPLY_FAILURE in firing:
                kv.fail_next_apply(seq_ids)
        record = CallRecord(
            call=call,
            submodel=submodel.name,
            lanes=len(seq_ids),
            tokens=token_count,
            queue_depth=queue_depth,
            time=time,
            h2d_bytes=token_count * 4,
            d2h_bytes=buffer_bytes,
            d2d_bytes=calbin.executor.d2d_bytes - d2d_before,
        )
        self.call_log.append(record)
        self._max_queue_depth = max(self._max_queue_depth, queue_depth + 1)
        self._jobs.append(job)
        self._busy_until_ms = job.end_ms
        return OutputBuffer(self, job, record)

    def _check_inputs(
        self, calbin: Calbin, submodel: SubModel, kv: KvManager, tokens: Mapping[int, Sequence[int]]
    ) -> tuple[list[int], list[np.ndarray]]:
        seq_ids = list(tokens)
        arrays = [np.asarray(tokens[s]) for s in seq_ids]
        for array in arrays:
            if array.ndim != 1 or len(array) == 0:
                raise CalrtError(ErrorCode.SHAPE_MISMATCH, "each sequence needs a 1-D list of token ids")
            if array.dtype.kind not in "iu":
                raise CalrtError(ErrorCode.DTYPE_MISMATCH, f"token ids must be integers, not {array.dtype}")
            if array.min() < 0 or array.max() >= calbin.config.vocab:
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"token ids must be in 0..{calbin.config.vocab - 1}")
        if submodel.smodel_type == "llm_prefill":
            if len(seq_ids) != submodel.batch:
                raise CalrtError(ErrorCode.SHAPE_MISMATCH, f"prefill takes {submodel.batch} sequence per call")
            if len(arrays[0]) > submodel.tokens_per_lane:
                raise CalrtError(ErrorCode.SHAPE_MISMATCH, f"prefill takes at most {submodel.tokens_per_lane} tokens")
        else:
            if not 1 <= len(seq_ids) <= submodel.batch:
                raise CalrtError(ErrorCode.SHAPE_MISMATCH, f"decode takes 1..{submodel.batch} sequences")
            if any(len(a) != 1 for a in arrays):
                raise CalrtError(ErrorCode.SHAPE_MISMATCH, "decode takes one token per sequence")
        for seq_id, array in zip(seq_ids, arrays, strict=True):
            if kv.pending(seq_id) != len(array):
                raise CalrtError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"sequence {seq_id} has {kv.pending(seq_id)} tokens allocated, the job has {len(array)}",
                )
        return seq_ids, arrays

    def _run(
        self,
        calbin: Calbin,
        submodel: SubModel,
        kv: KvManager,
        seq_ids: list[int],
        arrays: list[np.ndarray],
        lanes: np.ndarray,
        positions: np.ndarray,
    ) -> dict[int, np.ndarray]:
        model = calbin.executor
        if submodel.smodel_type == "llm_prefill":
            logits = model.prefill(kv.cache, int(lanes[0]), arrays[0], int(positions[0]))
            return {seq_ids[0]: to_bf16(logits)}
        rows = to_bf16(model.decode(kv.cache, lanes, np.concatenate(arrays), positions))
        return {seq_id: rows[i] for i, seq_id in enumerate(seq_ids)}

    def _corrupt(self, logits: dict[int, np.ndarray], flips: int, call: int) -> None:
        """Flip the top exponent bit of some logits: values jump by orders of magnitude or become inf/NaN."""
        rng = np.random.default_rng(call)
        for seq_id, row in logits.items():
            bits = bf16_to_bits(row).copy()
            where = rng.choice(len(bits), size=min(flips, len(bits)), replace=False)
            bits[where] ^= np.uint16(1 << 14)
            logits[seq_id] = bits_to_bf16(bits)

    # Faults

    def inject(self, fault: Fault) -> None:
        """Arm a fault; its at_step counts this device's infer calls from now on."""
        if not (0 <= fault.chiplet < len(self.chiplets) and 0 <= fault.core < CALCULET_2C.cores_per_chiplet):
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"no core {fault.chiplet}.{fault.core}")
        self._armed.append((self._calls, fault))

    def _firing(self, call: int) -> dict[FaultKind, Fault]:
        """The faults that fire on this call, by kind (the first armed wins)."""
        firing: dict[FaultKind, Fault] = {}
        for armed_at, fault in self._armed:
            if armed_at + fault.at_step <= call < armed_at + fault.at_step + fault.count:
                firing.setdefault(fault.kind, fault)
        return firing

    def disarm_faults(self) -> None:
        self._armed.clear()

    # The clock

    def advance(self, ms: float) -> None:
        """Let device time pass, finishing every job whose end it reaches."""
        self.clock_ms += max(ms, 0.0)
        for job in self._jobs:
            if job.finished or job.aborted or job.end_ms > self.clock_ms:
                continue
            job.finished = True
            if job.outcome == ErrorCode.CORE_EXCEPTION:
                self._status = DeviceStatus.FAULT
                self._faulted_core = job.fault_core
                self._abort_unfinished()
        self._jobs = [job for job in self._jobs if not (job.finished or job.aborted)]

    def release(self, job: _Job) -> None:
        """Give back an output buffer's device memory (wait does this once it sees the job end)."""
        if not job.released and job.memory_epoch == self._memory_epoch:
            self.chiplets[0].dynamic_bytes -= job.buffer_bytes
        job.released = True

    def _abort_unfinished(self) -> None:
        """Abort jobs that have not ended; their output buffers are freed with them."""
        for job in self._jobs:
            if not job.finished:
                job.aborted = True
                self.release(job)
        self._jobs = []
        self._busy_until_ms = self.clock_ms

    def _crash(self) -> None:
        self._status = DeviceStatus.CRASHED
        self._abort_unfinished()

    def _check_not_crashed(self) -> None:
        if self._status == DeviceStatus.CRASHED:
            raise CalrtError(ErrorCode.DEVICE_CRASHED, "the device must be reset")

    def _check_ready(self) -> None:
        self._check_not_crashed()
        if self._status == DeviceStatus.FAULT:
            chiplet, core = self._faulted_core or (0, 0)
            raise CalrtError(ErrorCode.DEVICE_NEEDS_RESET, f"core {chiplet}.{core} raised an exception; reset it")

    # Recovery scopes, smallest first (V50)

    def reset_core(self, chiplet: int, core: int) -> None:
        """Abort every unfinished job (a job spans all cores) and clear this core's exception."""
        self._check_not_crashed()
        if not (0 <= chiplet < len(self.chiplets) and 0 <= core < CALCULET_2C.cores_per_chiplet):
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"no core {chiplet}.{core}")
        self._abort_unfinished()
        if self._faulted_core == (chiplet, core):
            self._faulted_core = None
            self._status = DeviceStatus.READY

    def clear_dynamic_memory(self) -> None:
        """Free all per-call device memory; unfinished jobs are aborted since their buffers go too."""
        self._check_not_crashed()
        self._abort_unfinished()
        self._memory_epoch += 1
        self.chiplets[0].dynamic_bytes = 0

    def reset_configuration(self) -> None:
        """Drop the resident calbin and its reservation; KV managers are emptied. Configure again after."""
        self._check_not_crashed()
        self._abort_unfinished()
        self.configured = None
        for chiplet in self.chiplets:
            chiplet.reserved_bytes = 0
        for kv in self._kv_managers:
            kv.clear()

    def reset_device(self) -> None:
        """Everything back to power-on, except armed faults and the clock."""
        self._abort_unfinished()
        self._memory_epoch += 1
        self.configured = None
        for chiplet in self.chiplets:
            chiplet.reserved_bytes = 0
            chiplet.dynamic_bytes = 0
        for kv in self._kv_managers:
            kv.clear()
        self._status = DeviceStatus.READY
        self._faulted_core = None
