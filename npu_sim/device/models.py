"""The device's memory per chiplet and the models configured on it (V31, V35)."""

from dataclasses import dataclass

from npu_sim.loaded_calbin import Calbin
from npu_sim.model import ReferenceModel
from npu_sim.timing import TimingModel


@dataclass
class Chiplet:
    index: int  # board * 2 + chiplet on the board
    cores: int
    dram_bytes: int
    sram_bytes: int
    reserved_bytes: int = 0  # the configured models' static DRAM reservations
    sram_reserved_bytes: int = 0
    dynamic_bytes: int = 0  # output buffers and anything else allocated per call

    @property
    def free_bytes(self) -> int:
        return self.dram_bytes - self.reserved_bytes - self.dynamic_bytes


@dataclass
class ModelHandle:
    """One configured model: its own reservation, queue, KV managers, fault state and executor."""

    id: int
    calbin: Calbin
    executor: ReferenceModel
    timing: TimingModel
    chiplets: tuple[int, ...]
    quota_bytes: int | None  # dynamic memory its output buffers may hold; None: no quota
    ready_ms: float = 0.0  # a model loaded while others serve is usable from its modelled load's end
    dynamic_bytes: int = 0
    fault: tuple[int, int] | None = None  # the (chiplet, core) whose exception waits for a reset
    resident: bool = True

    @property
    def name(self) -> str:
        return self.calbin.name
