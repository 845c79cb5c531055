import numpy as np
import pytest

from npu_sim.dtypes import bf16_to_bits, to_bf16
from npu_sim.golden import HISTOGRAM_EDGES, Tolerance, compare, top_k


def logits(rows: int, width: int = 1024, seed: int = 0) -> np.ndarray:
    return to_bf16(np.random.default_rng(seed).standard_normal((rows, width)) * 3)


def test_identical_tensors():
    e = logits(4)
    report = compare(bf16_to_bits(e), e)
    assert report["passed"]
    assert (report["max_abs"], report["max_rel"], report["cosine"], report["top1"], report["topk"]) == (0, 0, 1, 1, 1)
    assert report["histogram"]["exact"] == e.size and sum(report["histogram"]["counts"]) == 0


def test_metrics_of_a_known_difference():
    e = np.zeros((2, 8), dtype=np.float32)
    e[:, 0] = 1.0
    a = e.copy()
    a[1, 0], a[1, 3] = 0.5, 2.0  # row 1's argmax moves to index 3
    report = compare(e, a, Tolerance(k=2))
    assert report["max_abs"] == 2.0
    assert report["max_rel"] == 2.0
    assert report["cosine"] == pytest.approx(1.5 / np.sqrt(2 * 5.25))
    assert report["top1"] == 0.5
    assert [entry["k"] for entry in report["topk_by_k"]] == [1, 2]
    assert report["histogram"]["counts"][HISTOGRAM_EDGES.index(0.1)] == 1  # 0.5 is in [0.1, 1)
    assert report["histogram"]["counts"][HISTOGRAM_EDGES.index(1.0)] == 1  # 2.0 is in [1, 10)
    assert report["histogram"]["exact"] == 14
    assert not report["passed"]
    assert any(f.startswith("cosine") for f in report["failures"])


def test_cosine_is_accumulated_in_float64():
    # 1 + 1e-4 per element: float32 accumulation of 2**20 terms drifts well past the 1e-6 asked here.
    e = np.ones((1, 2**20), dtype=np.float32)
    a = np.full((1, 2**20), 1.0001, dtype=np.float32)
    assert compare(e, a)["cosine"] == pytest.approx(1.0, abs=1e-9)
    a[0, : 2**19] = 0.0
    assert compare(e, a)["cosine"] == pytest.approx(np.sqrt(0.5), abs=1e-9)


def test_tolerances_decide_the_verdict():
    e = logits(3)
    a = to_bf16(e.astype(np.float32) + 0.01)
    assert compare(e, a, Tolerance(max_abs=0.05, max_rel=None))["passed"]
    failures = compare(e, a, Tolerance(max_abs=0.001, max_rel=1e-6))["failures"]
    assert [f.split()[0] for f in failures] == ["max_abs", "max_rel"]


def test_non_finite_values_fail_and_serialise_as_null():
    e = logits(2)
    a = e.astype(np.float32)
    a[0, 5], a[1, 7] = np.nan, np.inf
    report = compare(e, a)
    assert not report["passed"]
    assert report["non_finite"] == 2
    assert report["histogram"]["nan"] == 1 and report["histogram"]["above"] == 1
    assert report["max_abs"] is None and report["cosine"] is None
    assert report["failures"][0] == "2 non-finite values"


@pytest.mark.parametrize("width", [1024, 1000, 151936])
def test_top_k_matches_a_full_stable_sort(width: int):
    x = logits(3, width, seed=width).astype(np.float32)
    x[0, [10, 500, 900]] = 50.0  # ties at the top: the lower index comes first
    expected = np.argsort(-x, axis=1, kind="stable")[:, :10]
    assert np.array_equal(top_k(x, 10), expected)


def test_per_k_agreement_counts_overlaps():
    e = np.array([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0]], dtype=np.float32)
    a = np.array([[4.0, 5.0, 0.0, 2.0, 1.0, 3.0]], dtype=np.float32)
    by_k = {row["k"]: row["agreement"] for row in compare(e, a, Tolerance(k=4))["topk_by_k"]}
    assert by_k == {1: 0.0, 2: 1.0, 3: 2 / 3, 4: 0.75}


def test_tolerance_fields_are_checked():
    assert Tolerance.from_dict({"cosine_min": 0.99, "k": 3}) == Tolerance(cosine_min=0.99, k=3)
    for bad in ({"cosine": 0.9}, {"k": 2.5}, {"top1_min": "high"}, {"k": 0}):
        with pytest.raises(ValueError):
            Tolerance.from_dict(bad)
