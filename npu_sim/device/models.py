"""The device's memory per chiplet and the models configured on it (V31, V35)."""

from dataclasses import dataclass

from npu_sim.errors import CalrtError, ErrorCode
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

    @property
    def free_sram_bytes(self) -> int:
        return self.sram_bytes - self.sram_reserved_bytes


def reserve(chiplets: list[Chiplet], calbin: Calbin) -> None:
    """Reserve a package's DRAM and SRAM on the chiplets its layout uses, all or nothing."""
    for c in calbin.chiplets:
        dram, sram = calbin.reservations[c]
        chiplet = chiplets[c]
        if chiplet.free_bytes < dram or chiplet.free_sram_bytes < sram:
            raise CalrtError(
                ErrorCode.OUT_OF_MEMORY,
                f"chiplet {c} has {chiplet.free_bytes} B of DRAM and {chiplet.free_sram_bytes} B of SRAM free; "
                f"{calbin.name} needs {dram} B and {sram} B",
            )
    for c in calbin.chiplets:
        chiplets[c].reserved_bytes += calbin.reservations[c][0]
        chiplets[c].sram_reserved_bytes += calbin.reservations[c][1]


def unreserve(chiplets: list[Chiplet], calbin: Calbin) -> None:
    for c in calbin.chiplets:
        chiplets[c].reserved_bytes -= calbin.reservations[c][0]
        chiplets[c].sram_reserved_bytes -= calbin.reservations[c][1]


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
