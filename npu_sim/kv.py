"""The KV manager: which sequence owns which lane, its cells, and their positions.

Modelled on the SDK's canAllocate/Allocate/Free/Apply/DoShift/Clear (K07). A sequence gets one lane
of the decode batch; capacity is lanes x max_seq_len cells. `allocate` reserves cells for the tokens of
the next job, `apply` commits them once the job is done; a failed apply rolls them back and returns an
error code instead of spinning (R05) or aborting (R06).

The edits llama.cpp asks of a KV cache (V26) work on committed cells by position, as llama.cpp's
`seq_rm / seq_cp / seq_keep / seq_add / seq_div` do: a removed range leaves a gap in the positions,
moved keys are re-rotated to their new positions, and the next token of a sequence goes to the position
after its largest one (`seq_pos_max + 1`, K05).
"""

import io
from dataclasses import dataclass

import numpy as np

from npu_sim.dtypes import DTYPE_BYTES
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.model import KvCache, ModelConfig, rope_rotate

KV_DTYPES = ("bf16", "s8")


def _stores(keys: list[str], name: str) -> int:
    """How many of a state's arrays are K's (`k0`, `k1` ...) or V's."""
    return sum(1 for key in keys if key.startswith(name) and key[len(name) :].isdigit())


def kv_cache_bytes(
    config: ModelConfig, max_seq_len: int, batch: int, k_dtype: str = "bf16", v_dtype: str = "bf16"
) -> int:
    """Device bytes for K and V of every layer: layers * kv_heads * head_dim * seq * batch * (K + V bytes).

    A08's formula: 48*4*2*128*40960*2 at full scale with BF16 K and V. An S8 cache (K08, V25) makes V,
    or K and V, one byte; the per-cell scales an S8 cache also keeps are not part of A08's formula.
    """
    if k_dtype not in KV_DTYPES or v_dtype not in KV_DTYPES:
        raise ValueError(f"K and V dtypes must be in {KV_DTYPES}")
    per_token = config.layers * config.kv_heads * config.head_dim * (DTYPE_BYTES[k_dtype] + DTYPE_BYTES[v_dtype])
    return per_token * max_seq_len * batch


@dataclass
class _Sequence:
    lane: int
    length: int = 0  # committed cells
    pending: int = 0  # cells allocated for jobs in flight, not yet applied


class KvManager:
    def __init__(self, config: ModelConfig, lanes: int, k_dtype: str = "bf16", v_dtype: str = "bf16") -> None:
        self.config = config
        self.lanes = lanes
        self.max_seq_len = config.max_seq_len
        self.k_dtype = k_dtype
        self.v_dtype = v_dtype
        self.cache = KvCache(config, lanes, k_dtype, v_dtype)
        self._sequences: dict[int, _Sequence] = {}
        self._failing_applies: set[int] = set()
        self.owner: object | None = None  # the loaded package it was made for (the device sets it)

    @property
    def capacity_tokens(self) -> int:
        return self.lanes * self.max_seq_len

    @property
    def used_tokens(self) -> int:
        return sum(s.length + s.pending for s in self._sequences.values())

    def device_bytes(self) -> int:
        return kv_cache_bytes(self.config, self.max_seq_len, self.lanes, self.k_dtype, self.v_dtype)

    def sequences(self) -> list[int]:
        return sorted(self._sequences)

    def length(self, seq_id: int) -> int:
        """Committed cells of the sequence."""
        return self._get(seq_id).length

    def pending(self, seq_id: int) -> int:
        return self._get(seq_id).pending

    def lane(self, seq_id: int) -> int:
        return self._get(seq_id).lane

    def positions(self, seq_id: int) -> np.ndarray:
        """Positions of the committed cells, in cell order."""
        seq = self._get(seq_id)
        return self.cache.pos[seq.lane, : seq.length].copy()

    def seq_pos_min(self, seq_id: int) -> int:
        """Smallest committed position, -1 when the sequence has no committed cell (K05)."""
        positions = self.positions(seq_id)
        return int(positions.min()) if len(positions) else -1

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest committed position, -1 when the sequence has no committed cell (K05)."""
        positions = self.positions(seq_id)
        return int(positions.max()) if len(positions) else -1

    def _next_position(self, seq: _Sequence) -> int:
        used = self.cache.pos[seq.lane, : seq.length + seq.pending]
        return int(used.max()) + 1 if len(used) else 0

    def can_allocate(self, seq_id: int, tokens: int) -> bool:
        if tokens < 1:
            return False
        seq = self._sequences.get(seq_id)
        if seq is None:
            return len(self._sequences) < self.lanes and tokens <= self.max_seq_len
        room = seq.length + seq.pending + tokens <= self.max_seq_len
        return room and self._next_position(seq) + tokens <= self.max_seq_len

    def allocate(self, seq_id: int, tokens: int) -> int:
        """Reserve `tokens` cells for the sequence at the positions after its largest; return the first cell."""
        if tokens < 1:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, "allocate needs at least one token")
        if not self.can_allocate(seq_id, tokens):
            raise CalrtError(
                ErrorCode.KV_NO_CAPACITY,
                f"sequence {seq_id} cannot get {tokens} more tokens "
                f"({self.used_tokens}/{self.capacity_tokens} used, {len(self._sequences)}/{self.lanes} lanes)",
            )
        seq = self._sequences.get(seq_id)
        if seq is None:
            seq = self._new_sequence(seq_id)
        start = seq.length + seq.pending
        first_position = self._next_position(seq)
        self.cache.pos[seq.lane, start : start + tokens] = np.arange(first_position, first_position + tokens)
        seq.pending += tokens
        return start

    def _new_sequence(self, seq_id: int) -> _Sequence:
        used_lanes = {s.lane for s in self._sequences.values()}
        seq = _Sequence(lane=min(set(range(self.lanes)) - used_lanes))
        self._sequences[seq_id] = seq
        return seq

    def apply(self, seq_id: int) -> None:
        """Commit the sequence's pending tokens. On failure they are rolled back, never half-kept."""
        seq = self._get(seq_id)
        if seq_id in self._failing_applies:
            self._failing_applies.discard(seq_id)
            rolled_back, seq.pending = seq.pending, 0
            raise CalrtError(
                ErrorCode.KV_APPLY_FAILED,
                f"apply of sequence {seq_id} failed; {rolled_back} pending tokens rolled back",
            )
        seq.length += seq.pending
        seq.pending = 0

    def roll_back(self, seq_id: int, cells: int) -> None:
        """Give back the last `cells` pending cells of the sequence (a cancelled job's, V23); a sequence left
        with no cell at all goes."""
        seq = self._get(seq_id)
        seq.pending -= min(cells, seq.pending)
        if not seq.length and not seq.pending:
            self.free(seq_id)

    def free(self, seq_id: int) -> None:
        self._get(seq_id)
        del self._sequences[seq_id]
        self._failing_applies.discard(seq_id)

    def clear(self) -> None:
        self._sequences.clear()
        self._failing_applies.clear()

    # The llama.cpp KV edits (V26). Each works on committed cells and refuses a sequence with tokens in flight.

    def _editable(self, seq_id: int) -> _Sequence:
        seq = self._get(seq_id)
        if seq.pending:
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"sequence {seq_id} has tokens in flight")
        return seq

    def _selected(self, seq: _Sequence, p0: int, p1: int | None) -> np.ndarray:
        """Committed cells whose position is in [p0, p1); p1 None means to the end."""
        positions = self.cache.pos[seq.lane, : seq.length]
        inside = positions >= p0
        if p1 is not None:
            inside &= positions < p1
        return np.flatnonzero(inside)

    def seq_rm(self, seq_id: int, p0: int = 0, p1: int | None = None) -> int:
        """Remove the cells at positions [p0, p1); later cells move down, keeping their positions. Returns the count."""
        seq = self._editable(seq_id)
        removed = self._selected(seq, p0, p1)
        self._compact(seq, np.setdiff1d(np.arange(seq.length), removed))
        return len(removed)

    def _compact(self, seq: _Sequence, kept: np.ndarray) -> None:
        """Keep only these cells (in order) at the start of the lane."""
        if len(kept) == seq.length:
            return
        target = np.arange(len(kept))
        self.cache.k.copy(seq.lane, kept, seq.lane, target)
        self.cache.v.copy(seq.lane, kept, seq.lane, target)
        self.cache.pos[seq.lane, target] = self.cache.pos[seq.lane, kept]
        seq.length = len(kept)

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int | None = None) -> int:
        """Append copies of src's cells at positions [p0, p1) to dst (given a lane if new). Returns the count."""
        source = self._editable(src)
        cells = self._selected(source, p0, p1)
        target = self._sequences.get(dst)
        if target is not None and target.pending:
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"sequence {dst} has tokens in flight")
        if target is None and len(self._sequences) >= self.lanes:
            raise CalrtError(ErrorCode.KV_NO_CAPACITY, f"no lane left for sequence {dst}")
        if (target.length if target else 0) + len(cells) > self.max_seq_len:
            raise CalrtError(ErrorCode.KV_NO_CAPACITY, f"sequence {dst} has no room for {len(cells)} more cells")
        if target is None:
            target = self._new_sequence(dst)
        placed = np.arange(target.length, target.length + len(cells))
        self.cache.k.copy(source.lane, cells, target.lane, placed)
        self.cache.v.copy(source.lane, cells, target.lane, placed)
        self.cache.pos[target.lane, placed] = self.cache.pos[source.lane, cells]
        target.length += len(cells)
        return len(cells)

    def seq_keep(self, seq_id: int) -> None:
        """Free every other sequence."""
        self._get(seq_id)
        for other in [s for s in self._sequences if s != seq_id]:
            self.free(other)

    def seq_add(self, seq_id: int, p0: int, p1: int | None, delta: int) -> None:
        """Move the cells at positions [p0, p1) by `delta`, re-rotating their keys; those that fall below 0 go."""
        seq = self._editable(seq_id)
        cells = self._selected(seq, p0, p1)
        new = self.cache.pos[seq.lane, cells] + delta
        if len(new) and new.max() >= self.max_seq_len:
            raise CalrtError(
                ErrorCode.KV_SHIFT_INVALID, f"positions would reach {int(new.max())} >= {self.max_seq_len}"
            )
        self._move(seq, cells, new)
        self._compact(seq, np.setdiff1d(np.arange(seq.length), cells[new < 0]))

    def seq_div(self, seq_id: int, p0: int, p1: int | None, divisor: int) -> None:
        """Divide the positions in [p0, p1) by `divisor` (rounding down), re-rotating their keys."""
        if divisor < 1:
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, "the divisor must be at least 1")
        seq = self._editable(seq_id)
        cells = self._selected(seq, p0, p1)
        self._move(seq, cells, self.cache.pos[seq.lane, cells] // divisor)

    def _move(self, seq: _Sequence, cells: np.ndarray, new_positions: np.ndarray) -> None:
        deltas = new_positions - self.cache.pos[seq.lane, cells]
        if not np.any(deltas):
            return
        for layer in range(self.config.layers):
            keys = self.cache.k.cells(layer, seq.lane, cells)
            self.cache.k.put(layer, seq.lane, cells, rope_rotate(self.config, keys, deltas))
        self.cache.pos[seq.lane, cells] = new_positions

    def shift(self, seq_id: int, discard: int, keep: int = 0) -> None:
        """llama.cpp's context shift: drop `discard` positions after the first `keep`, move the rest down.

        That is seq_rm of [start + keep, start + keep + discard) and seq_add of everything after by
        -discard, where start is the sequence's smallest position.
        """
        seq = self._editable(seq_id)
        if discard < 1 or keep < 0 or keep + discard > seq.length:
            raise CalrtError(
                ErrorCode.KV_SHIFT_INVALID,
                f"cannot discard {discard} after keeping {keep} of {seq.length} tokens",
            )
        p0 = self.seq_pos_min(seq_id) + keep
        self.seq_rm(seq_id, p0, p0 + discard)
        self.seq_add(seq_id, p0 + discard, None, -discard)

    def state_write(self, seq_id: int) -> bytes:
        """llama.cpp's state write of one sequence (V26): its committed cells' positions, K and V, as bytes."""
        seq = self._editable(seq_id)
        cells = np.arange(seq.length)
        arrays = {"dtypes": np.array([self.k_dtype, self.v_dtype]), "pos": self.cache.pos[seq.lane, cells]}
        for name, store in (("k", self.cache.k), ("v", self.cache.v)):
            arrays |= {f"{name}{i}": a for i, a in enumerate(store.raw(seq.lane, cells))}
        out = io.BytesIO()
        np.savez(out, **arrays)
        return out.getvalue()

    def state_read(self, seq_id: int, state: bytes) -> int:
        """llama.cpp's state read: the cells a state write gave, restored as sequence `seq_id` (new, or empty),
        keys as they were stored. Returns the cell count; KV_SHIFT_INVALID for a state of another cache."""
        try:
            stored = np.load(io.BytesIO(state), allow_pickle=False)
            dtypes, positions = stored["dtypes"].tolist(), stored["pos"]
            raw = {name: [stored[f"{name}{i}"] for i in range(_stores(stored.files, name))] for name in ("k", "v")}
        except (ValueError, KeyError, OSError) as error:
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"not a KV state of this cache: {error}") from error
        if dtypes != [self.k_dtype, self.v_dtype] or len(positions) > self.max_seq_len:
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"a {dtypes} state of {len(positions)} cells does not fit")
        seq = self._sequences.get(seq_id)
        if seq is not None and (seq.length or seq.pending):
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"sequence {seq_id} is not empty")
        if seq is None and len(self._sequences) >= self.lanes:
            raise CalrtError(ErrorCode.KV_NO_CAPACITY, f"no lane left for sequence {seq_id}")
        if any(
            len(r) != self.config.layers * (2 if d == "s8" else 1) for r, d in zip(raw.values(), dtypes, strict=True)
        ):
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, "not a KV state of this cache: layers differ")
        cells = np.arange(len(positions))
        seq = seq or self._new_sequence(seq_id)
        try:
            self.cache.k.put_raw(seq.lane, cells, raw["k"])
            self.cache.v.put_raw(seq.lane, cells, raw["v"])
        except ValueError as error:
            self.free(seq_id)
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"not a KV state of this cache: {error}") from error
        self.cache.pos[seq.lane, cells] = positions
        seq.length = len(cells)
        return len(cells)

    def fail_next_apply(self, seq_ids: list[int]) -> None:
        """Fault injection: the next apply of each of these sequences fails."""
        self._failing_applies.update(seq_ids)

    def lanes_cells(self, seq_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Lane and first pending cell of each sequence, for a job about to run."""
        lanes = np.array([self._get(s).lane for s in seq_ids])
        cells = np.array([self._get(s).length for s in seq_ids])
        return lanes, cells

    def _get(self, seq_id: int) -> _Sequence:
        seq = self._sequences.get(seq_id)
        if seq is None:
            raise CalrtError(ErrorCode.KV_SEQUENCE_UNKNOWN, f"sequence {seq_id} has no KV allocation")
        return seq
