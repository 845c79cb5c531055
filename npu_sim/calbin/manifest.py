"""The calbin manifest (schema version 1) and its validator.

The validator reports the metadata defects the seed found in the current calbin: a memory size in an
impossible unit (A16, V33/V48), a prefill sub-model labelled `llm_decode` (A17, V43), and the gaps
V47 asks about: no schema version, digests that do not match, fields of the wrong JSON type.
"""

import dataclasses
import os
import re
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from npu_sim.calbin.package import CalbinError, Finding, Package, open_package, parse_manifest, unsafe_path_reason
from npu_sim.chips import CALCULET_2C
from npu_sim.dtypes import DTYPE_BYTES
from npu_sim.kv import KV_DTYPES, kv_cache_bytes
from npu_sim.model import ModelConfig, weight_shapes

SCHEMA_VERSION = 1
SMODEL_TYPES = ("llm_prefill", "llm_decode")
COMPAT_RANGES = ("calrt", "driver", "firmware")
DTYPE_ROLES = ("weights", "activations", "logits", "k_cache", "v_cache")
GOLDEN_TENSORS = ("prompt_ids", "decode_input_ids", "prefill_logits", "decode_logits")

# Memory units are binary, as memory sizes conventionally are (JEDEC): 1 MB = 1 MiB = 2**20 bytes.
MEMORY_UNITS = {
    "B": 1,
    "KB": 2**10,
    "KiB": 2**10,
    "MB": 2**20,
    "MiB": 2**20,
    "GB": 2**30,
    "GiB": 2**30,
    "TB": 2**40,
    "TiB": 2**40,
}

TOP_LEVEL_FIELDS = {
    "schema_version": "integer",
    "name": "string",
    "architecture": "string",
    "model": "object",
    "seed": "integer",
    "max_seq_len": "integer",
    "chiplets": "integer",
    "dtypes": "object",
    "submodels": "array",
    "compatibility": "object",
    "memory": "object",
    "weights": "array",
    "goldens": "object",
}

_MODEL_FIELDS = {
    field.name: "number" if field.type is float else "integer"
    for field in dataclasses.fields(ModelConfig)
    if field.name != "max_seq_len"
}

_SHA256 = re.compile(r"[0-9a-f]{64}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _is(value: Any, kind: str) -> bool:
    actual = _json_type(value)
    return actual == kind or (kind == "number" and actual == "integer")


def size_in_bytes(size: dict[str, Any]) -> int:
    """Bytes of a {"value": ..., "unit": ...} size that has passed validation."""
    return int(size["value"]) * MEMORY_UNITS[size["unit"]]


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def config_from_manifest(manifest: dict[str, Any]) -> ModelConfig:
    """The model configuration of a manifest that has passed validation."""
    return ModelConfig(**manifest["model"], max_seq_len=manifest["max_seq_len"])


class _Checker:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def error(self, code: str, field: str, message: str) -> None:
        self.findings.append(Finding(code, "error", field, message))

    def warning(self, code: str, field: str, message: str) -> None:
        self.findings.append(Finding(code, "warning", field, message))

    def get(self, obj: dict[str, Any], key: str, kind: str, path: str, required: bool = True) -> Any:
        """obj[key] if present and of the JSON type `kind`; otherwise record a finding and return None."""
        field = f"{path}.{key}" if path else key
        if key not in obj:
            if required:
                self.error("field_missing", field, f"{field} is required")
            return None
        value = obj[key]
        if not _is(value, kind):
            self.error("field_type", field, f"{field} must be a JSON {kind}, not {_json_type(value)}")
            return None
        return value

    def dtype(self, obj: dict[str, Any], key: str, path: str, allowed: tuple[str, ...] | None = None) -> None:
        value = self.get(obj, key, "string", path)
        names = allowed or tuple(DTYPE_BYTES)
        if value is not None and value not in names:
            self.error("dtype_unknown", f"{path}.{key}", f"unknown dtype {value!r}; known: {', '.join(names)}")

    def shape(self, obj: dict[str, Any], path: str) -> list[int] | None:
        shape = self.get(obj, "shape", "array", path)
        if shape is None:
            return None
        if not all(_is(d, "integer") and d >= 0 for d in shape):
            self.error("field_type", f"{path}.shape", f"{path}.shape must be a list of non-negative integers")
            return None
        return list(shape)


def check_manifest(manifest: dict[str, Any]) -> list[Finding]:
    """Findings about the manifest alone, without reading any other file."""
    c = _Checker()
    if "schema_version" not in manifest:
        c.error("schema_version_missing", "schema_version", "the manifest has no schema_version")
    elif c.get(manifest, "schema_version", "integer", "") not in (None, SCHEMA_VERSION):
        c.error(
            "schema_version_unsupported",
            "schema_version",
            f"schema_version {manifest['schema_version']} is not supported (this validator reads {SCHEMA_VERSION})",
        )
    for key in sorted(set(manifest) - set(TOP_LEVEL_FIELDS)):
        c.warning("unknown_field", key, f"{key} is not part of schema version {SCHEMA_VERSION}")
    values = {key: c.get(manifest, key, kind, "") for key, kind in TOP_LEVEL_FIELDS.items() if key != "schema_version"}

    config = _check_model(c, values["model"], values["max_seq_len"])
    if values["chiplets"] is not None and not 1 <= values["chiplets"] <= CALCULET_2C.chiplets:
        c.error("chiplets_unsupported", "chiplets", f"chiplets must be 1..{CALCULET_2C.chiplets}")
    if values["dtypes"] is not None:
        for role in DTYPE_ROLES:
            c.dtype(values["dtypes"], role, "dtypes", KV_DTYPES if role == "v_cache" else None)
        if values["dtypes"].get("k_cache") not in (None, "bf16"):
            c.error("dtype_unknown", "dtypes.k_cache", "the K cache is BF16")
    decode_batch = _check_submodels(c, values["submodels"])
    _check_compatibility(c, values["compatibility"])
    _check_memory(c, values["memory"], manifest, config, decode_batch)
    if values["weights"] is not None:
        _check_weights(c, values["weights"], config)
    if values["goldens"] is not None:
        _check_goldens(c, values["goldens"], config)
    return c.findings


def _check_model(c: _Checker, model: dict[str, Any] | None, max_seq_len: int | None) -> ModelConfig | None:
    if model is None:
        return None
    fields = {key: c.get(model, key, kind, "model") for key, kind in _MODEL_FIELDS.items()}
    for key in sorted(set(model) - set(_MODEL_FIELDS)):
        c.warning("unknown_field", f"model.{key}", f"model.{key} is not part of schema version {SCHEMA_VERSION}")
    if max_seq_len is None or any(v is None for v in fields.values()):
        return None
    if any(v <= 0 for v in fields.values()) or max_seq_len <= 0:
        c.error("model_invalid", "model", "every model dimension and max_seq_len must be positive")
        return None
    try:
        return ModelConfig(**fields, max_seq_len=max_seq_len)
    except ValueError as error:
        c.error("model_invalid", "model", str(error))
        return None


def _check_submodels(c: _Checker, submodels: list[Any] | None) -> int | None:
    """Check each sub-model; return the decode batch when there is exactly one decode sub-model."""
    if submodels is None:
        return None
    names: set[str] = set()
    types: list[str] = []
    decode_batches = []
    for i, sub in enumerate(submodels):
        path = f"submodels[{i}]"
        if not _is(sub, "object"):
            c.error("field_type", path, f"{path} must be a JSON object")
            continue
        name = c.get(sub, "name", "string", path)
        if name is not None:
            if name in names:
                c.error("submodel_name_duplicate", f"{path}.name", f"two sub-models are named {name!r}")
            names.add(name)
        batch = c.get(sub, "batch", "integer", path)
        if batch is not None and batch < 1:
            c.error("batch_invalid", f"{path}.batch", "batch must be at least 1")
            batch = None
        tokens_per_lane = None
        for io_key in ("inputs", "outputs"):
            specs = c.get(sub, io_key, "array", path) or []
            for j, spec in enumerate(specs):
                spec_path = f"{path}.{io_key}[{j}]"
                if not _is(spec, "object"):
                    c.error("field_type", spec_path, f"{spec_path} must be a JSON object")
                    continue
                c.get(spec, "name", "string", spec_path)
                c.dtype(spec, "dtype", spec_path)
                shape = c.shape(spec, spec_path)
                if io_key == "inputs" and j == 0 and shape:
                    tokens_per_lane = shape[-1]
                    if batch is not None and shape[0] != batch:
                        c.error(
                            "submodel_shape",
                            f"{spec_path}.shape",
                            f"the first input's leading dimension {shape[0]} differs from batch {batch}",
                        )
        smodel_type = c.get(sub, "smodel_type", "string", path)
        if smodel_type is None:
            continue
        if smodel_type not in SMODEL_TYPES:
            c.error("smodel_type_unknown", f"{path}.smodel_type", f"smodel_type must be one of {SMODEL_TYPES}")
            continue
        types.append(smodel_type)
        # More than one token per lane is a prefill; one is a decode (the rule R08 applies at run time).
        shaped_as = None if tokens_per_lane is None else ("llm_prefill" if tokens_per_lane > 1 else "llm_decode")
        if shaped_as and shaped_as != smodel_type:
            c.error(
                "smodel_type_mismatch",
                f"{path}.smodel_type",
                f"sub-model {name!r} takes {tokens_per_lane} tokens per lane, which is {shaped_as}, "
                f"but is labelled {smodel_type}",
            )
        if smodel_type == "llm_decode" and batch is not None:
            decode_batches.append(batch)
    for needed in SMODEL_TYPES:
        if needed not in types:
            c.error("submodel_missing", "submodels", f"no sub-model of type {needed}")
    return decode_batches[0] if len(decode_batches) == 1 else None


def _check_compatibility(c: _Checker, compat: dict[str, Any] | None) -> None:
    if compat is None:
        return
    for key in COMPAT_RANGES:
        spec = c.get(compat, key, "string", "compatibility")
        if spec is None:
            continue
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            c.error("compat_range_invalid", f"compatibility.{key}", f"{spec!r} is not a PEP 440 version range")
    chips = c.get(compat, "chip", "array", "compatibility")
    if chips is None:
        return
    if not chips or not all(_is(chip, "string") for chip in chips):
        c.error("field_type", "compatibility.chip", "compatibility.chip must be a non-empty list of chip names")
        return
    for i, chip in enumerate(chips):
        if chip != CALCULET_2C.name:
            c.warning("chip_unknown", f"compatibility.chip[{i}]", f"the simulator does not know chip {chip!r}")


def _check_memory(
    c: _Checker,
    memory: dict[str, Any] | None,
    manifest: dict[str, Any],
    config: ModelConfig | None,
    decode_batch: int | None,
) -> None:
    if memory is None:
        return
    chip = CALCULET_2C
    limits = {
        "device_memory_required": (chip.dram_bytes, "of DRAM"),
        "dram_per_chiplet": (chip.dram_bytes_per_chiplet, "of DRAM per chiplet"),
        "sram_per_chiplet": (chip.sram_bytes_per_chiplet, "of SRAM per chiplet"),
    }
    for key in sorted(set(memory) - set(limits)):
        c.warning("unknown_field", f"memory.{key}", f"memory.{key} is not part of schema version {SCHEMA_VERSION}")
    required_bytes = None
    for key, (limit, what) in limits.items():
        size = c.get(memory, key, "object", "memory", required=key != "sram_per_chiplet")
        if size is None:
            continue
        path = f"memory.{key}"
        value = c.get(size, "value", "integer", path)
        unit = c.get(size, "unit", "string", path)
        if value is not None and value < 0:
            c.error("field_type", f"{path}.value", f"{path}.value must not be negative")
            continue
        if unit is not None and unit not in MEMORY_UNITS:
            c.error("memory_unit_unknown", f"{path}.unit", f"unknown unit {unit!r}; known: {', '.join(MEMORY_UNITS)}")
            continue
        if value is None or unit is None:
            continue
        n = value * MEMORY_UNITS[unit]
        if n > limit:
            c.error(
                "memory_exceeds_device",
                path,
                f"{value} {unit} is {_human(n)}; {chip.name} has {_human(limit)} {what}",
            )
        if key == "device_memory_required":
            required_bytes = n
    if required_bytes is None or config is None or decode_batch is None:
        return
    weights = manifest.get("weights")
    v_dtype = (manifest.get("dtypes") or {}).get("v_cache", "bf16")
    if not isinstance(weights, list) or v_dtype not in KV_DTYPES:
        return
    needed = kv_cache_bytes(config, config.max_seq_len, decode_batch, v_dtype) + _tensor_bytes(weights)
    if required_bytes < needed:
        c.warning(
            "memory_understated",
            "memory.device_memory_required",
            f"declared {_human(required_bytes)} but weights and KV cache alone need {_human(needed)}",
        )


def _tensor_bytes(entries: list[Any]) -> int:
    total = 0
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        shape, dtype = entry.get("shape"), entry.get("dtype")
        if isinstance(shape, list) and dtype in DTYPE_BYTES and all(_is(d, "integer") for d in shape):
            count = 1
            for d in shape:
                count *= d
            total += count * DTYPE_BYTES[dtype]
    return total


def _check_file_entry(c: _Checker, entry: Any, path: str) -> str | None:
    """Common fields of a weight or golden entry; returns its name."""
    if not _is(entry, "object"):
        c.error("field_type", path, f"{path} must be a JSON object")
        return None
    name = c.get(entry, "name", "string", path)
    file = c.get(entry, "file", "string", path)
    if file is not None and unsafe_path_reason(file):
        c.error("path_unsafe", f"{path}.file", f"{file!r}: {unsafe_path_reason(file)}")
    digest = c.get(entry, "sha256", "string", path)
    if digest is not None and not _SHA256.fullmatch(digest):
        c.error("digest_invalid", f"{path}.sha256", "sha256 must be 64 lowercase hex digits")
    c.dtype(entry, "dtype", path)
    c.shape(entry, path)
    return name


def _check_weights(c: _Checker, weights: list[Any], config: ModelConfig | None) -> None:
    expected = weight_shapes(config) if config else None
    seen = set()
    for i, entry in enumerate(weights):
        path = f"weights[{i}]"
        name = _check_file_entry(c, entry, path)
        if name is None or expected is None:
            continue
        seen.add(name)
        if name not in expected:
            c.error("weight_unexpected", f"{path}.name", f"the model has no weight {name!r}")
        elif entry.get("shape") != list(expected[name]):
            c.error(
                "weight_shape_mismatch",
                f"{path}.shape",
                f"{name} should be {list(expected[name])} for this model, not {entry.get('shape')}",
            )
    if expected is not None:
        missing = sorted(set(expected) - seen)
        if missing:
            c.error("weights_incomplete", "weights", f"missing weights: {', '.join(missing[:5])}")


def _check_goldens(c: _Checker, goldens: dict[str, Any], config: ModelConfig | None) -> None:
    steps = c.get(goldens, "decode_steps", "integer", "goldens")
    if steps is not None and steps < 1:
        c.error("field_type", "goldens.decode_steps", "goldens.decode_steps must be at least 1")
        steps = None
    tensors = c.get(goldens, "tensors", "array", "goldens") or []
    entries = {}
    for i, entry in enumerate(tensors):
        name = _check_file_entry(c, entry, f"goldens.tensors[{i}]")
        if name is not None:
            entries[name] = (i, entry)
    for needed in GOLDEN_TENSORS:
        if needed not in entries:
            c.error("golden_missing", "goldens.tensors", f"no golden tensor named {needed!r}")
    if config is None or steps is None:
        return
    prompt = entries.get("prompt_ids", (0, {}))[1].get("shape")
    prompt_length = prompt[0] if isinstance(prompt, list) and len(prompt) == 1 and _is(prompt[0], "integer") else 0
    expected = {
        "decode_input_ids": ([steps], "s32"),
        "prefill_logits": ([1, config.vocab], "bf16"),
        "decode_logits": ([steps, config.vocab], "bf16"),
    }
    if not 1 <= prompt_length <= config.max_seq_len - steps:
        expected["prompt_ids"] = ([f"1..{config.max_seq_len - steps}"], "s32")
    elif prompt is not None:
        expected["prompt_ids"] = ([prompt_length], "s32")
    for name, (shape, dtype) in expected.items():
        if name not in entries:
            continue
        i, entry = entries[name]
        if entry.get("shape") != shape or entry.get("dtype") != dtype:
            c.error(
                "golden_shape_mismatch",
                f"goldens.tensors[{i}]",
                f"{name} should be {dtype}{shape} for this model, not {entry.get('dtype')}{entry.get('shape')}",
            )


def file_entries(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(JSON path, entry) of every weight and golden file the manifest lists."""
    entries = []
    weights = manifest.get("weights")
    if isinstance(weights, list):
        entries += [(f"weights[{i}]", e) for i, e in enumerate(weights) if isinstance(e, dict)]
    goldens = manifest.get("goldens")
    tensors = goldens.get("tensors") if isinstance(goldens, dict) else None
    if isinstance(tensors, list):
        entries += [(f"goldens.tensors[{i}]", e) for i, e in enumerate(tensors) if isinstance(e, dict)]
    return entries


def check_files(package: Package, manifest: dict[str, Any]) -> list[Finding]:
    """Every listed file exists in the package and matches its sha256."""
    c = _Checker()
    for path, entry in file_entries(manifest):
        file, digest = entry.get("file"), entry.get("sha256")
        if not isinstance(file, str) or unsafe_path_reason(file):
            continue  # reported by check_manifest
        try:
            if not package.has(file):
                c.error("file_missing", f"{path}.file", f"{file} is not in the package")
                continue
            actual = package.sha256(file)
        except CalbinError as error:
            c.error(error.code, f"{path}.file", str(error))
            continue
        if isinstance(digest, str) and actual != digest:
            c.error("digest_mismatch", f"{path}.sha256", f"{file} has sha256 {actual}, the manifest says {digest}")
    return c.findings


def validate(path: str | os.PathLike[str]) -> list[Finding]:
    """Every finding about a package: tar members, manifest fields, files and digests."""
    findings: list[Finding] = []
    try:
        with open_package(path) as package:
            findings += package.problems
            manifest = parse_manifest(package)
            findings += check_manifest(manifest)
            findings += check_files(package, manifest)
    except CalbinError as error:
        findings.append(Finding(error.code, "error", "", str(error)))
    return findings
