"""What the simulator assumes about the chip.

The seed gives the topology (one physical device, two chiplets of two CalCores, M06/I09) and the
per-chiplet reservation of the current calbin (A05/A06) but no official capacities (V28 is open);
the DRAM and SRAM sizes below are assumptions chosen so that the current calbin's reservation fits.
"""

from dataclasses import dataclass

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class ChipSpec:
    name: str
    chiplets: int
    cores_per_chiplet: int
    dram_bytes_per_chiplet: int
    sram_bytes_per_chiplet: int

    @property
    def dram_bytes(self) -> int:
        return self.dram_bytes_per_chiplet * self.chiplets

    @property
    def sram_bytes(self) -> int:
        return self.sram_bytes_per_chiplet * self.chiplets


CALCULET_2C = ChipSpec(
    name="calculet-2c",
    chiplets=2,
    cores_per_chiplet=2,
    dram_bytes_per_chiplet=16 * GIB,
    sram_bytes_per_chiplet=32 * MIB,
)

CHIPS: dict[str, ChipSpec] = {CALCULET_2C.name: CALCULET_2C}

# The ops calculet-2c runs on its cores (the simulator's own list: the seed's op/shape/dtype support
# matrix is still asked for, V10). An op a package places on the NPU that is not here runs on the host
# instead, and the placement trace shows it (V11).
NPU_OPS = frozenset(
    {
        "embedding",
        "rms_norm",
        "qkv_matmul",
        "rope",
        "flash_attention",
        "o_matmul",
        "moe_router",
        "moe_dense_group",
        "lm_head",
        "all_reduce",
        "all_to_all",
        "stage_send",
        "quantize",
        "dequantize",
        "topk_sampling",
    }
)
