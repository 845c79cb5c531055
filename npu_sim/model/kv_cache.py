"""K and V storage on the device: float32 or S8 cells, and each cell's logical position."""

import numpy as np

from npu_sim.model.config import ModelConfig


class KvCache:
    """K and V of every layer, and the logical position of every cell.

    Each lane holds cells 0..max_seq_len-1; K is stored after RoPE at its cell's position. Which cells
    are valid is the KV manager's business; `pos` starts as the identity (cell i is position i), so a
    cache used without a manager reads as a plain sequence. A KV edit (remove, add, div: V26) changes
    the positions of cells without moving them back into order.
    """

    def __init__(self, config: ModelConfig, lanes: int, k_dtype: str = "bf16", v_dtype: str = "bf16") -> None:
        self.lanes = lanes
        self.k = KvStore(config, lanes, k_dtype)
        self.v = KvStore(config, lanes, v_dtype)
        self.pos = np.tile(np.arange(config.max_seq_len, dtype=np.int64), (lanes, 1))


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row (last axis): x ~= q * scale, scale = max|x| / 127 (1 for an all-zero row)."""
    peak = np.max(np.abs(x), axis=-1)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(x / scale[..., None]), -127, 127).astype(np.int8)
    return q, scale


class KvStore:
    """One of K or V for every layer, [lanes, kv_heads, max_seq_len, head_dim] each.

    "bf16" is kept in float32 (what the reference computes; the dtype sizes device memory). "s8" is
    kept as int8 with a float32 scale per (lane, head, cell): what is read back carries the real
    quantisation error.
    """

    def __init__(self, config: ModelConfig, lanes: int, dtype: str) -> None:
        if dtype not in ("bf16", "s8"):
            raise ValueError("a KV cache is bf16 or s8")
        shape = (lanes, config.kv_heads, config.max_seq_len, config.head_dim)
        self.dtype = dtype
        if dtype == "s8":
            self._q = [np.zeros(shape, dtype=np.int8) for _ in range(config.layers)]
            self._scale = [np.zeros(shape[:-1], dtype=np.float32) for _ in range(config.layers)]
        else:
            self._values = [np.zeros(shape, dtype=np.float32) for _ in range(config.layers)]

    def write(self, layer: int, lanes: np.ndarray, cells: np.ndarray, x: np.ndarray) -> None:
        """Store rows x [rows, kv_heads, head_dim] at (lanes[i], cells[i])."""
        if self.dtype == "s8":
            q, scale = quantize_rows(x)
            self._q[layer][lanes, :, cells] = q
            self._scale[layer][lanes, :, cells] = scale
        else:
            self._values[layer][lanes, :, cells] = x

    def lanes(self, layer: int, lanes: np.ndarray, length: int) -> np.ndarray:
        """Cells 0..length-1 of each listed lane as float32 [len(lanes), kv_heads, length, head_dim]."""
        if self.dtype == "s8":
            return self._q[layer][lanes, :, :length].astype(np.float32) * self._scale[layer][lanes, :, :length, None]
        return self._values[layer][lanes, :, :length]

    def lane(self, layer: int, lane: int, length: int) -> np.ndarray:
        """Cells 0..length-1 of one lane as float32 [kv_heads, length, head_dim]."""
        if self.dtype == "s8":
            return self._q[layer][lane, :, :length].astype(np.float32) * self._scale[layer][lane, :, :length, None]
        return self._values[layer][lane, :, :length]

    def cells(self, layer: int, lane: int, cells: np.ndarray) -> np.ndarray:
        """Listed cells of one lane as float32 [len(cells), kv_heads, head_dim]."""
        if self.dtype == "s8":
            values = self._q[layer][lane][:, cells].astype(np.float32) * self._scale[layer][lane][:, cells, None]
        else:
            values = self._values[layer][lane][:, cells]
        return values.transpose(1, 0, 2)

    def put(self, layer: int, lane: int, cells: np.ndarray, values: np.ndarray) -> None:
        """Overwrite listed cells of one lane with values [len(cells), kv_heads, head_dim]."""
        self.write(layer, np.full(len(cells), lane), np.asarray(cells), values)

    def raw(self, lane: int, cells: np.ndarray) -> list[np.ndarray]:
        """The stored bytes of listed cells of one lane, every layer (an S8 store's values, then its scales)."""
        arrays = [*self._q, *self._scale] if self.dtype == "s8" else self._values
        return [array[lane][:, cells].copy() for array in arrays]

    def put_raw(self, lane: int, cells: np.ndarray, raw: list[np.ndarray]) -> None:
        """Store what `raw` read, as it is, at listed cells of one lane."""
        arrays = [*self._q, *self._scale] if self.dtype == "s8" else self._values
        if len(raw) != len(arrays) or any(r.shape[1:2] != (len(cells),) for r in raw):
            raise ValueError("the stored cells do not fit this cache")
        for array, stored in zip(arrays, raw, strict=True):
            array[lane][:, cells] = stored

    def copy(self, src_lane: int, src_cells: np.ndarray, dst_lane: int, dst_cells: np.ndarray) -> None:
        """Copy stored cells as they are (an S8 cell keeps its bytes and scale), every layer."""
        stores = zip(self._q, self._scale, strict=True) if self.dtype == "s8" else ((v,) for v in self._values)
        for arrays in stores:
            for array in arrays:
                array[dst_lane][:, dst_cells] = array[src_lane][:, src_cells]
