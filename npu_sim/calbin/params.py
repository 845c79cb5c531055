"""Parameter blocks: which part of which tensor each chiplet's `param_blk<i>.bin` holds.

Block i belongs to chiplet i (board i // 2, chiplet i % 2 on it) and its chip mask is 1 << i (A07: the
parameters of chip 0 and chip 1 are separated by mask). A tensor is stored whole, or as part `index` of
`count` equal slices along one axis. Where each part goes follows from the layout:

- tp: the embedding on chiplet 0 only (M11); q/k/v, expert gate/up and the LM head split by columns,
  the output projection and expert down by rows (M12); norms and router on both.
- ep: experts split by expert; everything else on both.
- pp: the layers of stage s on chiplet s; the embedding with stage 0, final norm and LM head with stage 1.
- single_chiplet: everything on the chip the package has affinity to.
- multi_board: stage b on board b, tensor-parallel over its two chiplets as tp.
An S8 package stores each quantised tensor's scales (`<name>.scale`, one per output channel) beside it:
split with it by columns, whole on both chiplets when it is split by rows.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_sim.model import ModelConfig, weight_shapes
from npu_sim.model.pipeline_parallel import stage_of_layer
from npu_sim.model.quantized import SCALE_SUFFIX, is_quantized

COLUMN_SPLIT = ("q_proj", "k_proj", "v_proj", "experts.gate", "experts.up", "lm_head")
ROW_SPLIT = ("o_proj", "experts.down")

# Element type of a stored tensor -> numpy dtype (little-endian, as the blocks are written).
PARAM_DTYPES: dict[str, np.dtype[Any]] = {"f32": np.dtype("<f4"), "s8": np.dtype("i1")}


def stored_tensors(config: ModelConfig, weight_dtype: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor a package of this model stores: name -> (shape, dtype)."""
    stored: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, shape in weight_shapes(config).items():
        if weight_dtype == "s8" and is_quantized(name):
            stored[name] = (shape, "s8")
            stored[name + SCALE_SUFFIX] = ((*shape[:-2], shape[-1]), "f32")
        else:
            stored[name] = (shape, "f32")
    return stored


@dataclass(frozen=True)
class Part:
    axis: int | None  # None: the whole tensor
    index: int = 0
    count: int = 1

    def __str__(self) -> str:
        return "-" if self.axis is None else f"{self.axis}:{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> "Part":
        if text == "-":
            return cls(None)
        axis, _, rest = text.partition(":")
        index, _, count = rest.partition("/")
        part = cls(int(axis), int(index), int(count))
        if part.axis is None or part.axis < 0 or part.count < 1 or not 0 <= part.index < part.count:
            raise ValueError(f"part {text!r} is not axis:index/count")
        return part

    def shape_of(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.axis is None:
            return shape
        return tuple(d // self.count if i == self.axis else d for i, d in enumerate(shape))

    def take(self, array: np.ndarray) -> np.ndarray:
        if self.axis is None:
            return array
        size = array.shape[self.axis] // self.count
        return np.take(array, range(self.index * size, (self.index + 1) * size), axis=self.axis)


@dataclass(frozen=True)
class Placement:
    block: int
    name: str
    part: Part


def _tp_axis(name: str, ndim: int) -> int | None:
    """The axis tensor parallelism splits this tensor along, None when both chiplets hold it whole."""
    base = name.removesuffix(SCALE_SUFFIX)
    if base.endswith(COLUMN_SPLIT):
        return ndim - 1
    if base.endswith(ROW_SPLIT) and not name.endswith(SCALE_SUFFIX):
        return ndim - 2
    return None


def _layer_of(name: str) -> int | None:
    return int(name.split(".")[1]) if name.startswith("layers.") else None


def _tensor_parallel(name: str, ndim: int, blocks: tuple[int, int]) -> list[Placement]:
    axis = _tp_axis(name, ndim)
    if axis is None:
        return [Placement(b, name, Part(None)) for b in blocks]
    return [Placement(b, name, Part(axis, i, 2)) for i, b in enumerate(blocks)]


def placements(layout: str, shapes: dict[str, tuple[int, ...]], layers: int, affinity: int = 0) -> list[Placement]:
    """Where every stored tensor goes for this layout, in the order the blocks are written."""
    found: list[Placement] = []
    for name, shape in shapes.items():
        layer = _layer_of(name)
        if layout == "single_chiplet":
            found.append(Placement(affinity, name, Part(None)))
        elif layout in ("tp", "multi_board"):
            board = 0
            if layout == "multi_board":
                board = stage_of_layer(layers, layer) if layer is not None else int(name != "embed_tokens")
            if name == "embed_tokens":
                found.append(Placement(2 * board, name, Part(None)))
            else:
                found += _tensor_parallel(name, len(shape), (2 * board, 2 * board + 1))
        elif layout == "ep":
            if ".experts." in name:
                found += [Placement(c, name, Part(0, c, 2)) for c in (0, 1)]
            else:
                found += [Placement(c, name, Part(None)) for c in (0, 1)]
        elif layout == "pp":
            stage = 0 if name == "embed_tokens" else 1 if layer is None else stage_of_layer(layers, layer)
            found.append(Placement(stage, name, Part(None)))
        else:
            raise ValueError(f"unknown layout {layout!r}")
    return sorted(found, key=lambda p: p.block)


def assemble(name: str, pieces: list[tuple[Part, np.ndarray]]) -> np.ndarray:
    """The whole tensor from its stored parts; replicas of a whole tensor must be identical."""
    whole = [array for part, array in pieces if part.axis is None]
    if whole:
        if any(not np.array_equal(whole[0], other) for other in whole[1:]):
            raise ValueError(f"{name}: the copies in different blocks differ")
        return whole[0]
    ordered = sorted(pieces, key=lambda piece: piece[0].index)
    return np.concatenate([array for _, array in ordered], axis=ordered[0][0].axis)
