import numpy as np

from npu_sim.model import PRESETS, KvCache, ReferenceModel, apply_rope, init_weights, rope_angles, rope_rotate

TINY = PRESETS["tiny"]


def test_weights_depend_only_on_the_seed():
    a, b, c = init_weights(TINY, 3), init_weights(TINY, 3), init_weights(TINY, 4)
    assert all(np.array_equal(a[name], b[name]) for name in a)
    assert not np.array_equal(a["lm_head"], c["lm_head"])
    assert all(w.dtype == np.float32 for w in a.values())


def test_full_preset_is_qwen3_30b_a3b():
    full = PRESETS["full"]
    assert (full.layers, full.hidden, full.q_heads, full.kv_heads, full.head_dim) == (48, 2048, 32, 4, 128)
    assert (full.experts, full.experts_per_token, full.expert_ffn, full.vocab) == (128, 8, 768, 151936)
    assert full.rope_theta == 1e6 and full.max_seq_len == 40960
    assert 30.0e9 < full.parameter_count() < 31.0e9
    assert 3.0e9 < full.active_parameter_count() < 3.5e9


def test_prefill_equals_token_by_token_decode():
    model = ReferenceModel(TINY, init_weights(TINY, 0))
    tokens = np.array([5, 17, 300, 2, 99, 411])
    whole = model.prefill(KvCache(TINY, 1), 0, tokens, 0)
    kv = KvCache(TINY, 1)
    model.prefill(kv, 0, tokens[:1], 0)
    for position in range(1, len(tokens)):
        last = model.decode(kv, np.array([0]), tokens[position : position + 1], np.array([position]))[0]
    np.testing.assert_allclose(last, whole, rtol=1e-4, atol=1e-4)


def test_chunked_prefill_equals_one_prefill():
    model = ReferenceModel(TINY, init_weights(TINY, 0))
    tokens = np.arange(1, 21) * 13 % TINY.vocab
    whole = model.prefill(KvCache(TINY, 1), 0, tokens, 0)
    kv = KvCache(TINY, 1)
    model.prefill(kv, 0, tokens[:12], 0)
    chunked = model.prefill(kv, 0, tokens[12:], 12)
    np.testing.assert_allclose(chunked, whole, rtol=1e-4, atol=1e-4)


def test_decode_lanes_are_independent_and_inactive_lanes_untouched():
    model = ReferenceModel(TINY, init_weights(TINY, 1))
    prompts = {0: [3, 4, 5], 2: [7, 8], 3: [100, 200, 300, 400]}
    batched, alone = KvCache(TINY, 4), {lane: KvCache(TINY, 4) for lane in prompts}
    for lane, prompt in prompts.items():
        model.prefill(batched, lane, np.array(prompt), 0)
        model.prefill(alone[lane], lane, np.array(prompt), 0)
    lane1_before = [batched.k.lane(layer, 1, TINY.max_seq_len).copy() for layer in range(TINY.layers)]
    lanes = np.array(list(prompts))
    positions = np.array([len(p) for p in prompts.values()])
    tokens = np.array([11, 22, 33])
    logits = model.decode(batched, lanes, tokens, positions)
    for row, lane in enumerate(lanes):
        single = model.decode(alone[lane], np.array([lane]), tokens[row : row + 1], positions[row : row + 1])[0]
        np.testing.assert_allclose(logits[row], single, rtol=1e-4, atol=1e-4)
    for layer, before in enumerate(lane1_before):
        assert np.array_equal(batched.k.lane(layer, 1, TINY.max_seq_len), before)


def test_router_renormalises_the_top_k():
    model = ReferenceModel(TINY, init_weights(TINY, 0))
    h = np.random.default_rng(0).standard_normal((10, TINY.hidden)).astype(np.float32)
    chosen, gates = model._route(h, 0)
    logits = h @ model.w["layers.0.router"]
    best = np.sort(np.argsort(-logits, axis=1)[:, : TINY.experts_per_token], axis=1)
    assert np.array_equal(np.sort(chosen, axis=1), best)
    np.testing.assert_allclose(gates.sum(axis=1), 1.0, rtol=1e-6)


def test_experts_outside_the_top_k_do_not_matter():
    weights = init_weights(TINY, 0)
    model = ReferenceModel(TINY, weights)
    h = np.random.default_rng(1).standard_normal((1, TINY.hidden)).astype(np.float32)
    chosen, _ = model._route(h, 0)
    before = model._moe(h, 0)
    unused = next(e for e in range(TINY.experts) if e not in chosen[0])
    weights["layers.0.experts.down"][unused] *= 100
    np.testing.assert_array_equal(model._moe(h, 0), before)
    weights["layers.0.experts.down"][chosen[0, 0]] *= 100
    assert not np.allclose(model._moe(h, 0), before)


def test_rope_shift_moves_keys_to_earlier_positions():
    k = np.random.default_rng(2).standard_normal((5, 4, TINY.head_dim)).astype(np.float32)
    cos, sin = rope_angles(TINY, np.arange(10, 15))
    at_10 = apply_rope(k, cos, sin)
    cos, sin = rope_angles(TINY, np.arange(3, 8))
    at_3 = apply_rope(k, cos, sin)
    shifted = rope_rotate(TINY, at_10, np.full(5, -7))
    np.testing.assert_allclose(shifted, at_3, atol=1e-5)
