import math

import numpy as np
import pytest

from npu_sim.model import PRESETS, KvCache, ReferenceModel, init_weights
from npu_sim.sampling import (
    SamplingParams,
    chi2_sf,
    chi_square_test,
    counter_uniforms,
    device_sample,
    reference_draw,
    reference_probabilities,
)

TINY = PRESETS["tiny"]
PARAMS = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=1)
DRAWS = 50_000


@pytest.fixture(scope="module")
def logits() -> np.ndarray:
    model = ReferenceModel(TINY, init_weights(TINY, 0))
    return model.prefill(KvCache(TINY, 1), 0, np.arange(1, 17), 0)


def fit(logits, device_params, draws=DRAWS):
    drawn = device_sample(logits, device_params, counter_uniforms(PARAMS.seed, np.arange(draws)))
    probabilities, boundary = reference_probabilities(logits, PARAMS)
    return chi_square_test(drawn, probabilities, boundary)


def test_chi2_survival_matches_closed_forms():
    for x in (0.5, 3.0, 10.0, 40.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)
        assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10)
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)
    assert chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, rel=1e-9)
    assert chi2_sf(0.0, 5) == 1.0


def test_counter_uniforms_are_reproducible_and_uniform():
    a, b = counter_uniforms(7, np.arange(100_000)), counter_uniforms(7, np.arange(100_000))
    assert np.array_equal(a, b) and (a >= 0).all() and (a < 1).all()
    assert counter_uniforms(7, np.array([5]))[0] == a[5]  # any draw can be recomputed alone
    assert not np.array_equal(a, counter_uniforms(8, np.arange(100_000)))
    counts = np.bincount((a * 20).astype(int), minlength=20)
    assert chi_square_test(np.repeat(np.arange(20), counts), np.full(20, 0.05), np.zeros(20, bool)).p_value > 0.001


def test_the_device_follows_the_reference_distribution(logits):
    result = fit(logits, PARAMS)
    assert result.outside_support == 0 and result.p_value > 0.001
    assert result.dof == np.count_nonzero(reference_probabilities(logits, PARAMS)[0]) - 1


@pytest.mark.parametrize(
    "wrong",
    [
        SamplingParams(0.8, 41, 0.95, 1),  # one token too many
        SamplingParams(0.8, 39, 0.95, 1),  # one too few
        SamplingParams(0.88, 40, 0.95, 1),  # temperature 10% high
        SamplingParams(0.8, 40, 0.9, 1),  # a tighter nucleus
    ],
)
def test_a_wrong_top_k_top_p_or_temperature_is_detected(logits, wrong):
    result = fit(logits, wrong)
    assert result.outside_support > 0 or result.p_value < 0.001


def test_greedy_and_the_nucleus(logits):
    greedy = SamplingParams(temperature=0, seed=3)
    assert set(device_sample(logits, greedy, counter_uniforms(3, np.arange(50)))) == {int(np.argmax(logits))}
    probabilities, _ = reference_probabilities(logits, SamplingParams(1.0, 0, 0.5, 0))
    kept = np.sort(probabilities[probabilities > 0])[::-1]
    assert kept.sum() == pytest.approx(1.0) and len(kept) < len(logits)


def test_the_host_draw_and_the_device_draw_agree(logits):
    uniforms = counter_uniforms(1, np.arange(200))
    device = device_sample(logits, PARAMS, uniforms)
    host = [reference_draw(logits, PARAMS, float(u)) for u in uniforms]
    assert np.mean(device == np.array(host)) > 0.99


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -1}, {"top_p": 0}, {"top_p": 1.5}, {"seed": -1}])
def test_parameters_are_checked(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
