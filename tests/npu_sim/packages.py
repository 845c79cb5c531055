"""Editing a built package as a vendor's toolchain might have written it: text lines, goldens, digests."""

import hashlib
import io
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from npu_sim.calbin.build import BuildOptions, layout_files, make_goldens, write_package
from npu_sim.calbin.goldens import read_golden
from npu_sim.calbin.layout import (
    CHECKSUMS,
    GOLDEN,
    MODEL_CONFIG,
    MODEL_MEMORY,
    PACKAGE_INFO,
    PARAM_TABLE,
    SUBMODEL_MEMORY,
)
from npu_sim.model import PRESETS, init_weights
from npu_sim.model.quantized import S8Model, is_quantized, quantize_weights


def resum(root: Path) -> None:
    """Rewrite SHA256SUMS for the files as they are now, so only the edit itself is a finding."""
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    lines = [f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    (root / CHECKSUMS).write_text("".join(lines))


def set_line(root: Path, file: str, key: str, value: str | None, digests: bool = True) -> None:
    """Set `key: value` in a text file of the package (appended if absent; removed when value is None)."""
    path = root / file
    lines = path.read_text().splitlines()
    pattern = re.compile(rf"^{re.escape(key)}[:\s]")
    found = [i for i, line in enumerate(lines) if pattern.match(line)]
    if value is None:
        lines = [line for i, line in enumerate(lines) if i not in found]
    elif found:
        lines[found[0]] = f"{key}: {value}"
    else:
        lines.append(f"{key}: {value}")
    path.write_text("\n".join(lines) + "\n")
    if digests:
        resum(root)


def replace_text(root: Path, file: str, old: str, new: str) -> None:
    path = root / file
    text = path.read_text()
    assert old in text, f"{old!r} is not in {file}"
    path.write_text(text.replace(old, new))
    resum(root)


def change_golden(root: Path, change: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Edit the package's golden arrays and write them back (digests updated)."""
    golden = read_golden((root / GOLDEN).read_bytes(), "package")
    arrays = golden.arrays()
    change(arrays)
    (root / GOLDEN).write_bytes(_npz(arrays))
    resum(root)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def vendor_form(root: Path) -> Path:
    """The package as the vendor's toolchain leaves it (the seed's A01-A17): without the files only the simulator
    adds — package_info.txt, param_table.txt, the goldens and SHA256SUMS."""
    for name in (PACKAGE_INFO, PARAM_TABLE, CHECKSUMS):
        (root / name).unlink()
    shutil.rmtree(root / GOLDEN.split("/")[0])
    return root


# The seed's package at full scale: its two parameter blocks (A02, A03), reservations (A05-A07), sub-model I/O
# (A09-A11) and its two metadata defects, A16 (16777216 MB) and A17 (the prefill labelled llm_decode).
SEED_CONFIG = (
    '{"num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,'
    ' "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,'
    ' "vocab_size": 151936, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "max_position_embeddings": 40960}'
)
SEED_BLOCKS = (9_404_557_312, 8_782_227_456)
SEED_MEMORY = (
    "model_name: qwen3-30b-a3b\nchip_num: 2\ndevice_memory_required: 16777216 MB\n"
    "chip0.dram_reserved: 15113064448 B\nchip0.sram_reserved: 17662336 B\n"
    "chip1.dram_reserved: 15113064448 B\nchip1.sram_reserved: 17662336 B\nparam_block_num: 2\n"
    f"param_blk0.file: param_blk0.bin\nparam_blk0.chip_mask: 0x1\nparam_blk0.size: {SEED_BLOCKS[0]}\n"
    f"param_blk1.file: param_blk1.bin\nparam_blk1.chip_mask: 0x2\nparam_blk1.size: {SEED_BLOCKS[1]}\n"
)


def seed_package(root: Path) -> Path:
    """The seed's package in the vendor's form, its blocks sparse files of the seed's sizes."""
    (root / MODEL_CONFIG).parent.mkdir(parents=True)
    (root / MODEL_CONFIG).write_text(SEED_CONFIG)
    (root / MODEL_MEMORY).write_text(SEED_MEMORY)
    for index, size in enumerate(SEED_BLOCKS):
        with (root / f"param_blk{index}.bin").open("wb") as block:
            block.truncate(size)
    for name, smodel_type, tokens, size in (("prefill", "llm_decode", 40960, 163840), ("decode", "llm_decode", 1, 4)):
        (root / name).mkdir()
        (root / name / SUBMODEL_MEMORY).write_text(
            f"submodel_name: {name}\nsmodel_type: {smodel_type}\nbatch: 1\nchip_mask: 0x3\ninput_num: 1\n"
            f"input0.name: input_ids\ninput0.shape: [1,{tokens}]\ninput0.dtype: INT32\ninput0.size: {size}\n"
            "output_num: 1\noutput0.name: logits\noutput0.shape: [1,1,151936]\noutput0.dtype: BF16\n"
            "output0.size: 303872\n"
        )
    return root


def crushed_s8_package(out: Path, bits: int = 3) -> Path:
    """An S8 package (tar) whose weights were rounded to `bits` bits and back before they were packed as int8,
    its goldens those of its own numerics, as a toolchain that loses the model would write it: it matches its
    golden and its own dequantised weights, not the float model."""
    options = BuildOptions(features=("s8",))
    config = PRESETS[options.preset]
    crushed = {}
    for name, weight in init_weights(config, options.seed).items():
        if is_quantized(name):
            levels = 2 ** (bits - 1) - 1
            scale = np.abs(weight).max(axis=-2, keepdims=True) / levels
            weight = (np.round(weight / scale) * scale).astype(np.float32)
        crushed[name] = weight
    stored = quantize_weights(crushed)
    goldens = make_goldens(options, config, S8Model(config, stored, chiplets=1))
    files = layout_files(options, config, stored, goldens, f"qwen3-moe-tiny-tp-b1-s0-s8-crushed{bits}")
    return write_package(files, out, tar=True)
