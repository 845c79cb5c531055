"""Pipeline parallelism (V32) and a model split across two boards (V36).

The layers are cut into consecutive stages; stage 0 also holds the embedding, the last stage the final
norm and the LM head. Entering a stage's first layer, the activations cross the link from the previous
stage; nothing else does. Within a stage the arithmetic is unchanged, so a float32 link gives the
single-device result bit for bit and a BF16 link rounds the activations once per stage boundary.

- `PipelineParallelModel`: two stages, one per chiplet of one device; the boundary crosses the chiplet
  link (`d2d_bytes`).
- `MultiBoardModel`: two stages, one per board, each running its layers tensor-parallel over its own
  two chiplets; the boundary crosses the board link (`board_link_bytes`), the chiplet links carry the
  tensor-parallel reductions (`d2d_bytes`).
"""

import numpy as np

from npu_sim.dtypes import bfloat16
from npu_sim.model.config import ModelConfig
from npu_sim.model.reference import ReferenceModel
from npu_sim.model.tensor_parallel import LINK_DTYPES, TensorParallelModel

STAGES = 2


def stage_boundaries(layers: int, stages: int = STAGES) -> list[int]:
    """The first layer of every stage after the first: layers split as evenly as they go."""
    if layers < stages:
        raise ValueError(f"{layers} layers cannot be split into {stages} stages")
    return [layers * s // stages for s in range(1, stages)]


def stage_of_layer(layers: int, layer: int, stages: int = STAGES) -> int:
    return sum(1 for boundary in stage_boundaries(layers, stages) if layer >= boundary)


class PipelineParallelModel(ReferenceModel):
    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray], link_dtype: str = "float32") -> None:
        if link_dtype not in LINK_DTYPES:
            raise ValueError(f"link_dtype must be one of {sorted(LINK_DTYPES)}")
        super().__init__(config, weights)
        self.boundaries = stage_boundaries(config.layers)
        self.link_dtype = link_dtype
        self.d2d_bytes = 0

    def _enter_layer(self, layer: int, x: np.ndarray) -> np.ndarray:
        if layer not in self.boundaries:
            return x
        self.d2d_bytes += x.size * LINK_DTYPES[self.link_dtype]
        return x.astype(bfloat16()).astype(np.float32) if self.link_dtype == "bfloat16" else x


class MultiBoardModel(TensorParallelModel):
    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray], link_dtype: str = "float32") -> None:
        super().__init__(config, weights, link_dtype)
        self.boundaries = stage_boundaries(config.layers)
        self.board_link_bytes = 0

    def _enter_layer(self, layer: int, x: np.ndarray) -> np.ndarray:
        if layer not in self.boundaries:
            return x
        self.board_link_bytes += x.size * LINK_DTYPES[self.link_dtype]
        return x.astype(bfloat16()).astype(np.float32) if self.link_dtype == "bfloat16" else x
