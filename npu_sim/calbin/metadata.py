"""Reading a package's text files and config.json into `PackageMeta`, noting every field that cannot be read.

What is read here is only parsed (types, units, shapes); whether it makes sense for the model and the
chip is checked in `checks.py`. `PackageMeta.manifest()` is the same metadata as one JSON-ready dict,
which `read_manifest` returns.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from npu_sim.calbin.findings import CalbinError, Finding
from npu_sim.calbin.layout import (
    HF_CONFIG_KEYS,
    HF_MAX_POSITIONS,
    LEGACY_MANIFEST,
    MEMORY_UNITS,
    MODEL_CONFIG,
    MODEL_MEMORY,
    PACKAGE_INFO,
    PARAM_TABLE,
    SCHEMA_VERSION,
    SIMULATOR_FORM,
    SUBMODEL_MEMORY,
    VENDOR_FORM,
)
from npu_sim.calbin.package import Package
from npu_sim.calbin.params import PARAM_DTYPES, Part
from npu_sim.calbin.textinfo import TextInfo, parse_text
from npu_sim.model import ModelConfig

COMPAT_KEYS = ("calrt", "driver", "firmware")
_BLOCK_FILE = re.compile(r"param_blk(\d+)\.file")


@dataclass(frozen=True)
class IoSpec:
    key: str  # "input0", "output1", ...
    name: str
    shape: list[int]
    dtype: str  # as the file spells it: INT32, BF16, ...
    size: int


@dataclass
class SubModelMeta:
    name: str
    info: TextInfo
    smodel_type: str | None = None
    batch: int | None = None
    chip_mask: int | None = None
    inputs: list[IoSpec] = field(default_factory=list)
    outputs: list[IoSpec] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)  # op -> "npu" or "cpu", as the package declares

    @property
    def shaped_type(self) -> str | None:
        """What the sub-model is by its input: more than one token per lane is a prefill, one a decode (A17:
        the label may say otherwise); its label when the input cannot tell."""
        ids = self.input("input_ids")
        if ids is None or len(ids.shape) != 2 or ids.shape[1] < 1:
            return self.smodel_type
        return "llm_prefill" if ids.shape[1] > 1 else "llm_decode"

    def output(self, name: str) -> IoSpec | None:
        return next((o for o in self.outputs if o.name == name), None)

    def input(self, name: str) -> IoSpec | None:
        return next((i for i in self.inputs if i.name == name), None)


@dataclass(frozen=True)
class ParamBlock:
    index: int
    file: str
    chip_mask: int
    size: int


@dataclass(frozen=True)
class ParamEntry:
    block: int
    name: str
    offset: int
    dtype: str
    shape: tuple[int, ...]
    part: Part
    line: int

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * PARAM_DTYPES[self.dtype].itemsize


@dataclass
class PackageMeta:
    info: TextInfo
    memory: TextInfo
    findings: list[Finding] = field(default_factory=list)
    form: str = SIMULATOR_FORM
    name: str | None = None
    layout: str | None = None
    features: list[str] = field(default_factory=list)
    chip_affinity: int | None = None
    dtypes: dict[str, str | None] = field(default_factory=dict)
    prefill_lengths: list[int] | None = None  # None: any length up to max_seq_len (dynamic)
    compatibility: dict[str, Any] = field(default_factory=dict)
    timing_preset: str | None = None
    config: ModelConfig | None = None
    config_max_positions: int | None = None
    device_memory_required: tuple[int, str] | None = None
    reservations: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)  # chiplet -> (DRAM, SRAM)
    blocks: list[ParamBlock] = field(default_factory=list)
    params: list[ParamEntry] = field(default_factory=list)
    submodels: list[SubModelMeta] = field(default_factory=list)

    def submodel_of_type(self, smodel_type: str) -> SubModelMeta | None:
        """The sub-model that is of this type by its input, whatever its label says."""
        return next((s for s in self.submodels if s.shaped_type == smodel_type), None)

    def cpu_fallback_ops(self) -> list[str]:
        """The ops some sub-model declares on the CPU (V11)."""
        return sorted({op for s in self.submodels for op, where in s.ops.items() if where == "cpu"})

    @property
    def max_seq_len(self) -> int | None:
        """The prefill's tokens per lane: the calbin's value rules (M05)."""
        prefill = self.submodel_of_type("llm_prefill")
        if prefill is None or not prefill.inputs or len(prefill.inputs[0].shape) != 2:
            return None
        return prefill.inputs[0].shape[1]

    @property
    def decode_batch(self) -> int | None:
        decode = self.submodel_of_type("llm_decode")
        return decode.batch if decode else None

    def manifest(self) -> dict[str, Any]:
        """The metadata as one JSON-ready dict (what `read_manifest` returns)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "form": self.form,
            "name": self.name,
            "layout": self.layout,
            "features": self.features,
            "chip_affinity": self.chip_affinity,
            "model": None if self.config is None else {k: getattr(self.config, k) for k in HF_CONFIG_KEYS},
            "max_seq_len": self.max_seq_len,
            "decode_batch": self.decode_batch,
            "chiplets": sorted(self.reservations),
            "dtypes": self.dtypes,
            "prefill_lengths": self.prefill_lengths or "dynamic",
            "cpu_fallback_ops": self.cpu_fallback_ops(),
            "compatibility": self.compatibility,
            "timing_preset": self.timing_preset,
            "memory": {
                "device_memory_required": None
                if self.device_memory_required is None
                else {"value": self.device_memory_required[0], "unit": self.device_memory_required[1]},
                "chiplets": {f"chip{c}": {"dram": d, "sram": s} for c, (d, s) in sorted(self.reservations.items())},
            },
            "param_blocks": [{"file": b.file, "chip_mask": hex(b.chip_mask), "size": b.size} for b in self.blocks],
            "submodels": [
                {
                    "name": s.name,
                    "smodel_type": s.smodel_type,
                    "batch": s.batch,
                    "inputs": [vars(io) for io in s.inputs],
                    "outputs": [vars(io) for io in s.outputs],
                    "ops": s.ops,
                }
                for s in self.submodels
            ],
        }


def _read_text(package: Package, name: str, findings: list[Finding]) -> TextInfo:
    if not package.has(name):
        findings.append(Finding("file_missing", "error", name, f"{name} is missing"))
        return TextInfo(name, findings=findings)
    return parse_text(name, package.read(name), findings)


def _bytes(size: tuple[int, str] | None) -> int | None:
    return None if size is None else size[0] * MEMORY_UNITS[size[1]]


def read_meta(package: Package) -> PackageMeta:
    """Parse every metadata file; CalbinError only when the package is not in this format at all.

    A package with package_info.txt is in the simulator's form; one with only model_memory_reserved_info.txt
    is the vendor's own (VENDOR_FORM): its sub-models are the directories holding a sub-model file."""
    if not package.has(PACKAGE_INFO):
        if package.has(LEGACY_MANIFEST):
            raise CalbinError(
                "legacy_manifest",
                f"{LEGACY_MANIFEST} is the simulator's schema 1 format; convert the package with "
                "`python -m npu_sim convert-calbin OLD NEW`",
            )
        if not package.has(MODEL_MEMORY):
            raise CalbinError(
                "package_info_missing", f"neither {PACKAGE_INFO} nor {MODEL_MEMORY}: not a calbin package"
            )
    findings: list[Finding] = []
    vendor = not package.has(PACKAGE_INFO)
    info = TextInfo(PACKAGE_INFO, findings=findings) if vendor else _read_text(package, PACKAGE_INFO, findings)
    memory = _read_text(package, MODEL_MEMORY, findings)
    meta = PackageMeta(info, memory, findings, form=VENDOR_FORM if vendor else SIMULATOR_FORM)
    if vendor:
        meta.name = memory.text("model_name", required=False)
    else:
        version = info.integer("schema_version")
        if version is not None and version != SCHEMA_VERSION:
            info.error(
                "schema_version_unsupported", "schema_version", f"schema_version {version} is not {SCHEMA_VERSION}"
            )
        _read_info(meta)
    dimensions, meta.config_max_positions = _read_config(package, findings)
    _read_memory(meta)
    if vendor:
        names = [n.removesuffix(f"/{SUBMODEL_MEMORY}") for n in package.names() if n.endswith(f"/{SUBMODEL_MEMORY}")]
    else:
        meta.params = _read_param_table(package, findings)
        names = meta.info.words("submodels") or []
    for name in names:
        meta.submodels.append(_read_submodel(package, name, findings))
    if dimensions is not None and meta.max_seq_len is not None:
        try:
            # max_seq_len is the calbin's (the prefill's input), not config.json's (M05).
            meta.config = ModelConfig(**dimensions, max_seq_len=meta.max_seq_len)
        except ValueError as error:
            findings.append(Finding("model_invalid", "error", MODEL_CONFIG, str(error)))
    return meta


def _read_info(meta: PackageMeta) -> None:
    info = meta.info
    meta.name = info.text("name")
    architecture = info.text("architecture")
    if architecture is not None and architecture != "qwen3_moe":
        info.error("architecture_unsupported", "architecture", f"the simulator runs qwen3_moe, not {architecture!r}")
    meta.layout = info.text("layout")
    meta.features = info.words("features") or []
    meta.chip_affinity = info.integer("chip_affinity", required=False, minimum=0)
    meta.dtypes = {
        role: info.text(f"{role}_dtype") for role in ("weight", "activation", "k_cache", "v_cache", "logits")
    }
    lengths = info.words("prefill_lengths")
    if lengths is not None and lengths != ["dynamic"]:
        if all(w.isdigit() and int(w) > 0 for w in lengths):
            meta.prefill_lengths = sorted(int(w) for w in lengths)
        else:
            info.error("field_type", "prefill_lengths", "prefill_lengths is `dynamic` or a list of positive lengths")
    meta.compatibility = {key: info.text(f"compat.{key}") for key in COMPAT_KEYS}
    meta.compatibility["chip"] = info.words("compat.chip")
    meta.timing_preset = info.text("timing_preset", required=False)


def _read_config(package: Package, findings: list[Finding]) -> tuple[dict[str, Any] | None, int | None]:
    """The model dimensions (ModelConfig fields but max_seq_len) and config.json's max_position_embeddings."""
    if not package.has(MODEL_CONFIG):
        findings.append(Finding("file_missing", "error", MODEL_CONFIG, f"{MODEL_CONFIG} is missing"))
        return None, None
    try:
        config = json.loads(package.read(MODEL_CONFIG))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        findings.append(Finding("config_invalid", "error", MODEL_CONFIG, f"not valid JSON: {error}"))
        return None, None
    if not isinstance(config, dict):
        findings.append(Finding("config_invalid", "error", MODEL_CONFIG, "must hold a JSON object"))
        return None, None
    values: dict[str, Any] = {}
    for name, key in HF_CONFIG_KEYS.items():
        value = config.get(key)
        floating = name in ("rope_theta", "rms_eps")
        if isinstance(value, bool) or not isinstance(value, (int, float) if floating else int) or value <= 0:
            kind = "a positive number" if floating else "a positive integer"
            findings.append(Finding("field_type", "error", f"{MODEL_CONFIG}:{key}", f"{key} must be {kind}"))
            continue
        values[name] = value
    max_positions = config.get(HF_MAX_POSITIONS)
    if len(values) != len(HF_CONFIG_KEYS):
        return None, None
    return values, max_positions if isinstance(max_positions, int) else None


def _read_memory(meta: PackageMeta) -> None:
    memory = meta.memory
    meta.device_memory_required = memory.size("device_memory_required")
    chips = memory.integer("chip_num", minimum=1)
    for key in sorted(memory.entries):
        if key.startswith("chip") and key.endswith(".dram_reserved"):
            chiplet = key.removeprefix("chip").removesuffix(".dram_reserved")
            if not chiplet.isdigit():
                memory.error("field_type", key, f"{key}: the chiplet must be a number")
                continue
            dram = _bytes(memory.size(key))
            sram = _bytes(memory.size(f"chip{chiplet}.sram_reserved"))
            meta.reservations[int(chiplet)] = (dram, sram)
    if chips is not None and chips != len(meta.reservations):
        memory.error(
            "chip_num_mismatch", "chip_num", f"chip_num is {chips} but {len(meta.reservations)} chiplets reserve memory"
        )
    count = memory.integer("param_block_num", minimum=1)
    indices = sorted(int(m.group(1)) for key in memory.entries if (m := _BLOCK_FILE.fullmatch(key)))
    if count is not None and count != len(indices):
        memory.error(
            "param_block_num_mismatch",
            "param_block_num",
            f"param_block_num is {count}; {len(indices)} blocks are listed",
        )
    for index in indices:
        prefix = f"param_blk{index}"
        file, mask, size = (
            memory.text(f"{prefix}.file"),
            memory.integer(f"{prefix}.chip_mask", minimum=0),
            memory.integer(f"{prefix}.size", minimum=0),
        )
        if file is not None and mask is not None and size is not None:
            meta.blocks.append(ParamBlock(index, file, mask, size))


def _read_param_table(package: Package, findings: list[Finding]) -> list[ParamEntry]:
    if not package.has(PARAM_TABLE):
        findings.append(Finding("file_missing", "error", PARAM_TABLE, f"{PARAM_TABLE} is missing"))
        return []
    entries = []
    for number, raw in enumerate(package.read(PARAM_TABLE).decode("utf-8", "replace").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        columns = line.split()
        try:
            block, name, offset, dtype, shape, part = columns
            if dtype not in PARAM_DTYPES:
                raise ValueError(f"dtype {dtype!r} is not one of {', '.join(PARAM_DTYPES)}")
            dims = tuple(int(d) for d in shape.strip("[]").split(","))
            entries.append(ParamEntry(int(block), name, int(offset), dtype, dims, Part.parse(part), number))
        except ValueError as error:
            message = f"line {number}: expected `block name offset dtype [shape] part` ({error})"
            findings.append(Finding("param_table_invalid", "error", f"{PARAM_TABLE}:{number}", message, number))
    return entries


def _read_submodel(package: Package, name: str, findings: list[Finding]) -> SubModelMeta:
    info = _read_text(package, f"{name}/{SUBMODEL_MEMORY}", findings)
    sub = SubModelMeta(name, info)
    declared = info.text("submodel_name")
    if declared is not None and declared != name:
        info.error("submodel_name_mismatch", "submodel_name", f"the file in {name}/ names {declared!r}")
    sub.smodel_type = info.text("smodel_type")
    sub.batch = info.integer("batch", minimum=1)
    sub.chip_mask = info.integer("chip_mask", minimum=0)
    for kind, target in (("input", sub.inputs), ("output", sub.outputs)):
        for i in range(info.integer(f"{kind}_num", minimum=1) or 0):
            key = f"{kind}{i}"
            io_name, shape = info.text(f"{key}.name"), info.shape(f"{key}.shape")
            dtype, size = info.text(f"{key}.dtype"), info.integer(f"{key}.size", minimum=0)
            if io_name is not None and shape is not None and dtype is not None and size is not None:
                target.append(IoSpec(key, io_name, shape, dtype, size))
    sub.ops = {key.removeprefix("op."): entry.value for key, entry in info.entries.items() if key.startswith("op.")}
    return sub
