"""Runner jobs and results of schema 2: probes, the vendor's golden, the device's own identity."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from npu_sim.calbin import build_calbin
from npu_sim.device import DeviceIdentity
from npu_sim.runner import JobError, run_job
from tests.npu_sim.packages import change_golden

RESULT_FIELDS = {
    "schema_version",
    "stage",
    "verdict",
    "checks",
    "metrics",
    "probes",
    "device",
    "target",
    "log_excerpt",
    "produced_files",
}
PROBE_FIELDS = {"name", "params", "verdict", "checks", "metrics", "findings"}


def job(stage: str, calbin: Path | None, probes: list | None = None, **fields) -> dict:
    return {
        "schema_version": 2,
        "stage": stage,
        "calbin": str(calbin) if calbin else None,
        "probes": probes or [],
        **fields,
    }


def failed(result: dict) -> list[str]:
    return [c["name"] for c in result["checks"] if not c["passed"]]


@pytest.fixture(scope="module")
def vendor(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A decode-batch-4 package and the golden its vendor delivered apart."""
    root = tmp_path_factory.mktemp("vendor")
    package = build_calbin(root / "pkg", decode_batch=4, golden_out=root / "golden.npz")
    return package, root / "golden.npz"


def test_without_probes_a_stage_runs_as_in_schema_1(vendor):
    package, _ = vendor
    result = run_job(job("runner", package, target={"name": "board-1", "kind": "hardware", "calrt": "9.9.9"}))
    assert set(result) == RESULT_FIELDS and result["probes"] == []
    assert result["verdict"] == "pass", failed(result)
    assert [c["name"] for c in result["checks"]] == [
        "calbin_valid",
        "compatibility",
        "load_and_configure",
        "prefill_and_decode",
        "logits_finite",
        "kv_released",
    ]
    # The target is what the caller expects; the device reports its own versions, whatever the job says.
    assert result["target"]["calrt"] == "9.9.9"
    assert result["device"] == result["device"] | {
        "kind": "simulator",
        "calrt": "0.7.6",
        "driver": "2.3.0",
        "chip": "calculet-2c",
    }
    assert result["device"]["identity"] == f"npu_sim virtual device {result['device']['serial']}"


def test_the_device_configuration_sets_the_versions_and_compatibility_follows_the_device(vendor):
    package, _ = vendor
    upgraded = DeviceIdentity(calrt="0.8.1", driver="2.4.0", serial="BENCH-2")
    result = run_job(job("runner", package, target={"calrt": "0.7.6"}), device=upgraded)
    assert (result["device"]["calrt"], result["device"]["serial"]) == ("0.8.1", "BENCH-2")
    assert failed(result) == ["compatibility"] and "calrt 0.8.1 is outside" in result["checks"][1]["detail"]


def test_probes_come_back_in_job_order_with_their_effective_parameters(vendor):
    package, _ = vendor
    probes = [
        {"name": "health"},
        {"name": "decode_batch", "params": {"batch": 4}},
        {"name": "decode_batch", "params": {"batch": 16}},
    ]
    result = run_job(job("runner", package, probes))
    assert [p["name"] for p in result["probes"]] == ["health", "decode_batch", "decode_batch"]
    assert all(set(p) == PROBE_FIELDS for p in result["probes"])
    assert [p["params"] for p in result["probes"]] == [{}, {"batch": 4}, {"batch": 16}]
    assert [p["verdict"] for p in result["probes"]] == ["pass", "pass", "fail"]
    assert result["probes"][2]["findings"] == [
        {"code": "not_exercised", "message": "the package's decode batch is 4; the probe asks for 16"}
    ]
    assert result["verdict"] == "fail"  # one probe not exercised fails the run


def test_a_probe_whose_feature_the_package_lacks_is_not_exercised(vendor):
    package, _ = vendor
    result = run_job(job("golden", package, [{"name": "sampling"}, {"name": "s8"}, {"name": "multi_model"}]))
    messages = [p["findings"][0]["message"] for p in result["probes"]]
    assert all(p["verdict"] == "fail" and not p["checks"] for p in result["probes"])
    assert messages[0].startswith("the package does not declare sampling")
    assert messages[1].startswith("the package does not declare s8")
    assert messages[2].startswith("the package does not declare multi_model")


def test_a_package_that_does_not_load_leaves_every_probe_unexercised(vendor, tmp_path):
    broken = Path(shutil.copytree(vendor[0], tmp_path / "broken"))
    (broken / "param_blk0.bin").write_bytes(b"\0" * 16)
    result = run_job(job("runner", broken, [{"name": "health"}]))
    assert failed(result) == ["calbin_valid"]
    assert result["probes"][0]["findings"][0]["code"] == "not_exercised"


def test_the_golden_comes_from_the_vendor_when_the_job_says_so(vendor, tmp_path):
    package, golden = vendor
    passed = run_job(job("golden", package, [{"name": "golden"}], golden=str(golden), golden_source="vendor"))
    assert passed["verdict"] == "pass" and passed["probes"][0]["metrics"]["golden_source"] == str(golden)
    wrong = tmp_path / "wrong.npz"
    copy = Path(shutil.copytree(package, tmp_path / "copy"))

    def off(arrays):
        arrays["decode_logits"] = arrays["decode_logits"] + np.uint16(40)

    change_golden(copy, off)
    shutil.copy(copy / "golden/golden.npz", wrong)
    vendor_wrong = run_job(job("golden", package, [{"name": "golden"}], golden=str(wrong), golden_source="vendor"))
    assert vendor_wrong["probes"][0]["verdict"] == "fail"
    assert "golden:decode_logits" in [c["name"] for c in vendor_wrong["probes"][0]["checks"] if not c["passed"]]
    package_own = run_job(job("golden", package, [{"name": "golden"}], golden=str(wrong), golden_source="package"))
    assert package_own["probes"][0]["verdict"] == "pass"


def test_golden_source_vendor_without_a_golden_is_not_exercised(vendor):
    package, _ = vendor
    probe = run_job(job("golden", package, [{"name": "golden"}], golden_source="vendor"))["probes"][0]
    assert probe["findings"][0] == {
        "code": "not_exercised",
        "message": "the job's golden_source is vendor but it names no golden file",
    }
    stage = run_job(job("golden", package, golden_source="vendor"))
    assert failed(stage) == ["golden_available"] and "not_exercised" in stage["checks"][-1]["detail"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda j: j["probes"].append({"name": "sampling", "params": {"top_k": 0}}),
            "probes[1].params.top_k must be an integer >= 1",
        ),
        (
            lambda j: j["probes"].append({"name": "sampling", "params": {"top_k": "40"}}),
            "probes[1].params.top_k must be an integer >= 1",
        ),
        (
            lambda j: j["probes"].append({"name": "s8", "params": {"kv": "k"}}),
            "probes[1].params.kv must be one of v, kv",
        ),
        (lambda j: j["probes"].append({"name": "teleport"}), "probes[1].name must be one of"),
        (
            lambda j: j["probes"].append({"name": "health", "params": {"x": 1}}),
            "unknown parameter(s) x for probe health",
        ),
        (lambda j: j["probes"].append("health"), "probes[1] must be a JSON object"),
        (lambda j: j.update(probes={"name": "health"}), "probes must be a JSON array"),
        (lambda j: j.update(packages={"second": "/no/such/package"}), "packages.second: no such file or directory"),
        (lambda j: j.update(golden="/no/such/golden.npz"), "golden: no such file or directory"),
        (lambda j: j.update(golden_source="vendors"), "golden_source must be one of vendor, package"),
        (lambda j: j.update(minimal_example={"command": "true"}), "unknown field(s) minimal_example"),
        (lambda j: j.update(schema_version=3), "schema_version must be one of 1, 2"),
    ],
)
def test_broken_jobs_name_the_field(vendor, change, message):
    broken = job("runner", vendor[0], [{"name": "health"}])
    change(broken)
    with pytest.raises(JobError) as raised:
        run_job(broken)
    assert message in str(raised.value)


def test_progress_never_goes_down_across_probes_and_threads(vendor):
    percents: list[float] = []
    probes = [{"name": "health"}, {"name": "parallel_mode"}, {"name": "decode_batch", "params": {"batch": 4}}]
    run_job(job("integration", vendor[0], probes), progress=lambda percent, text: percents.append(percent))
    assert percents[0] == 0 and percents[-1] == 100 and percents == sorted(percents) and len(percents) > 6


def test_the_result_is_strict_json(vendor, tmp_path):
    result = run_job(
        job("soak", vendor[0], [{"name": "health"}], params={"requests": 4, "output_tokens": 4}), workdir=tmp_path
    )
    json.dumps(result, allow_nan=False)
    assert result["verdict"] == "pass"
    # The probe's soak, and the job's own soak on its package that the caller judges (docs/runner-protocol.md).
    assert result["produced_files"] == ["health-soak-requests.jsonl", "soak-requests.jsonl"]
