"""Whether a package's metadata makes sense for its model and for calculet-2c.

The seed's defect classes, found in the text files themselves:
- A16 (V33, V48): `device_memory_required` in a unit that makes it impossible (16777216 MB is 16 TiB);
- A17 (V43): a sub-model whose input is a prefill's labelled `smodel_type llm_decode`;
- A05/A06: DRAM or SRAM reserved per chiplet beyond the chip;
- A07: a parameter block whose chip mask puts it on no chiplet, on several, or on another chiplet's plan;
- A09-A11: I/O shapes, dtypes and sizes that disagree with the model (BF16 logits are vocab x 2 bytes
  per lane: 151936 x 2 = 303,872 B at full scale).
"""

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from npu_sim.calbin.findings import Finding
from npu_sim.calbin.layout import (
    FEATURES,
    IO_DTYPES,
    KV_DTYPES,
    LAYOUT_SHAPE,
    LAYOUTS,
    MEMORY_UNITS,
    MODEL_CONFIG,
    S8_LAYOUTS,
    SMODEL_TYPES,
    VENDOR_FORM,
    WEIGHT_DTYPES,
    human_bytes,
)
from npu_sim.calbin.metadata import IoSpec, PackageMeta, SubModelMeta
from npu_sim.calbin.textinfo import TextInfo
from npu_sim.chips import CALCULET_2C
from npu_sim.dtypes import DTYPE_BYTES
from npu_sim.model import PRESETS


def layout_chiplets(layout: str | None, affinity: int | None) -> list[int] | None:
    """The chiplets (board * 2 + chiplet) a layout occupies."""
    if layout not in LAYOUT_SHAPE:
        return None
    if layout == "single_chiplet":
        return [affinity] if affinity is not None and affinity in range(CALCULET_2C.chiplets) else None
    boards, chiplets = LAYOUT_SHAPE[layout]
    return list(range(boards * chiplets))


def check_meta(meta: PackageMeta) -> None:
    """Append every finding about the metadata to meta.findings. A vendor-form package has no package_info.txt
    to check; its chiplets are those that reserve memory."""
    if meta.form != VENDOR_FORM:
        _check_info(meta)
    _check_positions(meta)
    _check_memory(meta)
    _check_submodels(meta)


def _chiplets(meta: PackageMeta) -> list[int] | None:
    """The chiplets the package occupies: its layout's, or for a vendor-form package the reserving ones."""
    if meta.form == VENDOR_FORM:
        return sorted(meta.reservations) or None
    return layout_chiplets(meta.layout, meta.chip_affinity)


def _defect(code: str, meta: PackageMeta, info: TextInfo, key: str, message: str) -> None:
    """A16 and A17: an error in the simulator's packages, which the simulator loads by these fields; a warning
    in the vendor's own, which the vendor's runtime runs with them (the seed's package does), to be fixed in
    the metadata (V33, V43) but not a reason to refuse the package."""
    if meta.form == VENDOR_FORM:
        info.warning(code, key, f"{message}; reported, not refused: the vendor's runtime runs its package with it")
    else:
        info.error(code, key, message)


def _check_info(meta: PackageMeta) -> None:
    info = meta.info
    if meta.layout is not None and meta.layout not in LAYOUTS:
        info.error("layout_unknown", "layout", f"layout must be one of {', '.join(LAYOUTS)}, not {meta.layout!r}")
    for feature in meta.features:
        if feature not in FEATURES:
            info.error("feature_unknown", "features", f"unknown feature {feature!r}; known: {', '.join(FEATURES)}")
    if meta.layout == "single_chiplet" and meta.chip_affinity not in range(CALCULET_2C.chiplets):
        info.error("chip_affinity_invalid", "chip_affinity", "a single_chiplet package names its chip: 0 or 1")
    elif meta.layout != "single_chiplet" and meta.chip_affinity is not None:
        info.error("chip_affinity_invalid", "chip_affinity", "only a single_chiplet package has a chip affinity")
    _check_dtypes(meta)
    for key in ("calrt", "driver", "firmware"):
        spec = meta.compatibility.get(key)
        if spec is None:
            continue
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            info.error("compat_range_invalid", f"compat.{key}", f"{spec!r} is not a PEP 440 version range")
    chips = meta.compatibility.get("chip")
    if chips is not None and not chips:
        info.error("field_type", "compat.chip", "compat.chip lists at least one chip")
    for chip in chips or []:
        if chip != CALCULET_2C.name:
            info.warning("chip_unknown", "compat.chip", f"the simulator does not know chip {chip!r}")
    if meta.timing_preset is not None and meta.timing_preset not in PRESETS:
        info.error("timing_preset_unknown", "timing_preset", f"timing_preset must be one of {', '.join(PRESETS)}")
    max_seq_len = meta.max_seq_len
    for length in meta.prefill_lengths or []:
        if max_seq_len is not None and length > max_seq_len:
            info.error("prefill_length_invalid", "prefill_lengths", f"{length} is beyond max_seq_len {max_seq_len}")


def _check_positions(meta: PackageMeta) -> None:
    max_seq_len = meta.max_seq_len
    if meta.config_max_positions is not None and max_seq_len is not None and meta.config_max_positions != max_seq_len:
        meta.findings.append(
            Finding(
                "max_seq_len_differs",
                "warning",
                MODEL_CONFIG,
                f"config.json says {meta.config_max_positions} positions; the calbin's prefill takes {max_seq_len}, "
                "which the runtime uses (M05)",
            )
        )


def _check_dtypes(meta: PackageMeta) -> None:
    info, d = meta.info, meta.dtypes
    allowed: dict[str, tuple[str, ...]] = {
        "weight": WEIGHT_DTYPES,
        "activation": WEIGHT_DTYPES,
        "k_cache": KV_DTYPES,
        "v_cache": KV_DTYPES,
        "logits": ("bf16",),
    }
    for role, names in allowed.items():
        if d.get(role) is not None and d[role] not in names:
            info.error("dtype_unknown", f"{role}_dtype", f"{role}_dtype must be one of {', '.join(names)}")
    s8 = "s8" in meta.features
    if d.get("weight") is not None and (d["weight"] == "s8") != s8:
        info.error("s8_inconsistent", "weight_dtype", "S8 weights and the s8 feature go together")
    if s8 and d.get("v_cache") not in (None, "s8"):
        info.error("s8_inconsistent", "v_cache_dtype", "an s8 package has an S8 V cache (V25)")
    if not s8 and "s8" in (d.get("k_cache"), d.get("v_cache")):
        info.error("s8_inconsistent", "v_cache_dtype", "an S8 cache needs the s8 feature")
    if d.get("activation") is not None and d.get("weight") is not None and d["activation"] != d["weight"]:
        info.error("s8_inconsistent", "activation_dtype", "activations are quantised exactly when weights are (W8A8)")
    if s8 and meta.layout is not None and meta.layout not in S8_LAYOUTS:
        info.error("s8_layout", "layout", f"S8 packages are built for the {' and '.join(S8_LAYOUTS)} layouts")


def _check_memory(meta: PackageMeta) -> None:
    memory, chip = meta.memory, CALCULET_2C
    used = _chiplets(meta)
    if used is not None and meta.reservations and sorted(meta.reservations) != used:
        memory.error(
            "layout_chiplets_mismatch",
            "chip_num",
            f"the {meta.layout} layout occupies chiplets {used}; memory is reserved on {sorted(meta.reservations)}",
        )
    for chiplet, (dram, sram) in sorted(meta.reservations.items()):
        for key, value, limit in (
            (f"chip{chiplet}.dram_reserved", dram, chip.dram_bytes_per_chiplet),
            (f"chip{chiplet}.sram_reserved", sram, chip.sram_bytes_per_chiplet),
        ):
            if value is not None and value > limit:
                kind = "DRAM" if "dram" in key else "SRAM"
                memory.error(
                    "memory_exceeds_device",
                    key,
                    f"{human_bytes(value)} of {kind} reserved; a {chip.name} chiplet has {human_bytes(limit)}",
                )
    _check_device_memory(meta, memory, used)
    for block in meta.blocks:
        _check_mask(memory, block.index, block.chip_mask, used)


def _check_device_memory(meta: PackageMeta, memory: TextInfo, used: list[int] | None) -> None:
    if meta.device_memory_required is None:
        return
    value, unit = meta.device_memory_required
    required = value * MEMORY_UNITS[unit]
    boards = 1 if used is None else (max(used) // CALCULET_2C.chiplets + 1)
    total = CALCULET_2C.dram_bytes * boards
    reserved = sum(d or 0 for d, _ in meta.reservations.values())
    key = "device_memory_required"
    if required > total:
        as_bytes = f"; read as bytes it would be {human_bytes(value)}" if unit != "B" else ""
        _defect(
            "memory_exceeds_device",
            meta,
            memory,
            key,
            f"{value} {unit} is {human_bytes(required)}; {boards} {CALCULET_2C.name} board(s) have "
            f"{human_bytes(total)} of DRAM{as_bytes} (A16: the unit cannot be right, V33)",
        )
    elif required < reserved:
        memory.warning(
            "memory_understated",
            key,
            f"{value} {unit} is {human_bytes(required)}, less than the {human_bytes(reserved)} the chiplets reserve",
        )


def _check_mask(memory: TextInfo, index: int, mask: int, used: list[int] | None) -> None:
    """A07: param_blk<i> is chiplet i's and its mask is exactly that chiplet's bit."""
    key = f"param_blk{index}.chip_mask"
    on = [c for c in range(mask.bit_length()) if mask >> c & 1]
    if not on:
        memory.error("param_mask_empty", key, f"mask {hex(mask)} puts param_blk{index} on no chiplet")
    elif len(on) > 1:
        chips = " and ".join(f"chip{c}" for c in on)
        memory.error(
            "param_mask_shared", key, f"mask {hex(mask)} puts param_blk{index} on {chips}; a block is one chiplet's"
        )
    elif on[0] != index:
        memory.error("param_mask_mismatch", key, f"mask {hex(mask)} puts chip{index}'s block on chip{on[0]}")
    elif used is not None and index not in used:
        memory.error("param_mask_unused", key, f"chip{index} is not one of the layout's chiplets {used}")


def _check_submodels(meta: PackageMeta) -> None:
    names: set[str] = set()
    types: list[str] = []
    for sub in meta.submodels:
        if sub.name in names:
            sub.info.error("submodel_name_duplicate", "submodel_name", f"two sub-models are named {sub.name!r}")
        names.add(sub.name)
        if sub.smodel_type is not None and sub.smodel_type not in SMODEL_TYPES:
            sub.info.error(
                "smodel_type_unknown", "smodel_type", f"smodel_type must be one of {', '.join(SMODEL_TYPES)}"
            )
        if sub.shaped_type in SMODEL_TYPES:
            types.append(sub.shaped_type)
        _check_io(meta, sub)
        used = _chiplets(meta)
        if used is not None and sub.chip_mask is not None and sub.chip_mask != sum(1 << c for c in used):
            sub.info.error(
                "submodel_mask_mismatch", "chip_mask", f"mask {hex(sub.chip_mask)} is not the layout's chiplets {used}"
            )
        for op, where in sub.ops.items():
            if where not in ("npu", "cpu"):
                sub.info.error("field_type", f"op.{op}", f"op.{op} is placed on `npu` or `cpu`, not {where!r}")
    for needed in SMODEL_TYPES:
        if types.count(needed) == 0:
            meta.info.error("submodel_missing", "submodels", f"no sub-model of type {needed}")
        elif types.count(needed) > 1:
            meta.info.error("submodel_missing", "submodels", f"more than one sub-model of type {needed}")


def _io_bytes(io: IoSpec) -> int | None:
    dtype = IO_DTYPES.get(io.dtype)
    if dtype is None:
        return None
    count = 1
    for d in io.shape:
        count *= d
    return count * DTYPE_BYTES[dtype]


def _check_io(meta: PackageMeta, sub: SubModelMeta) -> None:
    info = sub.info
    for io in sub.inputs + sub.outputs:
        if io.dtype not in IO_DTYPES:
            info.error("dtype_unknown", f"{io.key}.dtype", f"unknown dtype {io.dtype!r}; known: {', '.join(IO_DTYPES)}")
        elif io.size != _io_bytes(io):
            info.error(
                "io_size_mismatch",
                f"{io.key}.size",
                f"{io.name} {io.dtype}{io.shape} is {_io_bytes(io)} bytes, the file says {io.size}",
            )
    ids = sub.input("input_ids")
    if ids is None:
        info.error("io_missing", "input0.name", "the first input is the token ids, `input_ids`")
        return
    if ids.dtype != "INT32" or len(ids.shape) != 2:
        info.error(
            "io_shape_mismatch", f"{ids.key}.shape", f"input_ids is INT32 [batch, tokens], not {ids.dtype}{ids.shape}"
        )
        return
    if sub.batch is not None and ids.shape[0] != sub.batch:
        info.error(
            "submodel_shape",
            f"{ids.key}.shape",
            f"input_ids' leading dimension {ids.shape[0]} differs from batch {sub.batch}",
        )
    tokens = ids.shape[1]
    shaped_as = "llm_prefill" if tokens > 1 else "llm_decode"
    if sub.smodel_type in SMODEL_TYPES and sub.smodel_type != shaped_as:
        _defect(
            "smodel_type_mismatch",
            meta,
            info,
            "smodel_type",
            f"sub-model {sub.name!r} takes {tokens} tokens per lane, which is {shaped_as}, but is labelled "
            f"{sub.smodel_type} (A17)",
        )
    _check_outputs(meta, sub, ids.shape[0])


def _check_outputs(meta: PackageMeta, sub: SubModelMeta, batch: int) -> None:
    info = sub.info
    logits = sub.output("logits")
    if logits is None:
        info.error("io_missing", "output0.name", "a sub-model returns its `logits`")
    elif meta.config is not None:
        vocab = meta.config.vocab
        if logits.shape != [batch, 1, vocab]:
            info.error(
                "io_shape_mismatch",
                f"{logits.key}.shape",
                f"logits should be [{batch},1,{vocab}] for this model (A09/A10), not {logits.shape}",
            )
        if logits.dtype != "BF16":
            info.error("io_dtype_mismatch", f"{logits.key}.dtype", f"logits are BF16, not {logits.dtype}")
        expected = batch * vocab * 2
        if logits.size != expected and logits.size == _io_bytes(logits):
            info.error(
                "io_size_mismatch",
                f"{logits.key}.size",
                f"the D2H of BF16 logits is {batch} x {vocab} x 2 = {expected:,} bytes, not {logits.size:,} (A11)",
            )
    sampled = sub.output("token_ids"), sub.input("sampling_params")
    if "sampling" in meta.features:
        token_ids, params = sampled
        if token_ids is None or token_ids.shape != [batch, 1] or token_ids.dtype != "INT32":
            info.error("sampling_io_missing", "output_num", f"device sampling returns `token_ids` INT32 [{batch},1]")
        if params is None or params.shape != [batch, 4] or params.dtype != "FP32":
            info.error("sampling_io_missing", "input_num", f"device sampling takes `sampling_params` FP32 [{batch},4]")
    elif any(io is not None for io in sampled):
        info.error("sampling_io_undeclared", "output_num", "sampling I/O without the sampling feature")
