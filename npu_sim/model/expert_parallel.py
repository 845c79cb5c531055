"""Expert parallelism over the two chiplets (V32): experts partitioned, tokens dispatched and combined.

Chiplet 0 holds experts 0..E/2-1, chiplet 1 the rest; attention, the router, the embedding and the LM
head are on both. A token (row) belongs to the chiplet that holds its KV lane (lane parity), which runs
its attention. In each MoE layer a token whose chosen experts live on the other chiplet is sent there
once (dispatch), that chiplet runs its experts on the tokens it received, and sends back one partial
sum per token (combine): an all-to-all whose bytes are counted. Each chiplet sums its own experts'
outputs; the owner adds the two partial sums, so the result differs from the single-device reference
only by the order of the additions (and by BF16 rounding on the link when the link carries BF16).
"""

import numpy as np

from npu_sim.dtypes import bfloat16
from npu_sim.model.config import ModelConfig
from npu_sim.model.kv_cache import KvCache
from npu_sim.model.ops import silu
from npu_sim.model.reference import ReferenceModel
from npu_sim.model.tensor_parallel import CHIPLETS, LINK_DTYPES


class ExpertParallelModel(ReferenceModel):
    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray], link_dtype: str = "float32") -> None:
        if config.experts % CHIPLETS:
            raise ValueError("experts must split evenly over two chiplets")
        if link_dtype not in LINK_DTYPES:
            raise ValueError(f"link_dtype must be one of {sorted(LINK_DTYPES)}")
        super().__init__(config, weights)
        self.link_dtype = link_dtype
        self.d2d_bytes = 0
        self.experts_per_chiplet = config.experts // CHIPLETS
        # Each chiplet's own copy of its experts' weights, [E/2, ...] per layer and matrix.
        self.local: list[dict[str, np.ndarray]] = []
        for chiplet in range(CHIPLETS):
            mine = slice(chiplet * self.experts_per_chiplet, (chiplet + 1) * self.experts_per_chiplet)
            self.local.append(
                {
                    f"layers.{i}.experts.{m}": np.ascontiguousarray(weights[f"layers.{i}.experts.{m}"][mine])
                    for i in range(config.layers)
                    for m in ("gate", "up", "down")
                }
            )
        self._owner = np.zeros(0, dtype=np.int64)

    def _forward(
        self, kv: KvCache, lanes: np.ndarray, tokens: np.ndarray, cells: np.ndarray, one_lane: bool
    ) -> np.ndarray:
        self._owner = np.asarray(lanes) % CHIPLETS
        return super()._forward(kv, lanes, tokens, cells, one_lane)

    def _round(self, values: np.ndarray) -> np.ndarray:
        """What arrives across the link: BF16-rounded when the link carries BF16."""
        return values.astype(bfloat16()).astype(np.float32) if self.link_dtype == "bfloat16" else values

    def _moe(self, h: np.ndarray, layer: int) -> np.ndarray:
        p = f"layers.{layer}."
        chosen, gates = self._route(h, layer)
        bf16_link = self.link_dtype == "bfloat16"
        arrived = self._round(h)  # a row as the other chiplet receives it
        partial = np.zeros((CHIPLETS, *h.shape), dtype=np.float32)
        for expert in np.unique(chosen):
            chiplet = int(expert) // self.experts_per_chiplet
            rows, slot = np.nonzero(chosen == expert)
            x = h[rows]
            if bf16_link:
                remote = self._owner[rows] != chiplet
                x[remote] = arrived[rows[remote]]
            weights = self.local[chiplet]
            local = int(expert) - chiplet * self.experts_per_chiplet
            act = silu(x @ weights[p + "experts.gate"][local]) * (x @ weights[p + "experts.up"][local])
            partial[chiplet, rows] += (act @ weights[p + "experts.down"][local]) * gates[rows, slot][:, None]
        # Each row goes once to each other chiplet that holds one of its experts, and one partial sum comes back.
        on = (chosen // self.experts_per_chiplet)[:, :, None] == np.arange(CHIPLETS)
        remote = on.any(axis=1) & (self._owner[:, None] != np.arange(CHIPLETS))  # [rows, chiplet]
        self.d2d_bytes += 2 * int(remote.sum()) * h.shape[1] * LINK_DTYPES[self.link_dtype]
        if bf16_link:
            for chiplet in range(CHIPLETS):
                partial[chiplet, remote[:, chiplet]] = self._round(partial[chiplet, remote[:, chiplet]])
        return partial[0] + partial[1]
