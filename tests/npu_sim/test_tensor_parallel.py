import dataclasses

import numpy as np
import pytest

from npu_sim.client import greedy
from npu_sim.dtypes import to_bf16
from npu_sim.golden import Tolerance, compare
from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights
from npu_sim.model.tensor_parallel import TensorParallelModel

# Room for a 16-token prompt and 256 decode steps.
CONFIG = dataclasses.replace(PRESETS["tiny"], max_seq_len=512)
DECODE_STEPS = 256


def run_both(link_dtype: str) -> tuple[np.ndarray, np.ndarray, TensorParallelModel]:
    """Prefill and DECODE_STEPS greedy steps of the reference; the tensor-parallel model is fed the same tokens."""
    weights = init_weights(CONFIG, 7)
    reference, parallel = ReferenceModel(CONFIG, weights), TensorParallelModel(CONFIG, weights, link_dtype)
    kv_ref, kv_tp = KvCache(CONFIG, 1), KvCache(CONFIG, 1)
    prompt = np.random.default_rng(7).integers(0, CONFIG.vocab, 16)
    ref_rows = [to_bf16(reference.prefill(kv_ref, 0, prompt, 0))]
    tp_rows = [to_bf16(parallel.prefill(kv_tp, 0, prompt, 0))]
    for step in range(DECODE_STEPS):
        token, position = np.array([greedy(ref_rows[-1])]), np.array([len(prompt) + step])
        ref_rows.append(to_bf16(reference.decode(kv_ref, np.array([0]), token, position)[0]))
        tp_rows.append(to_bf16(parallel.decode(kv_tp, np.array([0]), token, position)[0]))
    return np.stack(ref_rows), np.stack(tp_rows), parallel


def test_two_chiplets_match_the_reference_over_256_decode_steps():
    reference, parallel, _ = run_both("float32")
    report = compare(reference[1:], parallel[1:], Tolerance(max_rel=0.01, cosine_min=0.9999, top1_min=0.99))
    print(f"max_abs={report['max_abs']} cosine={report['cosine']:.10f} top1={report['top1']} over {DECODE_STEPS} steps")
    assert report["shape"] == [DECODE_STEPS, CONFIG.vocab]
    assert report["passed"], report["failures"]
    assert compare(reference[:1], parallel[:1])["passed"]


def test_a_bf16_link_costs_accuracy_but_stays_close():
    reference, parallel, _ = run_both("bfloat16")
    report = compare(reference, parallel, Tolerance(max_rel=None, cosine_min=0.999, top1_min=0.95, topk_min=0.0))
    assert report["passed"], report["failures"]
    assert report["max_abs"] > 0


def one_decode_d2d_bytes(link_dtype: str, lanes: int) -> int:
    weights = init_weights(CONFIG, 0)
    model = TensorParallelModel(CONFIG, weights, link_dtype)
    kv = KvCache(CONFIG, lanes)
    model.decode(kv, np.arange(lanes), np.arange(lanes) + 1, np.zeros(lanes, dtype=int))
    return model.d2d_bytes


@pytest.mark.parametrize(("link_dtype", "size"), [("float32", 4), ("bfloat16", 2)])
def test_d2d_bytes_count_every_transfer(link_dtype: str, size: int):
    lanes, c = 3, CONFIG
    embedding = lanes * c.hidden
    reductions = c.layers * 2 * (2 * lanes * c.hidden)  # attention and MoE; each chiplet sends its partial
    logits = lanes * c.vocab // 2
    assert one_decode_d2d_bytes(link_dtype, lanes) == size * (embedding + reductions + logits)


def test_each_chiplet_holds_half_the_kv_heads_and_its_q_heads():
    weights = init_weights(CONFIG, 0)
    model = TensorParallelModel(CONFIG, weights)
    half_kv = CONFIG.kv_heads // 2 * CONFIG.head_dim
    half_q = CONFIG.q_heads // 2 * CONFIG.head_dim
    per_chiplet = half_q + 2 * half_kv
    qkv = model.qkv[0]
    assert qkv.shape == (CONFIG.hidden, 2 * per_chiplet)
    chiplet_1 = qkv[:, per_chiplet:]
    assert np.array_equal(chiplet_1[:, :half_q], weights["layers.0.q_proj"][:, half_q:])
    assert np.array_equal(chiplet_1[:, half_q : half_q + half_kv], weights["layers.0.k_proj"][:, half_kv:])
    assert np.array_equal(chiplet_1[:, half_q + half_kv :], weights["layers.0.v_proj"][:, half_kv:])
    half_ffn = CONFIG.expert_ffn // 2
    gate_up = model.gate_up[0]
    assert gate_up.shape == (CONFIG.experts, CONFIG.hidden, 2 * CONFIG.expert_ffn)
    assert np.array_equal(gate_up[3, :, 2 * half_ffn : 3 * half_ffn], weights["layers.0.experts.gate"][3, :, half_ffn:])
    assert np.array_equal(gate_up[3, :, 3 * half_ffn :], weights["layers.0.experts.up"][3, :, half_ffn:])
    down = model.down[0]
    assert down.shape == (CONFIG.experts, 2, CONFIG.expert_ffn // 2, CONFIG.hidden)
