"""The llama.cpp KV edits (V26), sequence min/max (K05) and the S8 cache."""

import numpy as np
import pytest

from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights

TINY = PRESETS["tiny"]


def code_of(call) -> ErrorCode:
    with pytest.raises(CalrtError) as raised:
        call()
    return raised.value.code


def filled(tokens: int, lanes: int = 2, k: str = "bf16", v: str = "bf16") -> tuple[KvManager, ReferenceModel]:
    model = ReferenceModel(TINY, init_weights(TINY, 0))
    kv = KvManager(TINY, lanes, k, v)
    kv.allocate(1, tokens)
    model.prefill(kv.cache, kv.lane(1), np.arange(1, tokens + 1), 0)
    kv.apply(1)
    return kv, model


def fresh_keys(model: ReferenceModel, tokens, positions, k="bf16") -> np.ndarray:
    cache = KvCache(TINY, 1, k)
    cache.pos[0, : len(tokens)] = positions
    model.prefill(cache, 0, np.asarray(tokens), 0)
    return cache.k.lane(0, 0, len(tokens))


def test_remove_leaves_a_gap_and_the_next_token_follows_the_largest_position():
    kv, _ = filled(10)
    assert kv.seq_rm(1, 3, 6) == 3
    assert kv.positions(1).tolist() == [0, 1, 2, 6, 7, 8, 9]
    assert (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (0, 9)
    assert kv.allocate(1, 1) == 7  # the next cell
    assert kv.cache.pos[kv.lane(1), 7] == 10  # at position max + 1


def test_add_and_div_move_positions_and_rerotate_keys():
    kv, model = filled(8)
    tokens = list(range(1, 9))
    kv.seq_add(1, 4, None, 3)
    assert kv.positions(1).tolist() == [0, 1, 2, 3, 7, 8, 9, 10]
    np.testing.assert_allclose(kv.cache.k.lane(0, 0, 8), fresh_keys(model, tokens, kv.positions(1)), atol=1e-4)
    kv.seq_div(1, 0, None, 2)
    assert kv.positions(1).tolist() == [0, 0, 1, 1, 3, 4, 4, 5]
    np.testing.assert_allclose(kv.cache.k.lane(0, 0, 8), fresh_keys(model, tokens, kv.positions(1)), atol=1e-4)


def test_add_below_zero_removes_cells():
    kv, _ = filled(6)
    kv.seq_add(1, 0, 3, -2)
    assert kv.positions(1).tolist() == [0, 3, 4, 5]  # positions 0 and 1 went below zero


def test_copy_and_keep():
    kv, _ = filled(6)
    assert kv.seq_cp(1, 2, 2, 5) == 3
    assert kv.positions(2).tolist() == [2, 3, 4]
    np.testing.assert_array_equal(kv.cache.v.lane(0, kv.lane(2), 3), kv.cache.v.lane(0, kv.lane(1), 6)[:, 2:5])
    kv.seq_keep(2)
    assert kv.sequences() == [2]
    assert code_of(lambda: kv.seq_pos_max(1)) == ErrorCode.KV_SEQUENCE_UNKNOWN


def test_min_and_max():
    kv = KvManager(TINY, 1)
    kv.allocate(1, 4)
    assert (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (-1, -1)  # nothing committed yet
    kv.apply(1)
    assert (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (0, 3)
    kv.seq_rm(1, 0, 2)
    assert (kv.seq_pos_min(1), kv.seq_pos_max(1)) == (2, 3)


def test_invalid_edits_are_refused_and_change_nothing():
    kv, _ = filled(6, lanes=1)
    before = kv.positions(1).tolist()
    assert code_of(lambda: kv.seq_add(1, 0, None, TINY.max_seq_len)) == ErrorCode.KV_SHIFT_INVALID
    assert code_of(lambda: kv.seq_div(1, 0, None, 0)) == ErrorCode.KV_SHIFT_INVALID
    assert code_of(lambda: kv.seq_cp(1, 2)) == ErrorCode.KV_NO_CAPACITY  # no second lane
    kv.allocate(1, 1)
    assert code_of(lambda: kv.seq_rm(1, 0, 2)) == ErrorCode.KV_SHIFT_INVALID  # a token in flight
    assert kv.positions(1).tolist() == before


def test_the_s8_cache_stores_int8_with_a_bounded_error():
    rng = np.random.default_rng(0)
    cache, exact = KvCache(TINY, 1, "s8", "s8"), KvCache(TINY, 1)
    x = rng.standard_normal((5, TINY.kv_heads, TINY.head_dim)).astype(np.float32)
    for store in (cache.v, exact.v):
        store.write(0, np.zeros(5, int), np.arange(5), x)
    read = cache.v.lane(0, 0, 5)
    error = np.abs(read - exact.v.lane(0, 0, 5))
    step = np.abs(x).max(axis=-1).transpose(1, 0)[..., None] / 127
    assert error.max() > 0 and (error <= step / 2 + 1e-7).all()
    kv = KvManager(TINY, 2, "s8", "s8")
    kv.cache.v.write(0, np.zeros(5, int), np.arange(5), x)
    kv.cache.v.copy(0, np.arange(5), 1, np.arange(5))
    np.testing.assert_array_equal(kv.cache.v.lane(0, 1, 5), read)  # a copy keeps the bytes


def test_a_shift_on_an_s8_key_cache_requantises_within_a_step():
    kv, model = filled(12, lanes=1, k="s8", v="s8")
    kv.shift(1, discard=4, keep=2)
    tokens = [1, 2] + list(range(7, 13))
    expected = fresh_keys(model, tokens, kv.positions(1), k="s8")
    np.testing.assert_allclose(kv.cache.k.lane(0, 0, 8), expected, atol=0.1)


@pytest.mark.parametrize(("k", "v"), [("bf16", "bf16"), ("bf16", "s8"), ("s8", "s8")])
def test_a_state_written_reads_back_as_another_sequence_cell_for_cell(k, v):
    kv, _ = filled(6, lanes=2, k=k, v=v)
    kv.seq_rm(1, 2, 4)
    state = kv.state_write(1)
    assert kv.state_read(2, state) == 4
    assert kv.positions(2).tolist() == kv.positions(1).tolist() == [0, 1, 4, 5]
    for layer in range(TINY.layers):
        assert np.array_equal(kv.cache.k.lane(layer, kv.lane(2), 4), kv.cache.k.lane(layer, kv.lane(1), 4))
        assert np.array_equal(kv.cache.v.lane(layer, kv.lane(2), 4), kv.cache.v.lane(layer, kv.lane(1), 4))


def test_a_state_is_refused_into_a_sequence_with_cells_or_from_another_cache():
    kv, _ = filled(4, lanes=2)
    state = kv.state_write(1)
    assert code_of(lambda: kv.state_read(1, state)) == ErrorCode.KV_SHIFT_INVALID
    assert code_of(lambda: kv.state_read(2, b"not a state")) == ErrorCode.KV_SHIFT_INVALID
    s8, _ = filled(4, lanes=2, v="s8")
    assert code_of(lambda: s8.state_read(2, state)) == ErrorCode.KV_SHIFT_INVALID
    assert kv.sequences() == [1] and s8.sequences() == [1]
