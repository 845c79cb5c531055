"""The metadata files `build-calbin` writes: config.json, the memory reservations, the sub-models, package_info."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npu_sim.calbin.check_meta import layout_chiplets
from npu_sim.calbin.layout import HF_CONFIG_KEYS, HF_MAX_POSITIONS, SCHEMA_VERSION
from npu_sim.calbin.textinfo import write_text
from npu_sim.kv import kv_cache_bytes
from npu_sim.model import ModelConfig

if TYPE_CHECKING:
    from npu_sim.calbin.build import BuildOptions

# The compatibility a freshly built package declares. The seed pins CalRT 0.7.6 but records no driver
# or firmware version; these two are the simulator's own defaults.
DEFAULT_COMPATIBILITY = {"calrt": ">=0.7.6,<0.8", "driver": ">=2.3,<3", "firmware": ">=1.8,<2", "chip": "calculet-2c"}
# A package split over two boards declares no upper CalRT bound: it waits for a runtime that spans two
# physical devices (V36 asks which); a 0.7.x device loads it and refuses the second board itself (I09).
MULTI_BOARD_CALRT = ">=0.7.6"


def compatibility_for(layout: str) -> dict[str, str]:
    return DEFAULT_COMPATIBILITY | ({"calrt": MULTI_BOARD_CALRT} if layout == "multi_board" else {})


ATTENTION_TILE = 128  # positions per flash-attention tile, for the SRAM reservation


def ops_for(layout: str, features: Sequence[str]) -> list[str]:
    """The ops a sub-model of this package runs (placed on the NPU unless declared as CPU fallbacks)."""
    ops = ["embedding", "rms_norm", "qkv_matmul", "rope", "flash_attention", "o_matmul", "moe_router"]
    ops += ["moe_dense_group", "lm_head"]
    ops += {
        "tp": ["all_reduce"],
        "ep": ["all_to_all"],
        "pp": ["stage_send"],
        "multi_board": ["all_reduce", "stage_send"],
    }.get(layout, [])
    if "s8" in features:
        ops += ["quantize", "dequantize"]
    if "sampling" in features:
        ops.append("topk_sampling")
    return ops


def hf_config(config: ModelConfig) -> bytes:
    """__Tokenizer/config.json in the Hugging Face form the seed reads M01-M05 from."""
    values: dict[str, object] = {key: getattr(config, name) for name, key in HF_CONFIG_KEYS.items()}
    values |= {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"}
    values[HF_MAX_POSITIONS] = config.max_seq_len
    return (json.dumps(values, indent=2, sort_keys=True) + "\n").encode()


def reservations(
    options: "BuildOptions", config: ModelConfig, block_sizes: dict[int, int]
) -> dict[int, tuple[int, int]]:
    """DRAM and SRAM each used chiplet reserves: its parameters, its share of the KV cache at max_seq_len,
    the I/O buffers and an activation workspace; SRAM for attention tiles and an activation tile."""
    chiplets = layout_chiplets(options.layout, options.chip_affinity) or []
    kv = kv_cache_bytes(config, config.max_seq_len, options.decode_batch, *options.kv_dtypes) // len(chiplets)
    io = options.decode_batch * config.vocab * 2 + options.prefill_batch * config.max_seq_len * 4
    workspace = 4 * config.max_seq_len * config.hidden * 4
    heads = max(1, config.kv_heads // len(chiplets))
    sram = 2 * heads * config.head_dim * ATTENTION_TILE * 4 + config.hidden * ATTENTION_TILE * 4
    return {c: (block_sizes.get(c, 0) + kv + io + workspace, sram) for c in chiplets}


def model_memory(name: str, reserved: dict[int, tuple[int, int]], block_sizes: dict[int, int]) -> bytes:
    entries: list[tuple[str, object]] = [
        ("model_name", name),
        ("device_memory_required", f"{sum(d for d, _ in reserved.values())} B"),
        ("schema_version", SCHEMA_VERSION),
        ("chip_num", len(reserved)),
    ]
    for chiplet, (dram, sram) in sorted(reserved.items()):
        entries += [(f"chip{chiplet}.dram_reserved", f"{dram} B"), (f"chip{chiplet}.sram_reserved", f"{sram} B")]
    entries.append(("param_block_num", len(block_sizes)))
    for index, size in sorted(block_sizes.items()):
        entries += [
            (f"param_blk{index}.file", f"param_blk{index}.bin"),
            (f"param_blk{index}.chip_mask", hex(1 << index)),
            (f"param_blk{index}.size", size),
        ]
    return write_text("CalRT model memory reservation (docs/calbin-format.md)", entries)


@dataclass(frozen=True)
class SubModelFile:
    name: str
    text: bytes


def _io(key: str, name: str, shape: list[int], dtype: str, element_bytes: int) -> list[tuple[str, object]]:
    size = element_bytes
    for d in shape:
        size *= d
    return [
        (f"{key}.name", name),
        (f"{key}.shape", f"[{','.join(map(str, shape))}]"),
        (f"{key}.dtype", dtype),
        (f"{key}.size", size),
    ]


def submodels(options: "BuildOptions", config: ModelConfig, chiplets: list[int]) -> list[SubModelFile]:
    sampling = "sampling" in options.features
    found = []
    for name, smodel_type, batch, tokens in (
        ("prefill", "llm_prefill", options.prefill_batch, config.max_seq_len),
        ("decode", "llm_decode", options.decode_batch, 1),
    ):
        entries: list[tuple[str, object]] = [
            ("submodel_name", name),
            ("smodel_type", smodel_type),
            ("batch", batch),
            ("chip_mask", hex(sum(1 << c for c in chiplets))),
            ("input_num", 2 if sampling else 1),
        ]
        entries += _io("input0", "input_ids", [batch, tokens], "INT32", 4)
        if sampling:
            entries += _io("input1", "sampling_params", [batch, 4], "FP32", 4)
        entries.append(("output_num", 2 if sampling else 1))
        entries += _io("output0", "logits", [batch, 1, config.vocab], "BF16", 2)
        if sampling:
            entries += _io("output1", "token_ids", [batch, 1], "INT32", 4)
        for op in ops_for(options.layout, options.features):
            entries.append((f"op.{op}", "cpu" if op in options.cpu_fallback else "npu"))
        found.append(SubModelFile(name, write_text(f"CalRT sub-model {name} (docs/calbin-format.md)", entries)))
    return found


def package_info(options: "BuildOptions", name: str, compatibility: dict[str, str]) -> list[tuple[str, object]]:
    k_dtype, v_dtype = options.kv_dtypes
    weights = "s8" if options.s8 else "f32"
    entries: list[tuple[str, object]] = [
        ("schema_version", SCHEMA_VERSION),
        ("name", name),
        ("architecture", "qwen3_moe"),
        ("layout", options.layout),
        ("features", " ".join(options.features)),
    ]
    if options.layout == "single_chiplet":
        entries.append(("chip_affinity", options.chip_affinity))
    entries += [
        ("weight_dtype", weights),
        ("activation_dtype", weights),
        ("k_cache_dtype", k_dtype),
        ("v_cache_dtype", v_dtype),
        ("logits_dtype", "bf16"),
        ("prefill_lengths", " ".join(map(str, options.prefill_lengths)) or "dynamic"),
        ("submodels", "prefill decode"),
    ]
    entries += [(f"compat.{key}", value) for key, value in compatibility.items()]
    entries.append(("timing_preset", options.timing))
    return entries
