"""Fixed tasks (I06): a sub-model bound once to its sequences and one output buffer."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from npu_sim.device.buffers import BufferStatus, OutputBuffer
from npu_sim.device.calls import Sampling
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import SubModel

if TYPE_CHECKING:
    from npu_sim.device.virtual_device import VirtualDevice


class FixedTask:
    """A sub-model bound once to its sequences and one output buffer, submitted again and again (I06).

    Unlike `infer`, which allocates an output buffer per call (R09), a fixed task holds its buffer from
    creation to `release`; a submit while its previous run is unfinished is refused with BUSY.
    """

    def __init__(self, device: "VirtualDevice", submodel: SubModel, kv: KvManager, seq_ids: Sequence[int]) -> None:
        self.device, self.submodel, self.kv = device, submodel, kv
        self.seq_ids = tuple(seq_ids)
        handle = device.handle_for(submodel, kv)
        self.bytes = len(self.seq_ids) * handle.calbin.config.vocab * 2
        self.chiplet = handle.chiplets[0]
        device.allocate_dynamic(handle, self.bytes)
        self.epoch = device.memory_epoch
        self._last: OutputBuffer | None = None
        self.released = False

    def submit(self, tokens: Mapping[int, Sequence[int]], sampling: Sampling = None) -> OutputBuffer:
        with self.device.lock:
            if self.released or self.epoch != self.device.memory_epoch:
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, "the fixed task's buffer is gone; create the task again")
            if set(tokens) != set(self.seq_ids):
                raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"the fixed task is bound to sequences {self.seq_ids}")
            if self._last is not None and self._last.status in (BufferStatus.PENDING, BufferStatus.RUNNING):
                raise CalrtError(ErrorCode.BUSY, "the fixed task's previous run has not finished")
            self._last = self.device.submit(self.submodel, self.kv, tokens, sampling, 0, fixed=True)
            return self._last

    def release(self) -> None:
        with self.device.lock:
            if not self.released and self.epoch == self.device.memory_epoch:
                handle = self.device.handle_for(self.submodel, self.kv)
                self.device.free_dynamic(handle, self.chiplet, self.bytes)
            self.released = True
