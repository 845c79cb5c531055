"""The virtual device: the CalRT surface the seed describes, on a modelled clock.

One physical device (I09) with two chiplets of two cores (M06); a runtime whose CalRT declares
`multi_board` may span two. A package is created (compatibility checked against the device), configured
(its DRAM and SRAM reserved on the chiplets its layout uses) and its sub-models looked up by exact name
(not by substring, R07). Packages that declare `multi_model` may be configured side by side, each with
its own reservation, queue, KV managers and fault state (V31); packages that declare `residency` may be
loaded and unloaded while the others serve (V35).

`infer` is asynchronous: it returns an output buffer whose status moves pending -> running -> done (or
core exception) as the device clock passes the job's modelled start and end; `wait` advances the clock
by at most its time-out. A job starts when the chiplets its model uses are free; jobs of one model run
in submission order. The numerics are computed at submission. Every failure is an error code (a raised
CalrtError or a code returned by wait), never a spin (R05) or an abort (R06). All calls take the
device's lock, so several threads may submit jobs at once (parallel mode, V20).
"""

import dataclasses
import math
import threading
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from npu_sim.calbin import Finding
from npu_sim.chips import CALCULET_2C
from npu_sim.device.buffers import Job, OutputBuffer
from npu_sim.device.calls import (
    Sampling,
    call_time,
    check_inputs,
    corrupt,
    placement_of,
    run_numerics,
    sample,
    sampling_params,
)
from npu_sim.device.fixed_task import FixedTask
from npu_sim.device.identity import (
    CALRT_VERSION,
    DEFAULT_SERIAL,
    DRIVER_VERSION,
    FIRMWARE_VERSION,
    DeviceIdentity,
    identity_report,
)
from npu_sim.device.models import Chiplet, ModelHandle, reserve, unreserve
from npu_sim.device.records import CallRecord, DeviceEvent, chrome_trace, counters
from npu_sim.dtypes import DTYPE_BYTES
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, SubModel, load_calbin

MAX_IN_FLIGHT = 16


class DeviceStatus(StrEnum):
    READY = "ready"
    FAULT = "fault"  # a core exception is waiting for its core to be reset
    CRASHED = "crashed"  # only a device reset helps


class VirtualDevice:
    def __init__(
        self,
        *,
        calrt_version: str = CALRT_VERSION,
        driver_version: str = DRIVER_VERSION,
        firmware_version: str = FIRMWARE_VERSION,
        chip: str = CALCULET_2C.name,
        serial: str = DEFAULT_SERIAL,
        calrt_features: Sequence[str] = (),
        physical_devices: int = 1,
        dram_bytes_per_chiplet: int = CALCULET_2C.dram_bytes_per_chiplet,
        board_link_gb_s: float = 25.0,
        board_link_latency_us: float = 10.0,
        faults: Sequence[Fault] = (),
    ) -> None:
        self.identity = DeviceIdentity(
            calrt_version, driver_version, firmware_version, chip, serial, tuple(calrt_features)
        )
        if physical_devices not in (1, 2):
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "a virtual device spans one or two physical devices")
        if physical_devices > 1 and "multi_board" not in self.identity.calrt_features:
            raise CalrtError(
                ErrorCode.MULTI_DEVICE_UNSUPPORTED,
                f"{physical_devices} physical devices asked for; CalRT {calrt_version} drives one (I09)",
            )
        # The topology is calculet-2c's per board; `chip` is the name the device reports to packages.
        self.boards = physical_devices
        self.chiplets = [
            Chiplet(i, CALCULET_2C.cores_per_chiplet, dram_bytes_per_chiplet, CALCULET_2C.sram_bytes_per_chiplet)
            for i in range(CALCULET_2C.chiplets * physical_devices)
        ]
        self.board_link_gb_s = board_link_gb_s
        self.board_link_latency_us = board_link_latency_us
        self.lock = threading.RLock()
        self.clock_ms = 0.0
        self.max_in_flight = 1
        self.models: dict[int, ModelHandle] = {}
        self.call_log: list[CallRecord] = []
        self.events: list[DeviceEvent] = []
        self.full_debug = False
        self.debug_dumps: dict[int, list[np.ndarray]] = {}
        self.memory_epoch = 0  # clearing dynamic memory starts a new epoch
        self._crashed = False
        self._jobs: list[Job] = []  # unfinished jobs, in submission order
        self._busy_until = [0.0] * len(self.chiplets)
        self._calls = 0
        self._next_model = 1
        self._armed: list[tuple[int, Fault]] = []
        self._kv_managers: list[KvManager] = []
        self._max_queue_depth = 0
        self._counters_from = 0  # call_log index the counters start at (reset_counters)
        for fault in faults:
            self.inject(fault)

    # Identity and status

    def version(self) -> str:
        return self.identity.calrt

    def target(self) -> dict[str, str]:
        """What compatibility is checked against: the versions this device reports."""
        return self.identity.versions()

    def report(self) -> dict[str, Any]:
        """Identity and versions as the device reports them (a result's `device`)."""
        return identity_report(self.identity, len(self.chiplets), self.boards)

    @staticmethod
    def dtype_bit_size(dtype: str) -> int:
        """Bits of one element of a dtype the runtime knows (I14)."""
        if dtype not in DTYPE_BYTES:
            raise CalrtError(ErrorCode.DTYPE_MISMATCH, f"unknown dtype {dtype!r}")
        return DTYPE_BYTES[dtype] * 8

    @property
    def configured(self) -> Calbin | None:
        """The first configured package (the only one unless several declare multi_model)."""
        return next(iter(self.models.values())).calbin if self.models else None

    @property
    def status(self) -> DeviceStatus:
        if self._crashed:
            return DeviceStatus.CRASHED
        return DeviceStatus.FAULT if any(h.fault for h in self.models.values()) else DeviceStatus.READY

    @property
    def faulted_core(self) -> tuple[int, int] | None:
        """The (chiplet, core) of the first model whose exception is waiting for a reset."""
        return next((h.fault for h in self.models.values() if h.fault), None)

    def in_flight(self, handle: ModelHandle | None = None) -> int:
        with self.lock:
            return sum(
                1
                for job in self._jobs
                if not job.aborted and job.end_ms > self.clock_ms and (handle is None or job.model == handle.id)
            )

    def counters(self) -> dict[str, Any]:
        """Queue depth, modelled H2D / infer / D2H / sampling / fallback totals, bytes, per chiplet (I12, V38).

        Totals count the calls since the device was made or since `reset_counters`; read under the lock,
        so a reading never sees half a call.
        """
        with self.lock:
            records = self.call_log[self._counters_from :]
            return counters(records, self.in_flight(), self._max_queue_depth, self.clock_ms)

    def reset_counters(self) -> None:
        """Start the counters from zero; the call log, the clock and the queue keep going."""
        with self.lock:
            self._counters_from = len(self.call_log)
            self._max_queue_depth = self.in_flight()

    def trace(self) -> dict[str, Any]:
        """Chrome trace-event JSON of every call and device event so far (V37)."""
        with self.lock:
            return chrome_trace(self.call_log, self.events, len(self.chiplets), self.report())

    def set_full_debug(self, on: bool) -> None:
        """Full debug (I14): every call also returns each layer's output, at the cost of their D2H."""
        with self.lock:
            self.full_debug = on

    # Loading and configuring

    def create_calbin(self, path: str | Path, findings: list[Finding] | None = None) -> Calbin:
        """Validate a package (unless `findings` are its validation, just made), check it against this device,
        and load it on the host (R03)."""
        return load_calbin(path, self.target(), findings)

    def configure(self, calbin: Calbin, quota_bytes: int | None = None) -> ModelHandle:
        """Reserve the package's memory on the chiplets its layout uses; return the model's handle."""
        with self.lock:
            return self._place(calbin, quota_bytes, load_ms=0.0, event="configure")

    def load(self, calbin: Calbin, quota_bytes: int | None = None) -> ModelHandle:
        """Make a package resident while the others keep serving (V35): its parameters cross PCIe, and its
        jobs start once that modelled load has ended."""
        with self.lock:
            if not calbin.declares("residency"):
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"{calbin.name} does not declare residency")
            timing = calbin.timing.model
            load_ms = timing.pcie_latency_us / 1e3 + calbin.param_bytes / (timing.pcie_gb_s * 1e6)
            return self._place(calbin, quota_bytes, load_ms, event="load")

    def _place(self, calbin: Calbin, quota_bytes: int | None, load_ms: float, event: str) -> ModelHandle:
        self._check_not_crashed()
        if any(h.calbin is calbin for h in self.models.values()):
            raise CalrtError(ErrorCode.ALREADY_CONFIGURED, f"{calbin.name} is configured already")
        if self.models and not (
            calbin.declares("multi_model") and all(h.calbin.declares("multi_model") for h in self.models.values())
        ):
            names = ", ".join(h.name for h in self.models.values())
            raise CalrtError(
                ErrorCode.ALREADY_CONFIGURED,
                f"{names} is configured; models side by side need packages declaring multi_model",
            )
        if max(calbin.chiplets) >= len(self.chiplets):
            raise CalrtError(
                ErrorCode.MULTI_DEVICE_UNSUPPORTED,
                f"{calbin.name} spans {calbin.boards} boards; this virtual device drives {self.boards} (I09)",
            )
        reserve(self.chiplets, calbin)
        timing = calbin.timing.model
        if calbin.layout == "multi_board":
            timing = dataclasses.replace(
                timing, board_link_gb_s=self.board_link_gb_s, board_link_latency_us=self.board_link_latency_us
            )
        handle = ModelHandle(
            self._next_model,
            calbin,
            calbin.new_executor(),
            timing,
            tuple(calbin.chiplets),
            quota_bytes,
            ready_ms=self.clock_ms + load_ms,
        )
        self._next_model += 1
        self.models[handle.id] = handle
        self.events.append(DeviceEvent(self.clock_ms, event, {"model": calbin.name, "load_ms": round(load_ms, 3)}))
        return handle

    def unload(self, handle: ModelHandle) -> None:
        """Give back a resident model's memory (V35); refused while its jobs are in flight."""
        with self.lock:
            if not handle.calbin.declares("residency"):
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"{handle.name} does not declare residency")
            if handle.id not in self.models:
                raise CalrtError(ErrorCode.NOT_CONFIGURED, f"{handle.name} is not resident")
            if self.in_flight(handle):
                raise CalrtError(ErrorCode.BUSY, f"{handle.name} has jobs in flight; wait for them first")
            self._drop(handle)
            self.events.append(DeviceEvent(self.clock_ms, "unload", {"model": handle.name}))

    def _drop(self, handle: ModelHandle) -> None:
        unreserve(self.chiplets, handle.calbin)
        for kv in self._kv_managers:
            if kv.owner is handle.calbin:
                kv.clear()
        handle.resident = False
        del self.models[handle.id]

    def handle_of(self, calbin: Calbin) -> ModelHandle:
        for handle in self.models.values():
            if handle.calbin is calbin:
                return handle
        raise CalrtError(ErrorCode.NOT_CONFIGURED, f"{calbin.name} is not configured on the device")

    def create_kv_manager(self, calbin: Calbin) -> KvManager:
        """A KV manager sized by the package: its decode batch in lanes, max_seq_len cells each, its KV dtypes."""
        kv = KvManager(calbin.config, calbin.decode_lanes, calbin.k_dtype, calbin.v_dtype)
        kv.owner = calbin
        with self.lock:
            self._kv_managers.append(kv)
        return kv

    def enable_parallel_mode(self, max_in_flight: int) -> None:
        """Allow up to `max_in_flight` submitted, unfinished jobs per model queue (I08, V20)."""
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"max_in_flight must be 1..{MAX_IN_FLIGHT}")
        with self.lock:
            self.max_in_flight = max_in_flight

    # Inference

    def infer(
        self,
        submodel: SubModel,
        kv: KvManager,
        tokens: Mapping[int, Sequence[int]],
        sampling: Sampling = None,
        queue: int = 0,
    ) -> OutputBuffer:
        """Submit one job: token ids per sequence id, each sequence with exactly these tokens allocated.

        With `sampling` (one SamplingParams for every sequence, or one per sequence id) a package that
        samples on the device returns one token id per sequence instead of its logits (V17).
        """
        return self.submit(submodel, kv, tokens, sampling, queue, fixed=False)

    def create_fixed_task(self, submodel: SubModel, kv: KvManager, seq_ids: Sequence[int]) -> FixedTask:
        with self.lock:
            return FixedTask(self, submodel, kv, seq_ids)

    def handle_for(self, submodel: SubModel, kv: KvManager) -> ModelHandle:
        handle = next((h for h in self.models.values() if h.calbin is kv.owner), None)
        if handle is None or not any(s is submodel for s in handle.calbin.submodels):
            owner = next((h for h in self.models.values() if any(s is submodel for s in h.calbin.submodels)), None)
            if owner is None:
                raise CalrtError(
                    ErrorCode.NOT_CONFIGURED, f"sub-model {submodel.name!r} is not configured on the device"
                )
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "the KV manager belongs to another model")
        return handle

    def allocate_dynamic(self, handle: ModelHandle, size: int) -> int:
        """Take `size` bytes of dynamic memory on the model's first chiplet, within its quota."""
        chiplet = self.chiplets[handle.chiplets[0]]
        if chiplet.free_bytes < size:
            raise CalrtError(
                ErrorCode.OUT_OF_MEMORY, f"no room for a {size} B output buffer on chiplet {chiplet.index}"
            )
        if handle.quota_bytes is not None and handle.dynamic_bytes + size > handle.quota_bytes:
            raise CalrtError(
                ErrorCode.OUT_OF_MEMORY,
                f"{handle.name} would hold {handle.dynamic_bytes + size} B, its quota is {handle.quota_bytes}",
            )
        chiplet.dynamic_bytes += size
        handle.dynamic_bytes += size
        return chiplet.index

    def free_dynamic(self, handle: ModelHandle, chiplet: int, size: int) -> None:
        self.chiplets[chiplet].dynamic_bytes -= size
        handle.dynamic_bytes -= size

    def submit(
        self,
        submodel: SubModel,
        kv: KvManager,
        tokens: Mapping[int, Sequence[int]],
        sampling: Sampling,
        queue: int,
        fixed: bool,
    ) -> OutputBuffer:
        with self.lock:
            self._check_not_crashed()
            handle = self.handle_for(submodel, kv)
            if handle.fault is not None:
                chiplet, core = handle.fault
                raise CalrtError(ErrorCode.DEVICE_NEEDS_RESET, f"core {chiplet}.{core} raised an exception; reset it")
            calbin = handle.calbin
            seq_ids, arrays = check_inputs(calbin, submodel, kv, tokens)
            params = sampling_params(submodel, seq_ids, sampling)
            depth = self.in_flight(handle)
            if depth >= self.max_in_flight:
                raise CalrtError(ErrorCode.QUEUE_FULL, f"{depth} jobs in flight, the limit is {self.max_in_flight}")
            call, firing = self._calls, self._firing(self._calls)
            self._calls += 1
            if FaultKind.BUSY in firing:
                raise CalrtError(ErrorCode.BUSY, "the device is busy")
            if FaultKind.DEVICE_CRASH in firing:
                self._crash()
                raise CalrtError(ErrorCode.DEVICE_CRASHED, "the device stopped responding")
            if FaultKind.MEMORY_EXHAUSTION in firing:
                # Something else took all dynamic memory; it stays taken until cleared.
                first = self.chiplets[handle.chiplets[0]]
                first.dynamic_bytes += first.free_bytes
            buffer_bytes = 0 if fixed else len(seq_ids) * calbin.config.vocab * 2
            buffer_chiplet = self.allocate_dynamic(handle, buffer_bytes)
            lanes, cells = kv.lanes_cells(seq_ids)
            placement = placement_of(submodel)
            time = call_time(handle, submodel, arrays, cells, params is not None, placement, self.full_debug)
            if FaultKind.SLOW_DEVICE in firing:
                time = time.scaled(firing[FaultKind.SLOW_DEVICE].slow_factor)
            start = max([self.clock_ms, handle.ready_ms] + [self._busy_until[c] for c in handle.chiplets])
            hangs = FaultKind.TIMEOUT in firing
            job = Job(
                model=handle.id,
                chiplets=handle.chiplets,
                queue=queue,
                start_ms=start,
                end_ms=math.inf if hangs else start + time.total_ms,
                outcome=ErrorCode.CORE_EXCEPTION if FaultKind.CORE_EXCEPTION in firing else ErrorCode.SUCCESS,
                buffer_bytes=buffer_bytes,
                buffer_chiplet=buffer_chiplet,
                memory_epoch=self.memory_epoch,
                submitted_ms=self.clock_ms,
                kv_cells=tuple((s, len(a)) for s, a in zip(seq_ids, arrays, strict=True)),
                kv=kv,
            )
            if FaultKind.CORE_EXCEPTION in firing:
                fault = firing[FaultKind.CORE_EXCEPTION]
                job.fault_core = (fault.chiplet if fault.chiplet in handle.chiplets else handle.chiplets[0], fault.core)
            executor = handle.executor
            d2d_before, board_before = executor.d2d_bytes, getattr(executor, "board_link_bytes", 0)
            if job.outcome == ErrorCode.SUCCESS and not hangs:
                executor.dump = [] if self.full_debug else None
                job.logits = run_numerics(executor, submodel, kv, seq_ids, arrays, lanes, cells)
                if self.full_debug:
                    self.debug_dumps[call] = executor.dump or []
                if FaultKind.CORRUPTED_OUTPUT in firing:
                    corrupt(job.logits, firing[FaultKind.CORRUPTED_OUTPUT].flipped_bits, call)
                if params is not None:
                    job.token_ids = sample(submodel, kv, job.logits, params)
                if FaultKind.KV_APPLY_FAILURE in firing:
                    kv.fail_next_apply(seq_ids)
            token_count = sum(len(a) for a in arrays)
            record = CallRecord(
                call=call,
                model=handle.id,
                model_name=handle.name,
                submodel=submodel.name,
                queue=queue,
                lanes=len(seq_ids),
                tokens=token_count,
                queue_depth=depth,
                start_ms=start,
                end_ms=job.end_ms,
                time=time,
                chiplets=handle.chiplets,
                placement=placement,
                h2d_bytes=token_count * 4 + (16 * len(seq_ids) if params else 0),
                d2h_bytes=4 * len(seq_ids) if params else len(seq_ids) * calbin.config.vocab * 2,
                d2d_bytes=executor.d2d_bytes - d2d_before,
                board_link_bytes=getattr(executor, "board_link_bytes", 0) - board_before,
                sampled=params is not None,
                fixed_task=fixed,
            )
            self.call_log.append(record)
            self._max_queue_depth = max(self._max_queue_depth, self.in_flight() + 1)
            self._jobs.append(job)
            for c in handle.chiplets:
                self._busy_until[c] = job.end_ms
            return OutputBuffer(self, job, record)

    # Faults

    def inject(self, fault: Fault) -> None:
        """Arm a fault; its at_step counts this device's infer calls from now on."""
        if not (0 <= fault.chiplet < len(self.chiplets) and 0 <= fault.core < CALCULET_2C.cores_per_chiplet):
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"no core {fault.chiplet}.{fault.core}")
        with self.lock:
            self._armed.append((self._calls, fault))

    def _firing(self, call: int) -> dict[FaultKind, Fault]:
        """The faults that fire on this call, by kind (the first armed wins)."""
        firing: dict[FaultKind, Fault] = {}
        for armed_at, fault in self._armed:
            if armed_at + fault.at_step <= call < armed_at + fault.at_step + fault.count:
                firing.setdefault(fault.kind, fault)
        return firing

    def disarm_faults(self) -> None:
        with self.lock:
            self._armed.clear()

    # The clock

    def advance(self, ms: float) -> None:
        """Let device time pass, finishing every job whose end it reaches."""
        with self.lock:
            self.clock_ms += max(ms, 0.0)
            for job in self._jobs:
                if job.finished or job.aborted or job.end_ms > self.clock_ms:
                    continue
                job.finished = True
                handle = self.models.get(job.model)
                if job.outcome == ErrorCode.CORE_EXCEPTION and handle is not None:
                    handle.fault = job.fault_core
                    self.events.append(
                        DeviceEvent(job.end_ms, "core_exception", {"model": handle.name, "core": job.fault_core})
                    )
                    self._abort(lambda j, model=job.model: j.model == model)
            self._jobs = [job for job in self._jobs if not (job.finished or job.aborted)]

    def cancel(self, buffer: OutputBuffer) -> None:
        """Cancel a job that has not finished (V23): a pending job never starts, a running one stops with its
        DMA; its output buffer's device memory comes back, the KV cells allocated for it are rolled back, and
        the jobs queued behind it move up. INVALID_ARGUMENT for a job that has finished (its results stand) or
        was aborted already."""
        with self.lock:
            job = buffer.job
            if job.finished or job.aborted or job.end_ms <= self.clock_ms:
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"the job is {buffer.status}; nothing to cancel")
            job.cancelled = True
            self._abort(lambda j: j is job)
            self._move_up()
            job.logits, job.token_ids = {}, None
            if job.kv is not None:
                for seq_id, cells in job.kv_cells:
                    job.kv.roll_back(seq_id, cells)
            self.events.append(DeviceEvent(self.clock_ms, "cancel", {"model": job.model}))

    def _move_up(self) -> None:
        """Start the jobs not yet running as early as the chiplets allow, in submission order (after a cancel
        freed a slot): each keeps its modelled duration."""
        busy = [self.clock_ms] * len(self.chiplets)
        for job in self._jobs:
            if job.start_ms > self.clock_ms:
                handle = self.models.get(job.model)
                ready = handle.ready_ms if handle is not None else 0.0
                start = max([job.submitted_ms, self.clock_ms, ready] + [busy[c] for c in job.chiplets])
                job.start_ms, job.end_ms = start, start + (job.end_ms - job.start_ms)
            for c in job.chiplets:
                busy[c] = max(busy[c], job.end_ms)
        self._busy_until = busy

    def drain(self, timeout_ms: float) -> ErrorCode:
        """Let device time pass until every submitted job has ended, for at most `timeout_ms` (V51): SUCCESS
        when nothing is left in flight, TIMEOUT when something still is (a hung job: cancel it or reset)."""
        if timeout_ms < 0:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "timeout must not be negative")
        with self.lock:
            live = [job.end_ms for job in self._jobs if not (job.finished or job.aborted)]
            until = min(max(live, default=self.clock_ms), self.clock_ms + timeout_ms)
            self.advance(until - self.clock_ms)
            left = self.in_flight()
            self.events.append(DeviceEvent(self.clock_ms, "drain", {"left_in_flight": left}))
            return ErrorCode.SUCCESS if left == 0 else ErrorCode.TIMEOUT

    def release(self, job: Job) -> None:
        """Give back an output buffer's device memory (wait does this once it sees the job end)."""
        with self.lock:
            handle = self.models.get(job.model)
            if not job.released and job.memory_epoch == self.memory_epoch and handle is not None:
                self.free_dynamic(handle, job.buffer_chiplet, job.buffer_bytes)
            job.released = True

    def _abort(self, which: Any) -> None:
        """Abort the unfinished jobs `which(job)` selects; their output buffers are freed with them."""
        for job in self._jobs:
            if not job.finished and not job.aborted and which(job):
                job.aborted = True
                self.release(job)
        self._jobs = [job for job in self._jobs if not job.aborted]
        for c in range(len(self.chiplets)):
            live = [j.end_ms for j in self._jobs if not j.finished and c in j.chiplets]
            self._busy_until[c] = max(live, default=self.clock_ms)

    def _crash(self) -> None:
        self._crashed = True
        self._abort(lambda job: True)
        self.events.append(DeviceEvent(self.clock_ms, "device_crash"))

    def _check_not_crashed(self) -> None:
        if self._crashed:
            raise CalrtError(ErrorCode.DEVICE_CRASHED, "the device must be reset")

    # Recovery scopes, smallest first (V50)

    def reset_core(self, chiplet: int, core: int) -> None:
        """Abort the unfinished jobs of every model on this chiplet (a job spans all its model's cores) and
        clear this core's exception. Models on other chiplets keep running."""
        with self.lock:
            self._check_not_crashed()
            if not (0 <= chiplet < len(self.chiplets) and 0 <= core < CALCULET_2C.cores_per_chiplet):
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"no core {chiplet}.{core}")
            on_chiplet = {h.id for h in self.models.values() if chiplet in h.chiplets}
            self._abort(lambda job: job.model in on_chiplet)
            for handle in self.models.values():
                if handle.fault == (chiplet, core):
                    handle.fault = None
            self.events.append(DeviceEvent(self.clock_ms, "reset_core", {"core": [chiplet, core]}))

    def clear_dynamic_memory(self) -> None:
        """Free all per-call device memory; unfinished jobs are aborted since their buffers go too."""
        with self.lock:
            self._check_not_crashed()
            self._abort(lambda job: True)
            self.memory_epoch += 1
            for chiplet in self.chiplets:
                chiplet.dynamic_bytes = 0
            for handle in self.models.values():
                handle.dynamic_bytes = 0
            self.events.append(DeviceEvent(self.clock_ms, "clear_dynamic_memory"))

    def reset_configuration(self) -> None:
        """Drop every configured model and its reservation; KV managers are emptied. Configure again after."""
        with self.lock:
            self._check_not_crashed()
            self._abort(lambda job: True)
            for handle in list(self.models.values()):
                self._drop(handle)
            self.events.append(DeviceEvent(self.clock_ms, "reset_configuration"))

    def reset_device(self) -> None:
        """Everything back to power-on, except armed faults and the clock."""
        with self.lock:
            self._abort(lambda job: True)
            self.memory_epoch += 1
            for handle in list(self.models.values()):
                self._drop(handle)
            for chiplet in self.chiplets:
                chiplet.reserved_bytes = chiplet.sram_reserved_bytes = chiplet.dynamic_bytes = 0
            self._crashed = False
            self.events.append(DeviceEvent(self.clock_ms, "reset_device"))
