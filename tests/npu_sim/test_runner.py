import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from npu_sim import loaded_calbin
from npu_sim.calbin import build_calbin, validate
from npu_sim.errors import ErrorCode
from npu_sim.protocol import context
from npu_sim.runner import JobError, run_job
from npu_sim.stages import integration
from npu_sim.timing import TimingModel
from tests.npu_sim.packages import change_golden


def job(stage: str, calbin: Path, params: dict | None = None, target: dict | None = None) -> dict:
    return {
        "schema_version": 1,
        "stage": stage,
        "calbin": str(calbin),
        "params": params or {},
        "target": target or {"name": "simulator", "calrt": "0.7.6", "chip": "calculet-2c"},
    }


def failed_checks(result: dict) -> list[str]:
    return [check["name"] for check in result["checks"] if not check["passed"]]


def with_wrong_goldens(path: Path, tmp: Path) -> Path:
    """A copy whose decode goldens are off by 40 BF16 steps in every logit, digests updated."""
    copy = Path(shutil.copytree(path, tmp / "wrong-goldens"))

    def shift(arrays):
        arrays["decode_logits"] = arrays["decode_logits"] + np.uint16(40)

    change_golden(copy, shift)
    return copy


def test_result_shape_and_progress(built_calbin_tar: Path):
    progress: list[tuple[float, str]] = []
    result = run_job(job("runner", built_calbin_tar), progress=lambda p, text: progress.append((p, text)))
    assert set(result) == {"schema_version", "stage", "verdict", "metrics", "checks", "log_excerpt", "produced_files"}
    assert (result["schema_version"], result["stage"], result["verdict"]) == (1, "runner", "pass")
    assert all(set(check) == {"name", "passed", "detail"} for check in result["checks"])
    assert "PASS prefill_and_decode" in result["log_excerpt"]
    assert result["produced_files"] == []
    json.dumps(result, allow_nan=False)
    percents = [p for p, _ in progress]
    assert percents[0] == 0 and percents[-1] == 100 and percents == sorted(percents)
    assert len(result["metrics"]["generated_tokens"]) == 5


def test_golden_passes_with_metrics_for_plots(built_calbin: Path, tmp_path: Path):
    result = run_job(job("golden", built_calbin), workdir=tmp_path)
    assert result["verdict"] == "pass", failed_checks(result)
    decode = result["metrics"]["tensors"]["decode_logits"]
    assert decode["shape"] == [16, 512]
    assert decode["cosine"] >= 0.9999 and decode["top1"] >= 0.99
    assert len(decode["histogram"]["edges"]) == len(decode["histogram"]["counts"]) + 1
    assert [row["k"] for row in decode["topk_by_k"]] == [1, 2, 3, 4, 5]
    assert decode["tolerance"]["cosine_min"] == 0.9999
    assert result["produced_files"] == ["golden-actual.npz"]
    assert np.load(tmp_path / "golden-actual.npz")["decode_logits"].shape == (16, 512)


def test_golden_fails_on_wrong_goldens_and_honours_tolerances(built_calbin: Path, tmp_path: Path):
    wrong = with_wrong_goldens(built_calbin, tmp_path)
    result = run_job(job("golden", wrong))
    assert result["verdict"] == "fail"
    assert failed_checks(result) == ["golden:decode_logits"]
    loose = {"decode_logits": {"max_rel": None, "cosine_min": 0.0, "top1_min": 0.0, "topk_min": 0.0}}
    assert run_job(job("golden", wrong, {"tolerances": loose}))["verdict"] == "pass"


def test_failure_stage_checks_every_fault_kind(built_calbin: Path):
    result = run_job(job("failure", built_calbin))
    assert result["verdict"] == "pass", failed_checks(result)
    scenarios = result["metrics"]["scenarios"]
    assert len(scenarios) == 8 and all(s["recovered"] for s in scenarios)
    corrupted = next(s for s in scenarios if s["fault"] == "corrupted_output")
    assert corrupted["produced_code"] == 0 and corrupted["corruption_detected"]


def test_failure_stage_fails_when_the_code_is_not_the_expected_one(built_calbin: Path):
    scenarios = [
        {"fault": "busy", "expect_code": int(ErrorCode.BUSY)},
        {"fault": "core_exception", "expect_code": int(ErrorCode.TIMEOUT), "at_step": 2},
    ]
    result = run_job(job("failure", built_calbin, {"scenarios": scenarios}))
    assert result["verdict"] == "fail"
    assert failed_checks(result) == ["scenario 1: core_exception"]
    assert "produced CORE_EXCEPTION (21), expected TIMEOUT (18)" in result["checks"][-1]["detail"]
    assert result["metrics"]["scenarios"][1]["recovered"]


def test_integration_interleaves_and_empties_the_kv(built_calbin: Path):
    result = run_job(job("integration", built_calbin, {"sequences": 5, "max_new_tokens": 6}))
    assert result["verdict"] == "pass", failed_checks(result)
    assert result["metrics"]["max_active"] > 1 and result["metrics"]["prefills_during_decode"] > 0


def test_integration_fails_on_a_requested_fault_and_still_frees_the_kv(built_calbin: Path):
    params = {"sequences": 4, "max_new_tokens": 5, "fault": {"fault": "core_exception", "at_step": 3}}
    result = run_job(job("integration", built_calbin, params))
    assert result["verdict"] == "fail"
    assert failed_checks(result) == ["all_sequences_completed"]
    assert result["metrics"]["recoveries"] == ["reset core 0.0"]


def test_integration_serves_the_current_decode_batch_1_package_one_sequence_at_a_time(tmp_path: Path):
    """V42: the current package is decode batch 1 (M06); its one lane cannot overlap sequences, and need not."""
    single_lane = build_calbin(tmp_path / "b1", decode_batch=1, decode_steps=2)
    result = run_job(job("integration", single_lane, {"sequences": 3, "max_new_tokens": 3}))
    assert result["verdict"] == "pass", failed_checks(result)
    assert result["metrics"]["max_active"] == 1


def test_a_batched_package_served_one_at_a_time_fails_the_overlap(built_calbin: Path, monkeypatch):
    serve = integration.serve
    monkeypatch.setattr(integration, "serve", lambda *args, **kwargs: serve(*args, **{**kwargs, "concurrency": 1}))
    result = run_job(job("integration", built_calbin, {"sequences": 4, "max_new_tokens": 4}))
    assert failed_checks(result) == ["sequences_overlapped"]


def test_soak_measures_ttft_at_the_first_token(built_calbin: Path, tmp_path: Path):
    params = {"requests": 6, "concurrency": 3, "prompt_tokens": 8, "output_tokens": 6}
    result = run_job(job("soak", built_calbin, params), workdir=tmp_path)
    assert result["verdict"] == "pass", failed_checks(result)
    m = result["metrics"]
    assert (m["completed"], m["error_count"]) == (6, 0)
    assert m["ttft_ms"]["p50"] <= m["ttft_ms"]["p95"] <= m["ttft_ms"]["p99"]
    # The third request waits for two other prefills before its own: queueing is part of its TTFT.
    one_prefill = TimingModel().prefill_ms(8)
    assert m["ttft_ms"]["p50"] > 0.99 * one_prefill
    assert m["ttft_ms"]["p99"] > 2 * one_prefill
    assert m["decode_tokens_per_s"]["count"] == 6
    assert [row["context"] for row in m["context_rows"]][-1] == 40960
    assert result["produced_files"] == ["soak-requests.jsonl"]
    requests = [json.loads(line) for line in (tmp_path / "soak-requests.jsonl").read_text().splitlines()]
    assert [r["request"] for r in requests] == [1, 2, 3, 4, 5, 6]
    assert all(len(r["token_ms"]) == params["output_tokens"] and r["error"] is None for r in requests)
    # The runner's rate is the one its own timings give.
    rates = sorted((len(r["token_ms"]) - 1) * 1000 / (r["token_ms"][-1] - r["token_ms"][0]) for r in requests)
    assert m["decode_tokens_per_s"]["p50"] == pytest.approx((rates[2] + rates[3]) / 2, rel=1e-3)
    assert m["duration_ms"] == pytest.approx(max(r["token_ms"][-1] for r in requests), abs=0.01)


def test_soak_fails_below_the_required_rate_or_on_a_fault(built_calbin: Path):
    params = {"requests": 3, "concurrency": 3, "prompt_tokens": 4, "output_tokens": 4, "min_decode_tokens_per_s": 1e6}
    slow = run_job(job("soak", built_calbin, params))
    assert failed_checks(slow) == ["min_decode_tokens_per_s"]
    params = {"requests": 4, "concurrency": 2, "prompt_tokens": 4, "output_tokens": 4, "fault": {"fault": "busy"}}
    faulty = run_job(job("soak", built_calbin, params))
    assert failed_checks(faulty) == ["no_errors"]
    short = run_job(job("soak", built_calbin, {**params, "fault": None, "min_duration_s": 3600}))
    assert failed_checks(short) == ["min_duration_s"]
    assert faulty["metrics"]["errors"] == {"BUSY": 1}


def test_the_soak_checks_a_sample_of_its_responses_against_the_golden(built_calbin: Path, tmp_path: Path):
    params = {"requests": 16, "concurrency": 4, "prompt_tokens": 8, "output_tokens": 6, "golden_samples": 4}
    result = run_job(job("soak", built_calbin, params), workdir=tmp_path)
    assert result["verdict"] == "pass", failed_checks(result)
    # The seed picks which requests are the golden's: the same ones on every run.
    picked = [sample["request"] for sample in result["metrics"]["golden_samples"]]
    assert picked == [s["request"] for s in run_job(job("soak", built_calbin, params))["metrics"]["golden_samples"]]
    assert len(picked) == 4
    with np.load(tmp_path / "soak-golden-actual.npz") as measured:
        assert measured["request_ids"].tolist() == picked
        assert measured["prefill_logits"].shape[0] == measured["decode_logits"].shape[0] == 4


def test_corrupted_output_under_load_fails_the_soak_only_when_it_checks_the_golden(built_calbin: Path):
    """Silent corruption from the 20th device call on: no error code, so only the golden sample sees it."""
    fault = {"fault": "corrupted_output", "at_step": 20, "count": 100_000}
    params = {"requests": 16, "concurrency": 4, "prompt_tokens": 8, "output_tokens": 6, "fault": fault}
    assert run_job(job("soak", built_calbin, params))["verdict"] == "pass"  # what the soak let through
    checked = run_job(job("soak", built_calbin, {**params, "golden_samples": 4}))
    assert failed_checks(checked) == ["golden_under_load"]
    detail = next(c["detail"] for c in checked["checks"] if c["name"] == "golden_under_load")
    assert "decode_logits" in detail


def test_health_passes_and_fails(built_calbin: Path, tmp_path: Path):
    assert run_job(job("health", built_calbin))["verdict"] == "pass"
    result = run_job(job("health", with_wrong_goldens(built_calbin, tmp_path)))
    assert failed_checks(result) == ["golden:decode_logits"]


def test_an_incompatible_target_fails_with_a_version_code(built_calbin: Path):
    target = {"name": "next", "calrt": "0.8.0", "driver": "2.3.0", "firmware": "1.8.0", "chip": "calculet-2c"}
    result = run_job(job("runner", built_calbin, target=target))
    assert result["verdict"] == "fail"
    assert failed_checks(result) == ["compatibility"]
    assert "calrt 0.8.0 is outside" in result["checks"][-1]["detail"]
    assert (result["metrics"]["error_code"], result["metrics"]["error_name"]) == (1, "CALRT_VERSION_INCOMPATIBLE")


def test_an_invalid_package_fails_its_validation_check(built_calbin: Path, tmp_path: Path):
    copy = Path(shutil.copytree(built_calbin, tmp_path / "bad"))
    (copy / "param_blk1.bin").write_bytes(b"tampered")
    result = run_job(job("health", copy))
    assert failed_checks(result) == ["calbin_valid"]
    assert result["metrics"]["error_code"] == int(ErrorCode.CALBIN_DIGEST_MISMATCH)


def test_a_job_validates_its_package_once_and_loads_it_on_that_validation(
    built_calbin: Path, monkeypatch: pytest.MonkeyPatch
):
    # The job's check and its loading read the same files: validating twice doubled a stage's reading of them.
    validated: list[str] = []

    def counted(path):
        validated.append(str(path))
        return validate(path)

    monkeypatch.setattr(context, "validate", counted)
    monkeypatch.setattr(loaded_calbin, "validate", counted)
    result = run_job(job("golden", built_calbin))
    assert result["verdict"] == "pass", failed_checks(result)
    assert validated == [str(built_calbin)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: j.update(schema_version=3), "schema_version must be one of 1, 2"),
        (lambda j: j.update(stage="deploy"), "stage must be one of"),
        (lambda j: j.update(calbin="/no/such/calbin"), "calbin: no such file or directory"),
        (lambda j: j.update(params={"requests": "10"}), "params.requests must be a JSON integer"),
        (lambda j: j.update(params={"requests": True}), "params.requests must be a JSON integer"),
        (lambda j: j.update(params={"concurrency": 0}), "params.concurrency must be at least 1"),
        (lambda j: j.update(params={"reqests": 10}), "unknown parameter(s) for stage soak: reqests"),
        (lambda j: j.update(params={"fault": {"fault": "gremlins"}}), "params.fault.fault must be one of"),
        (lambda j: j.update(params={"prompt_tokens": 250, "output_tokens": 10}), "must be at most 256"),
        (lambda j: j.update(target={"calrt": 0.76}), "target.calrt must be a string"),
    ],
)
def test_broken_jobs_raise_a_job_error_naming_the_problem(built_calbin: Path, change, message: str):
    broken = job("soak", built_calbin)
    change(broken)
    with pytest.raises(JobError) as raised:
        run_job(broken)
    assert message in str(raised.value)


def test_broken_stage_specific_params(built_calbin: Path):
    with pytest.raises(JobError, match="params.tolerances: unknown tensor"):
        run_job(job("golden", built_calbin, {"tolerances": {"logits": {}}}))
    with pytest.raises(JobError, match=r"params.scenarios\[0\].expect_code must be an integer"):
        run_job(job("failure", built_calbin, {"scenarios": [{"fault": "busy"}]}))
    with pytest.raises(JobError, match="the golden has 16 decode steps"):
        run_job(job("golden", built_calbin, {"decode_steps": 17}))


def test_soak_reports_the_section_11_breakdown(built_calbin: Path):
    params = {"requests": 6, "concurrency": 3, "prompt_tokens": 8, "output_tokens": 6}
    report = run_job(job("soak", built_calbin, params))["metrics"]["report"]
    assert report["fixed"] == {"prompt_tokens": 8, "output_tokens": 6, "concurrency": 3, "requests": 6}
    modelled = report["modelled_device_ms"]
    assert set(modelled) == {
        "client_ttfb",
        "service_queue",
        "prefill",
        "decode_step",
        "h2d",
        "infer",
        "d2h",
        "sampling",
    }
    assert modelled["client_ttfb"]["p50"] >= modelled["prefill"]["p50"] > 0
    assert modelled["service_queue"]["p99"] > 0  # the third client waited for two prefills
    assert modelled["sampling"]["count"] == 0  # greedy on the host: its time is measured, not modelled
    measured = report["measured_wall"]
    assert measured["simulation_s"] > 0 and measured["host_sampling_ms_per_request"]["count"] == 6
    assert report["timing"] | {"note": None} == report["timing"] | {
        "scale": "full",
        "predicted": True,
        "layout": "tp",
        "decode_batch": 8,
        "device_sampling": False,
        "layers": 48,
        "vocab": 151936,
        "note": None,
    }


def soak_metrics(path: Path, **params) -> dict:
    base = {"requests": 16, "concurrency": 16, "prompt_tokens": 8, "output_tokens": 24}
    return run_job(job("soak", path, base | params))["metrics"]


def test_soak_figures_depend_on_the_package(package, tmp_path: Path):
    b8, b16 = soak_metrics(package(decode_batch=8)), soak_metrics(package(decode_batch=16))
    assert b16["max_active"] == 16 and b8["max_active"] == 8
    assert b16["throughput_tokens_per_s"] > b8["throughput_tokens_per_s"]
    assert b16["decode_tokens_per_s"]["p50"] != b8["decode_tokens_per_s"]["p50"]
    s8 = soak_metrics(package("s8", decode_batch=8))
    assert s8["throughput_tokens_per_s"] != b8["throughput_tokens_per_s"]
    corrupted = Path(shutil.copytree(package(decode_batch=8), tmp_path / "corrupted"))
    data = bytearray((corrupted / "param_blk0.bin").read_bytes())
    data[100] ^= 0xFF
    (corrupted / "param_blk0.bin").write_bytes(bytes(data))
    result = run_job(job("soak", corrupted, {"requests": 2}))
    assert failed_checks(result) == ["calbin_valid"] and "throughput_tokens_per_s" not in result["metrics"]


def test_soak_with_device_sampling_moves_token_ids(package):
    probe = run_job(
        {
            "schema_version": 2,
            "stage": "soak",
            "calbin": str(package("sampling")),
            "probes": [{"name": "sampling"}],
            "params": {"requests": 4, "prompt_tokens": 8, "output_tokens": 4},
        }
    )["probes"][0]
    modelled = probe["metrics"]["report"]["modelled_device_ms"]
    assert probe["verdict"] == "pass" and modelled["sampling"]["count"] > 0
    assert probe["metrics"]["report"]["measured_wall"]["host_sampling_ms_per_request"] is None


def test_the_golden_stage_refuses_a_golden_shorter_than_the_job_asks(tmp_path: Path):
    short = build_calbin(tmp_path / "short", decode_batch=1, decode_steps=2)
    result = run_job(job("golden", short, {"min_decode_steps": 4}))
    assert failed_checks(result) == ["golden_long_enough"]
    assert run_job(job("golden", short, {"min_decode_steps": 2}))["verdict"] == "pass"
