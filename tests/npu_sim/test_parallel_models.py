"""S8, expert-parallel, pipeline-parallel and two-board executors against the single-device reference."""

import dataclasses

import numpy as np
import pytest

from npu_sim.client import greedy
from npu_sim.dtypes import to_bf16
from npu_sim.golden import Tolerance, compare
from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights
from npu_sim.model.expert_parallel import ExpertParallelModel
from npu_sim.model.kv_cache import quantize_rows
from npu_sim.model.pipeline_parallel import MultiBoardModel, PipelineParallelModel, stage_boundaries
from npu_sim.model.quantized import S8Model, dequantize_weights, int8_matmul, quantize_weight, quantize_weights
from npu_sim.model.tensor_parallel import TensorParallelModel

CONFIG = dataclasses.replace(PRESETS["tiny"], max_seq_len=128)
STEPS = 64


def run_pair(make, weights=None, k_dtype="bf16", v_dtype="bf16"):
    """Prefill and STEPS greedy steps of the reference; `make(config, weights)` fed the same tokens."""
    weights = weights if weights is not None else init_weights(CONFIG, 11)
    reference, other = ReferenceModel(CONFIG, weights), make(CONFIG, weights)
    kv_ref, kv_other = KvCache(CONFIG, 1), KvCache(CONFIG, 1, k_dtype, v_dtype)
    prompt = np.random.default_rng(11).integers(0, CONFIG.vocab, 12)
    ref_rows = [to_bf16(reference.prefill(kv_ref, 0, prompt, 0))]
    rows = [to_bf16(other.prefill(kv_other, 0, prompt, 0))]
    for step in range(STEPS):
        token, cell = np.array([greedy(ref_rows[-1])]), np.array([len(prompt) + step])
        ref_rows.append(to_bf16(reference.decode(kv_ref, np.array([0]), token, cell)[0]))
        rows.append(to_bf16(other.decode(kv_other, np.array([0]), token, cell)[0]))
    return np.stack(ref_rows), np.stack(rows), other


def bits(rows):
    return rows.view(np.uint16)


def test_int8_matmul_is_exact_integer_arithmetic():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    q, scale = quantize_weight(w)
    xq, x_scale = quantize_rows(x)
    exact = (xq.astype(np.int64) @ q.astype(np.int64)).astype(np.float64) * x_scale[:, None] * scale[None, :]
    np.testing.assert_allclose(int8_matmul(x, q.astype(np.int32), scale), exact, rtol=1e-6)
    assert q.dtype == np.int8 and scale.shape == (32,)
    # Per output channel: the largest weight of each column maps to +-127.
    assert (np.abs(q).max(axis=0) == 127).all()


def test_s8_has_a_real_but_small_error_against_float():
    weights = init_weights(CONFIG, 11)
    stored = quantize_weights(weights)
    reference, rows, model = run_pair(lambda c, w: S8Model(c, stored, chiplets=2), weights, v_dtype="s8")
    report = compare(reference, rows, Tolerance(max_rel=0.05, cosine_min=0.999, top1_min=0.9, topk_min=0.0))
    assert report["passed"], report["failures"]
    assert report["max_abs"] > 0.01  # the rounding is really there
    assert model.d2d_bytes > 0
    # Against its own dequantised weights in float, the difference is the activation and cache rounding.
    dequantised = dequantize_weights(stored)
    assert all(np.abs(dequantised[n] - weights[n]).max() <= np.abs(weights[n]).max() / 127 for n in ("lm_head",))


def test_s8_on_one_chiplet_moves_nothing_across_the_link():
    stored = quantize_weights(init_weights(CONFIG, 11))
    _, _, model = run_pair(lambda c, w: S8Model(c, stored, chiplets=1))
    assert model.d2d_bytes == 0


def test_expert_parallel_equals_the_reference_and_counts_the_all_to_all():
    reference, rows, model = run_pair(ExpertParallelModel)
    report = compare(reference, rows, Tolerance(max_rel=0.01, cosine_min=0.9999, top1_min=0.99))
    assert report["passed"], report["failures"]
    assert model.d2d_bytes > 0
    assert [len(part["layers.0.experts.gate"]) for part in model.local] == [CONFIG.experts // 2] * 2


def test_expert_parallel_with_the_wrong_half_is_caught():
    """The partition matters: swapping the two chiplets' expert sets changes the answer."""
    weights = init_weights(CONFIG, 11)
    reference, _, _ = run_pair(ExpertParallelModel, weights)

    def swapped(config, w):
        model = ExpertParallelModel(config, w)
        model.local.reverse()
        return model

    _, rows, _ = run_pair(swapped, weights)
    assert not compare(reference, rows)["passed"]


def test_pipeline_parallel_with_a_float32_link_is_bit_identical():
    reference, rows, model = run_pair(PipelineParallelModel)
    assert np.array_equal(bits(reference), bits(rows))
    assert stage_boundaries(CONFIG.layers) == [1]
    assert model.d2d_bytes == 4 * CONFIG.hidden * (12 + STEPS)  # one crossing per row


def test_a_bf16_pipeline_link_rounds_but_stays_close():
    reference, rows, _ = run_pair(lambda c, w: PipelineParallelModel(c, w, link_dtype="bfloat16"))
    assert not np.array_equal(bits(reference), bits(rows))
    report = compare(reference, rows, Tolerance(max_rel=None, cosine_min=0.999, top1_min=0.9, topk_min=0.0))
    assert report["passed"], report["failures"]


def test_two_boards_equal_tensor_parallel_and_count_the_board_link():
    _, tensor_parallel, _ = run_pair(TensorParallelModel)
    _, rows, model = run_pair(MultiBoardModel)
    assert np.array_equal(bits(tensor_parallel), bits(rows))
    assert model.board_link_bytes == 4 * CONFIG.hidden * (12 + STEPS)


@pytest.mark.parametrize("layers", [1])
def test_a_pipeline_needs_a_layer_per_stage(layers):
    with pytest.raises(ValueError):
        stage_boundaries(layers)
