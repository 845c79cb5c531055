import numpy as np
import pytest

from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager, kv_cache_bytes
from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights

TINY = PRESETS["tiny"]
FULL = PRESETS["full"]
GIB = 2**30


def test_a08_bf16_kv_at_full_scale():
    total = kv_cache_bytes(FULL, 40960, 1)
    assert total == 48 * 4 * 2 * 128 * 40960 * 2 == 4_026_531_840
    assert total / GIB == 3.75
    assert total / 2 / GIB == 1.875  # two KV heads on each chiplet


def test_s8_v_cache_keeps_k_in_bf16():
    assert kv_cache_bytes(FULL, 40960, 1, "bf16", "s8") == 48 * 4 * 128 * 40960 * (2 + 1)
    assert kv_cache_bytes(FULL, 40960, 8, "bf16", "s8") == 8 * kv_cache_bytes(FULL, 40960, 1, "bf16", "s8")
    with pytest.raises(ValueError):
        kv_cache_bytes(FULL, 40960, 1, "bf16", "f32")


def test_capacity_comes_from_lanes_and_max_seq_len():
    kv = KvManager(TINY, lanes=2)
    assert kv.capacity_tokens == 2 * TINY.max_seq_len
    assert kv.device_bytes() == kv_cache_bytes(TINY, TINY.max_seq_len, 2)


def code_of(call) -> ErrorCode:
    with pytest.raises(CalrtError) as raised:
        call()
    return raised.value.code


def test_allocating_past_capacity_is_an_error():
    kv = KvManager(TINY, lanes=2)
    assert kv.allocate(1, TINY.max_seq_len - 1) == 0
    kv.apply(1)
    assert not kv.can_allocate(1, 2)
    assert code_of(lambda: kv.allocate(1, 2)) == ErrorCode.KV_NO_CAPACITY
    assert kv.allocate(1, 1) == TINY.max_seq_len - 1
    kv.allocate(2, 10)
    assert not kv.can_allocate(3, 1)  # no lane left
    assert code_of(lambda: kv.allocate(3, 1)) == ErrorCode.KV_NO_CAPACITY
    assert code_of(lambda: kv.allocate(4, TINY.max_seq_len + 1)) == ErrorCode.KV_NO_CAPACITY


def test_free_returns_capacity_and_the_lane():
    kv = KvManager(TINY, lanes=2)
    kv.allocate(1, 100)
    kv.allocate(2, 50)
    assert kv.used_tokens == 150
    lane = kv.lane(1)
    kv.free(1)
    assert kv.used_tokens == 50
    assert kv.can_allocate(3, TINY.max_seq_len)
    kv.allocate(3, 5)
    assert kv.lane(3) == lane
    assert code_of(lambda: kv.free(1)) == ErrorCode.KV_SEQUENCE_UNKNOWN
    kv.clear()
    assert kv.used_tokens == 0 and kv.sequences() == []


def test_apply_commits_and_a_failed_apply_rolls_back():
    kv = KvManager(TINY, lanes=1)
    kv.allocate(1, 8)
    assert (kv.length(1), kv.pending(1)) == (0, 8)
    kv.apply(1)
    assert (kv.length(1), kv.pending(1)) == (8, 0)
    kv.allocate(1, 1)
    kv.fail_next_apply([1])
    assert code_of(lambda: kv.apply(1)) == ErrorCode.KV_APPLY_FAILED
    assert (kv.length(1), kv.pending(1)) == (8, 0)
    kv.allocate(1, 1)
    kv.apply(1)
    assert kv.length(1) == 9


def test_shift_drops_tokens_and_moves_the_rest_down():
    weights = init_weights(TINY, 0)
    model = ReferenceModel(TINY, weights)
    kv = KvManager(TINY, lanes=1)
    tokens = np.arange(1, 21)
    kv.allocate(1, len(tokens))
    model.prefill(kv.cache, kv.lane(1), tokens, 0)
    kv.apply(1)
    v_before = [kv.cache.v.lane(layer, 0, 20).copy() for layer in range(TINY.layers)]

    kv.shift(1, discard=6, keep=2)

    assert kv.length(1) == 14
    assert kv.used_tokens == 14
    for layer, before in enumerate(v_before):
        v = kv.cache.v.lane(layer, 0, 14)
        np.testing.assert_array_equal(v[:, :2], before[:, :2])
        np.testing.assert_array_equal(v[:, 2:14], before[:, 8:20])
    # Layer 0 keys depend only on the token and its position: a fresh prefill of the kept tokens at
    # their new positions must give the same keys.
    fresh = KvCache(TINY, 1)
    kept = np.concatenate([tokens[:2], tokens[8:]])
    model.prefill(fresh, 0, kept, 0)
    np.testing.assert_allclose(kv.cache.k.lane(0, 0, 14), fresh.k.lane(0, 0, 14), atol=1e-4)


def test_invalid_shifts_are_refused():
    kv = KvManager(TINY, lanes=1)
    kv.allocate(1, 10)
    assert code_of(lambda: kv.shift(1, 2)) == ErrorCode.KV_SHIFT_INVALID  # tokens in flight
    kv.apply(1)
    assert code_of(lambda: kv.shift(1, 11)) == ErrorCode.KV_SHIFT_INVALID
    assert code_of(lambda: kv.shift(1, 0)) == ErrorCode.KV_SHIFT_INVALID
    assert code_of(lambda: kv.shift(1, 5, keep=6)) == ErrorCode.KV_SHIFT_INVALID
    assert code_of(lambda: kv.shift(2, 1)) == ErrorCode.KV_SEQUENCE_UNKNOWN
    assert kv.length(1) == 10
