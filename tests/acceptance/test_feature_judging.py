"""A package feature is proven by what it computes (issue 20.3), judged by calculet from what the runner measured:
real packages built with the simulator, run through the real runner, and the tampered ones that must fail."""

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from acceptance import judging
from npu_sim.calbin.build import build_calbin
from npu_sim.calbin.layout import SUBMODEL_MEMORY
from npu_sim.dtypes import bits_to_float32
from npu_sim.runner import run_job
from npu_sim.sampling import SamplingParams, counter_uniforms, device_sample, reference_probabilities
from tests.npu_sim.packages import crushed_s8_package, set_line

S8_THRESHOLDS = {"cosine_min_vs_float": 0.999, "top1_min_vs_float": 0.9, "max_rel_vs_float": 0.05}


def golden_stage(calbin: Path, workdir: Path, probes: list[dict]) -> dict:
    """The golden stage as the registered runner runs it, its files in `workdir`."""
    workdir.mkdir()
    job = {"schema_version": 2, "stage": "golden", "calbin": str(calbin), "probes": probes, "params": {}}
    job["golden_source"] = "package"
    return run_job(job, workdir=workdir)


@pytest.fixture(scope="module")
def s8_package(tmp_path_factory) -> Path:
    return build_calbin(tmp_path_factory.mktemp("s8") / "s8.tar", features=("s8",), decode_batch=1, tar=True)


def s8_judgement(calbin: Path, workdir: Path) -> tuple[dict, judging.Judgement]:
    result = golden_stage(calbin, workdir, [{"name": "s8", "params": S8_THRESHOLDS}])
    golden = judging.reference_golden("package", None, calbin)
    judged = judging.probe_judgements([{"name": "s8", "params": S8_THRESHOLDS}], workdir, calbin, golden)
    return result, judged["vs_float"]


def test_a_correct_s8_package_is_within_the_s8_limits_of_the_float_model(s8_package, tmp_path):
    result, judged = s8_judgement(s8_package, tmp_path / "run")
    assert judged.passed, judged.reason
    assert judged.metrics["cosine"] >= 0.999 and judged.metrics["top1"] >= 0.9
    assert result["verdict"] == "pass"


def test_weights_crushed_to_3_bits_fail_against_the_float_model_though_they_match_their_own_golden(tmp_path):
    crushed = crushed_s8_package(tmp_path / "crushed.tar")
    result, judged = s8_judgement(crushed, tmp_path / "run")
    # What the runner alone sees: the package matches its golden and its own dequantised weights.
    assert result["verdict"] == "pass", result["reason"]
    golden = judging.reference_golden("package", None, crushed)
    assert judging.golden_judgement(result, tmp_path / "run", golden, {}).passed
    assert not judged.passed
    assert judged.reason.startswith("s8: against the float model ")
    assert "cosine" in judged.reason and "< 0.999" in judged.reason and "top1" in judged.reason
    assert [f["code"] for f in judged.findings] == ["float_mismatch"]
    assert judged.metrics["cosine"] < 0.99 and judged.metrics["top1"] < 0.9


def test_a_package_of_another_model_has_no_float_reference(tmp_path):
    other = build_calbin(tmp_path / "seed7.tar", features=("s8",), decode_batch=1, seed=7, tar=True)
    _result, judged = s8_judgement(other, tmp_path / "run")
    assert not judged.passed
    assert "against the float model" in judged.reason


def test_without_the_measured_logits_nothing_is_judged_against_the_float_model(s8_package, tmp_path):
    golden = judging.reference_golden("package", None, s8_package)
    judged = judging.s8_float_judgement(tmp_path, s8_package, golden, S8_THRESHOLDS)
    assert not judged.passed
    assert judged.reason == "s8: the runner wrote no golden-actual.npz: nothing measured to judge"


SAMPLING_PARAMS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 1234, "draws": 50000, "min_p_value": 0.001}
SAMPLING_PROBES = [{"name": "sampling", "params": SAMPLING_PARAMS}]


@pytest.fixture(scope="module")
def sampling_package(tmp_path_factory) -> Path:
    return build_calbin(tmp_path_factory.mktemp("sampling") / "sampling", features=("sampling",), decode_batch=1)


def sampling_judgement(calbin: Path, workdir: Path, golden=None, tamper=None) -> judging.Judgement:
    """The golden stage's sampling probe run for real; `tamper` rewrites the draws it measured first."""
    if not workdir.exists():
        golden_stage(calbin, workdir, SAMPLING_PROBES)
    if tamper is not None:
        path = workdir / judging.MEASURED_DRAWS
        with np.load(path) as npz:
            arrays = {name: npz[name] for name in npz.files}
        np.savez(path, **tamper(arrays, workdir))
    golden = golden or judging.reference_golden("package", None, calbin)
    return judging.probe_judgements(SAMPLING_PROBES, workdir, calbin, golden)["sampling_fit"]


def measured_row(workdir: Path) -> np.ndarray:
    with np.load(workdir / judging.MEASURED_LOGITS) as npz:
        return bits_to_float32(npz["prefill_logits"])[0]


def drawn_with(**changes):
    """The draws of a device whose sampler uses other parameters than the job's."""

    def tamper(arrays, workdir):
        params = SamplingParams(**{"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 1234, **changes})
        drawn = device_sample(measured_row(workdir), params, counter_uniforms(params.seed, np.arange(50000)))
        return {**arrays, "draws": drawn, "repeat": drawn}

    return tamper


def test_the_device_s_draws_follow_the_reference_sampler_and_repeat(sampling_package, tmp_path):
    judged = sampling_judgement(sampling_package, tmp_path / "run")
    assert judged.passed, judged.reason
    assert judged.metrics["draws"] == 50000 and judged.metrics["p_value"] >= 0.001
    assert judged.metrics["outside_support"] == 0


def test_a_package_that_declares_sampling_and_returns_the_argmax_fails(sampling_package, tmp_path):
    """Its metadata declares the feature and the token_ids output; its graph has no sampling op."""
    argmax = Path(shutil.copytree(sampling_package, tmp_path / "argmax"))
    for submodel in ("prefill", "decode"):
        set_line(argmax, f"{submodel}/{SUBMODEL_MEMORY}", "op.topk_sampling", None)
    result = golden_stage(argmax, tmp_path / "run", SAMPLING_PROBES)
    assert result["probes"][0]["findings"] == []  # exercised: the package declares sampling
    judged = sampling_judgement(argmax, tmp_path / "run")
    assert not judged.passed
    assert judged.reason.startswith("sampling: chi-square ")
    assert "p = 0 < 0.001" in judged.reason
    assert "on the golden's request the device sampled" in judged.reason
    assert {f["code"] for f in judged.findings} == {"sampling_mismatch", "draws_not_from_seed"}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"temperature": 1.2}, "< 0.001"),
        ({"temperature": 0.7}, "< 0.001"),
        ({"top_p": 0.8}, "< 0.001"),
        ({"top_p": 1.0}, "draws of tokens the reference sampler never draws"),
        ({"top_k": 20}, "< 0.001"),
    ],
)
def test_a_sampler_with_other_parameters_fails_the_distribution_test(sampling_package, tmp_path, changes, named):
    judged = sampling_judgement(sampling_package, tmp_path / "run", tamper=drawn_with(**changes))
    assert not judged.passed, changes
    assert named in judged.reason


def test_draws_that_do_not_repeat_under_the_same_seed_fail(sampling_package, tmp_path):
    def other_seed(arrays, workdir):
        return {**arrays, "repeat": drawn_with(seed=1235)(arrays, workdir)["draws"]}

    judged = sampling_judgement(sampling_package, tmp_path / "run", tamper=other_seed)
    assert not judged.passed
    assert "drawn again with seed 1234, " in judged.reason and " of 50000 tokens differ" in judged.reason


def host_drawn(arrays, workdir):
    """Draws of the reference distribution from another generator than the job's seed, `repeat` a copy."""
    params = SamplingParams(0.8, 40, 0.95, 1234)
    probabilities, _ = reference_probabilities(measured_row(workdir), params)
    drawn = np.random.default_rng(7).choice(len(probabilities), size=50000, p=probabilities).astype(np.int32)
    return {**arrays, "draws": drawn, "repeat": drawn.copy()}


def test_draws_of_the_right_distribution_from_another_generator_are_not_the_job_s_seed(sampling_package, tmp_path):
    judged = sampling_judgement(sampling_package, tmp_path / "run", tamper=host_drawn)
    assert not judged.passed
    assert judged.metrics["p_value"] >= 0.001  # the distribution test alone would pass them
    assert [f["code"] for f in judged.findings] == ["draws_not_from_seed", "draws_not_from_seed"]
    assert "drawn, " in judged.reason and "drawn again, " in judged.reason
    assert " of 50000 tokens are not the ones seed 1234 gives at their counters (the first at counter " in judged.reason


def test_the_right_draws_with_a_repeat_from_another_seed_name_the_repeat(sampling_package, tmp_path):
    def other_repeat(arrays, workdir):
        return {**arrays, "repeat": drawn_with(seed=99)(arrays, workdir)["draws"]}

    judged = sampling_judgement(sampling_package, tmp_path / "run", tamper=other_repeat)
    assert not judged.passed
    assert [f["code"] for f in judged.findings] == ["draws_not_from_seed", "sampling_mismatch"]
    assert judged.reason.startswith("sampling: drawn again, ")


def test_too_few_draws_or_none_prove_nothing(sampling_package, tmp_path):
    judged = sampling_judgement(
        sampling_package, tmp_path / "run", tamper=lambda arrays, _: {**arrays, "draws": arrays["draws"][:999]}
    )
    assert not judged.passed and "999 draws measured, 50000 token ids in 0..511 asked for" in judged.reason
    (tmp_path / "run" / judging.MEASURED_DRAWS).unlink()
    judged = sampling_judgement(sampling_package, tmp_path / "run")
    assert judged.reason == "sampling: the runner wrote no sampling-draws.npz: no draws measured to judge"


def test_a_golden_without_sampled_tokens_fails(sampling_package, tmp_path):
    golden = judging.reference_golden("package", None, sampling_package)
    judged = sampling_judgement(sampling_package, tmp_path / "run", golden=replace(golden, sampled=None))
    assert not judged.passed
    assert judged.reason == "sampling: the golden (package) holds no sampled tokens to compare"
