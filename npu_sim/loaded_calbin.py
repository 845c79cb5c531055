"""A calbin loaded on the host: its metadata checked, its parameter blocks read, its executor built."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npu_sim import compat
from npu_sim.calbin import Finding, PackageMeta, open_package, read_meta, validate
from npu_sim.calbin.goldens import GoldenSet, read_golden
from npu_sim.calbin.layout import GOLDEN, VENDOR_FORM
from npu_sim.calbin.params import PARAM_DTYPES, Part, assemble
from npu_sim.dtypes import to_bf16
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.model import KvCache, ModelConfig, ReferenceModel
from npu_sim.model.expert_parallel import ExpertParallelModel
from npu_sim.model.pipeline_parallel import MultiBoardModel, PipelineParallelModel
from npu_sim.model.quantized import S8Model, dequantize_weights
from npu_sim.model.tensor_parallel import TensorParallelModel
from npu_sim.timing import PackageTiming, package_timing


@dataclass(frozen=True)
class SubModel:
    name: str
    smodel_type: str  # "llm_prefill" or "llm_decode"
    batch: int
    tokens_per_lane: int
    ops: tuple[tuple[str, str], ...]  # (op, "npu" or "cpu") as the package declares them
    samples: bool  # returns token ids (device sampling) besides its logits


class Calbin:
    """A package loaded on the host: metadata, sub-models, weights, goldens and the executor."""

    def __init__(self, path: Path, meta: PackageMeta, stored: dict[str, np.ndarray], goldens: GoldenSet) -> None:
        assert meta.config is not None and meta.layout is not None and meta.name is not None
        self.path = path
        self.meta = meta
        self.name: str = meta.name
        self.config: ModelConfig = meta.config
        self.max_seq_len = self.config.max_seq_len
        self.layout: str = meta.layout
        self.features = frozenset(meta.features) | {meta.layout}
        self.chiplets: list[int] = sorted(meta.reservations)  # board * 2 + chiplet
        self.k_dtype = meta.dtypes["k_cache"] or "bf16"
        self.v_dtype = meta.dtypes["v_cache"] or "bf16"
        self.weight_dtype = meta.dtypes["weight"] or "f32"
        self.prefill_lengths = meta.prefill_lengths
        self.timing_preset = meta.timing_preset
        self.reservations = {c: (d or 0, s or 0) for c, (d, s) in meta.reservations.items()}
        self.param_bytes = sum(b.size for b in meta.blocks)
        self.stored = stored
        # The float weights the package stands for (an S8 package's integers times their scales).
        self.weights = dequantize_weights(stored) if self.weight_dtype == "s8" else stored
        self.goldens = goldens
        self.submodels = [
            SubModel(
                s.name,
                s.smodel_type or "",
                s.batch or 1,
                s.inputs[0].shape[1],
                tuple(s.ops.items()),
                s.output("token_ids") is not None,
            )
            for s in meta.submodels
        ]
        self.timing: PackageTiming = package_timing(self)

    @property
    def boards(self) -> int:
        return max(self.chiplets) // 2 + 1

    def declares(self, feature: str) -> bool:
        """Whether the package declares this feature or layout."""
        return feature in self.features

    def new_executor(self) -> ReferenceModel:
        """The numerics of this package on its layout (each device configuring it gets its own)."""
        if self.weight_dtype == "s8":
            return S8Model(self.config, self.stored, chiplets=len(self.chiplets))
        executors = {
            "tp": TensorParallelModel,
            "ep": ExpertParallelModel,
            "pp": PipelineParallelModel,
            "multi_board": MultiBoardModel,
        }
        if self.layout in executors:
            return executors[self.layout](self.config, self.weights)
        return ReferenceModel(self.config, self.weights)

    def reference(self) -> ReferenceModel:
        """The single-device reference of this package's numerics (its S8 integer path when it has one)."""
        if self.weight_dtype == "s8":
            return S8Model(self.config, self.stored, chiplets=1)
        return ReferenceModel(self.config, self.weights)

    def reference_logits(self, prompt: list[int], tokens: list[int]) -> np.ndarray:
        """The prompt, then each of `tokens` but the last fed back, alone on the reference: BF16 rows."""
        model = self.reference()
        kv = KvCache(self.config, 1, self.k_dtype, self.v_dtype)
        rows = [model.prefill(kv, 0, np.array(prompt), 0)]
        for step, token in enumerate(tokens[:-1]):
            rows.append(model.decode(kv, np.array([0]), np.array([token]), np.array([len(prompt) + step]))[0])
        return to_bf16(np.stack(rows))

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
        return self.model_of_type("llm_decode").batch

    def read_golden(self) -> GoldenSet:
        """The package's goldens as the SDK reads them back (I11): from the package file, again."""
        with open_package(self.path) as package:
            return read_golden(package.read(GOLDEN), "package")


VENDOR_FORM_UNLOADABLE = (
    "the package is in the vendor's own form (no package_info.txt or param_table.txt): the simulator cannot tell "
    "which tensor lies where in its parameter blocks, so it cannot run it; only a board runs the vendor's package"
)


def validation_error_code(errors: list[Finding]) -> ErrorCode:
    """The runtime code for a package with these error findings."""
    if any(f.code == "digest_mismatch" for f in errors):
        return ErrorCode.CALBIN_DIGEST_MISMATCH
    return ErrorCode.CALBIN_INVALID


def load_calbin(path: str | Path, target: dict[str, str], findings: list[Finding] | None = None) -> Calbin:
    """Validate the package, check its compatibility ranges against `target`, read its tensors. `findings`:
    the package's validation when the caller has just made it (a runner job validates, then loads)."""
    if findings is None:
        findings = validate(path)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise CalrtError(validation_error_code(errors), "; ".join(f"{f.field}: {f.message}" for f in errors[:5]))
    with open_package(path) as package:
        meta = read_meta(package)
        if meta.form == VENDOR_FORM:
            raise CalrtError(ErrorCode.CALBIN_INVALID, VENDOR_FORM_UNLOADABLE)
        problems = compat.problems(meta.manifest(), target)
        if problems:
            raise CalrtError(problems[0].code, "; ".join(p.message for p in problems))
        blocks = {b.index: package.read(b.file) for b in meta.blocks}
        goldens = read_golden(package.read(GOLDEN), "package")
    pieces: dict[str, list[tuple[Part, np.ndarray]]] = {}
    for entry in meta.params:
        dtype = PARAM_DTYPES[entry.dtype]
        count = entry.nbytes // dtype.itemsize
        array = np.frombuffer(blocks[entry.block], dtype=dtype, count=count, offset=entry.offset).reshape(entry.shape)
        pieces.setdefault(entry.name, []).append((entry.part, array))
    try:
        stored = {name: np.array(assemble(name, parts)) for name, parts in pieces.items()}
    except ValueError as error:
        raise CalrtError(ErrorCode.CALBIN_INVALID, str(error)) from error
    return Calbin(Path(path), meta, stored, goldens)
