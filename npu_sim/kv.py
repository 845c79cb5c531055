"""The KV manager: which sequence owns which lane, and how many of its tokens are committed.

Modelled on the SDK's canAllocate/Allocate/Free/Apply/DoShift/Clear (K07). A sequence gets one lane
of the decode batch; capacity is lanes x max_seq_len tokens. `allocate` reserves positions for the
tokens of the next job, `apply` commits them once the job is done; a failed apply rolls them back and
returns an error code instead of spinning (R05) or aborting (R06).
"""

from dataclasses import dataclass

import numpy as np

from npu_sim.dtypes import DTYPE_BYTES
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.model import KvCache, ModelConfig, rope_shift

KV_DTYPES = ("bf16", "s8")


def kv_cache_bytes(config: ModelConfig, max_seq_len: int, batch: int, v_dtype: str = "bf16") -> int:
    """Device bytes for K and V of every layer: layers * kv_heads * head_dim * seq * batch * (K + V bytes).

    With BF16 for both this is A08's 48*4*2*128*40960*2 at full scale. K stays BF16 with an S8
    V-cache (K08); whether S8 compresses K as well is open (V25).
    """
    if v_dtype not in KV_DTYPES:
        raise ValueError(f"v_dtype must be one of {KV_DTYPES}")
    per_token = config.layers * config.kv_heads * config.head_dim * (DTYPE_BYTES["bf16"] + DTYPE_BYTES[v_dtype])
    return per_token * max_seq_len * batch


@dataclass
class _Sequence:
    lane: int
    length: int = 0  # committed tokens
    pending: int = 0  # allocated for jobs in flight, not yet applied


class KvManager:
    def __init__(self, config: ModelConfig, lanes: int, v_dtype: str = "bf16") -> None:
        self.config = config
        self.lanes = lanes
        self.max_seq_len = config.max_seq_len
        self.v_dtype = v_dtype
        self.cache = KvCache(config, lanes)
        self._sequences: dict[int, _Sequence] = {}
        self._failing_applies: set[int] = set()

    @property
    def capacity_tokens(self) -> int:
        return self.lanes * self.max_seq_len

    @property
    def used_tokens(self) -> int:
        return sum(s.length + s.pending for s in self._sequences.values())

    def device_bytes(self) -> int:
        return kv_cache_bytes(self.config, self.max_seq_len, self.lanes, self.v_dtype)

    def sequences(self) -> list[int]:
        return sorted(self._sequences)

    def length(self, seq_id: int) -> int:
        return self._get(seq_id).length

    def pending(self, seq_id: int) -> int:
        return self._get(seq_id).pending

    def lane(self, seq_id: int) -> int:
        return self._get(seq_id).lane

    def can_allocate(self, seq_id: int, tokens: int) -> bool:
        if tokens < 1:
            return False
        seq = self._sequences.get(seq_id)
        if seq is None:
            return len(self._sequences) < self.lanes and tokens <= self.max_seq_len
        return seq.length + seq.pending + tokens <= self.max_seq_len

    def allocate(self, seq_id: int, tokens: int) -> int:
        """Reserve `tokens` positions for the sequence; return the first of them."""
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
            used_lanes = {s.lane for s in self._sequences.values()}
            seq = _Sequence(lane=min(set(range(self.lanes)) - used_lanes))
            self._sequences[seq_id] = seq
        start = seq.length + seq.pending
        seq.pending += tokens
        return start

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

    def free(self, seq_id: int) -> None:
        self._get(seq_id)
        del self._sequences[seq_id]
        self._failing_applies.discard(seq_id)

    def shift(self, seq_id: int, discard: int, keep: int = 0) -> None:
        """Drop `discard` committed tokens after the first `keep`; later tokens move down.

        The moved keys are re-rotated by -discard so they read as if written at their new
        positions (llama.cpp's seq_rm + seq_add for a context shift).
        """
        seq = self._get(seq_id)
        if seq.pending:
            raise CalrtError(ErrorCode.KV_SHIFT_INVALID, f"sequence {seq_id} has tokens in flight")
        if discard < 1 or keep < 0 or keep + discard > seq.length:
            raise CalrtError(
                ErrorCode.KV_SHIFT_INVALID,
                f"cannot discard {discard} after keeping {keep} of {seq.length} tokens",
            )
        start, end = keep + discard, seq.length
        moved = end - start
        for k, v in zip(self.cache.k, self.cache.v, strict=True):
            k[seq.lane, :, keep : keep + moved] = rope_shift(self.config, k[seq.lane, :, start:end], -discard)
            v[seq.lane, :, keep : keep + moved] = v[seq.lane, :, start:end]
        seq.length -= discard

    def clear(self) -> None:
        self._sequences.clear()
        self._failing_applies.clear()

    def fail_next_apply(self, seq_ids: list[int]) -> None:
        """Fault injection: the next apply of each of these sequences fails."""
        self._failing_applies.update(seq_ids)

    def lanes_positions(self, seq_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Lane and the first pending position of each sequence, for a job about to run."""
        lanes = np.array([self._get(s).lane for s in seq_ids])
        positions = np.array([self._get(s).length for s in seq_ids])
        return lanes, positions

    def _get(self, seq_id: int) -> _Sequence:
        seq = self._sequences.get(seq_id)
        if seq is None:
            raise CalrtError(ErrorCode.KV_SEQUENCE_UNKNOWN, f"sequence {seq_id} has no KV allocation")
        return seq
