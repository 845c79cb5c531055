"""A calbin loaded on the host: its manifest checked, its tensors read, its executor built."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from npu_sim import compat
from npu_sim.calbin import (
    Finding,
    config_from_manifest,
    load_array,
    open_package,
    read_manifest,
    size_in_bytes,
    validate,
)
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.model import ModelConfig, ReferenceModel, weight_shapes
from npu_sim.tensor_parallel import TensorParallelModel


@dataclass(frozen=True)
class SubModel:
    name: str
    smodel_type: str  # "llm_prefill" or "llm_decode"
    batch: int
    tokens_per_lane: int


class Calbin:
    """A package loaded on the host: manifest, sub-models, weights, goldens and the executor."""

    def __init__(
        self, path: Path, manifest: dict[str, Any], weights: dict[str, np.ndarray], goldens: dict[str, np.ndarray]
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.config: ModelConfig = config_from_manifest(manifest)
        self.max_seq_len = self.config.max_seq_len
        self.chiplets: int = manifest["chiplets"]
        self.v_dtype: str = manifest["dtypes"]["v_cache"]
        self.dram_per_chiplet = size_in_bytes(manifest["memory"]["dram_per_chiplet"])
        self.weights = weights
        self.goldens = goldens
        self.submodels = [
            SubModel(s["name"], s["smodel_type"], s["batch"], s["inputs"][0]["shape"][-1])
            for s in manifest["submodels"]
        ]
        self.executor = (
            TensorParallelModel(self.config, weights) if self.chiplets == 2 else ReferenceModel(self.config, weights)
        )

    def get_model_by_name(self, name: str) -> SubModel:
        for submodel in self.submodels:
            if submodel.name == name:
                return submodel
        raise CalrtError(ErrorCode.MODEL_NOT_FOUND, f"no sub-model is named exactly {name!r}")

    def model_of_type(self, smodel_type: str) -> SubModel:
        for submodel in self.submodels:
            if submodel.smodel_type == smodel_type:
                return submodel
        raise CalrtError(ErrorCode.MODEL_NOT_FOUND, f"no sub-model of type {smodel_type}")

    @property
    def decode_lanes(self) -> int:
        return max(s.batch for s in self.submodels if s.smodel_type == "llm_decode")


def validation_error_code(errors: list[Finding]) -> ErrorCode:
    """The runtime code for a package with these error findings."""
    if any(f.code == "digest_mismatch" for f in errors):
        return ErrorCode.CALBIN_DIGEST_MISMATCH
    return ErrorCode.CALBIN_INVALID


def load_calbin(path: str | Path, target: dict[str, str]) -> Calbin:
    """Validate the package, check its compatibility ranges against `target`, read its tensors."""
    errors = [f for f in validate(path) if f.severity == "error"]
    if errors:
        raise CalrtError(validation_error_code(errors), "; ".join(f"{f.field}: {f.message}" for f in errors[:5]))
    manifest = read_manifest(path)
    problems = compat.problems(manifest, target)
    if problems:
        raise CalrtError(problems[0].code, "; ".join(p.message for p in problems))
    config = config_from_manifest(manifest)
    expected = weight_shapes(config)
    try:
        with open_package(path) as package:
            weights = {e["name"]: load_array(package, e["file"]) for e in manifest["weights"]}
            goldens = {e["name"]: load_array(package, e["file"]) for e in manifest["goldens"]["tensors"]}
    except ValueError as error:  # not an .npy file, or one that would need pickle
        raise CalrtError(ErrorCode.CALBIN_INVALID, f"a tensor file cannot be read: {error}") from error
    for name, array in weights.items():
        if array.shape != expected[name] or array.dtype != np.float32:
            raise CalrtError(ErrorCode.CALBIN_INVALID, f"weight {name} is {array.dtype}{list(array.shape)}")
    for entry in manifest["goldens"]["tensors"]:
        array = goldens[entry["name"]]
        stored = np.uint16 if entry["dtype"] == "bf16" else np.int32
        if list(array.shape) != entry["shape"] or array.dtype != stored:
            found = f"{array.dtype}{list(array.shape)}"
            raise CalrtError(ErrorCode.CALBIN_INVALID, f"golden {entry['name']} is {found}")
    return Calbin(Path(path), manifest, weights, goldens)
