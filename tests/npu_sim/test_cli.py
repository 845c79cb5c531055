import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from npu_sim.calbin import read_manifest
from npu_sim.cli import main
from npu_sim.probes import PROBES
from tests.npu_sim.packages import set_line

PROGRESS = re.compile(r"^PROGRESS (\d+(?:\.\d+)?) (.+)$")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "npu_sim", *args], capture_output=True, text=True, timeout=120)


def write_job(path: Path, stage: str, calbin: Path, params: dict | None = None) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "stage": stage, "calbin": str(calbin), "params": params or {}}))
    return path


def test_build_then_validate_as_a_subprocess(tmp_path: Path):
    built = cli("build-calbin", "--preset", "tiny", "--decode-batch", "8", "--out", str(tmp_path / "pkg"), "--tar")
    assert built.returncode == 0, built.stderr
    tar = tmp_path / "pkg.tar"
    assert built.stdout.strip() == str(tar)
    checked = cli("validate", str(tar))
    assert (checked.returncode, json.loads(checked.stdout)) == (0, [])


def test_validate_exits_non_zero_on_errors(calbin_copy: Path):
    set_line(calbin_copy, "model_memory_reserved_info.txt", "device_memory_required", "16777216 MB")
    checked = cli("validate", str(calbin_copy))
    assert checked.returncode == 1
    [finding] = json.loads(checked.stdout)
    assert finding == finding | {"code": "memory_exceeds_device", "severity": "error", "line": 3}
    assert finding["field"] == "model_memory_reserved_info.txt:device_memory_required"


def test_timing_json_rows():
    out = cli("timing", "--contexts", "512,33000,40960", "--batch", "1", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [row["context"] for row in rows] == [512, 33000, 40960]
    for row in rows:
        assert {"context", "decode_tokens_per_s", "decode_ms_per_token", "prefill_ms"} <= set(row)
    assert 55 < rows[0]["decode_tokens_per_s"] < 67


def test_run_reports_progress_and_a_verdict(built_calbin_tar: Path, tmp_path: Path):
    job = write_job(tmp_path / "job.json", "golden", built_calbin_tar)
    out = cli("run", "--job", str(job), "--result", str(tmp_path / "result.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["verdict"] == "pass"
    percents = [float(m.group(1)) for line in out.stderr.splitlines() if (m := PROGRESS.match(line))]
    assert percents[0] == 0 and percents[-1] == 100 and percents == sorted(percents)
    assert all(PROGRESS.match(line) for line in out.stderr.splitlines() if line.startswith("PROGRESS"))
    assert (tmp_path / "golden-actual.npz").exists()


def test_a_fail_verdict_still_exits_zero(built_calbin: Path, tmp_path: Path):
    scenarios = [{"fault": "busy", "expect_code": 0}]
    job = write_job(tmp_path / "job.json", "failure", built_calbin, {"scenarios": scenarios})
    out = cli("run", "--job", str(job), "--result", str(tmp_path / "result.json"))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "result.json").read_text())["verdict"] == "fail"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the job file"),
        ("{not json", "is not valid JSON"),
        ('{"schema_version": 1, "stage": "deploy", "calbin": "."}', "stage must be one of"),
        ('{"schema_version": 1, "stage": "soak", "calbin": ".", "params": {"requests": "ten"}}', "params.requests"),
    ],
)
def test_broken_jobs_exit_2_naming_the_problem(tmp_path: Path, content: str | None, message: str):
    job = tmp_path / "job.json"
    if content is not None:
        job.write_text(content)
    out = cli("run", "--job", str(job), "--result", str(tmp_path / "result.json"))
    assert out.returncode == 2
    assert message in out.stderr
    assert not (tmp_path / "result.json").exists()


def test_help_for_each_command(capsys: pytest.CaptureFixture[str]):
    for args in ([], ["build-calbin"], ["validate"], ["convert-calbin"], ["timing"], ["probes"], ["run"]):
        with pytest.raises(SystemExit) as exited:
            main([*args, "--help"])
        assert exited.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_timing_tables_in_process(capsys: pytest.CaptureFixture[str]):
    assert main(["timing", "--calibration", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["context"] for row in rows] == [512, 33000, 40960]
    assert main(["timing", "--capacity"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[0] == "batch" and len(table) == 5


def test_run_refuses_a_result_path_in_a_missing_directory(built_calbin: Path, tmp_path: Path, capsys):
    job = write_job(tmp_path / "job.json", "health", built_calbin)
    assert main(["run", "--job", str(job), "--result", str(tmp_path / "missing" / "result.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_build_refuses_a_non_empty_directory(tmp_path: Path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "keep.txt").write_text("mine")
    assert main(["build-calbin", "--out", str(tmp_path / "pkg")]) == 2
    assert "not empty" in capsys.readouterr().err


IMPOSSIBLE = {"decode_logits": {"cosine_min": 1.5}}
SMALL_SOAK = {"requests": 3, "concurrency": 2, "prompt_tokens": 4, "output_tokens": 3}


@pytest.mark.parametrize(
    ("stage", "params", "target", "verdict"),
    [
        ("runner", {}, {}, "pass"),
        ("runner", {}, {"calrt": "0.8.0"}, "fail"),
        ("golden", {}, {}, "pass"),
        ("golden", {"tolerances": IMPOSSIBLE}, {}, "fail"),
        ("failure", {"scenarios": [{"fault": "timeout", "expect_code": 18}]}, {}, "pass"),
        ("failure", {"scenarios": [{"fault": "timeout", "expect_code": 21}]}, {}, "fail"),
        ("integration", {"sequences": 3, "max_new_tokens": 3}, {}, "pass"),
        ("integration", {"sequences": 3, "max_new_tokens": 3, "fault": {"fault": "busy"}}, {}, "fail"),
        ("soak", SMALL_SOAK, {}, "pass"),
        ("soak", SMALL_SOAK | {"fault": {"fault": "memory_exhaustion", "at_step": 2}}, {}, "fail"),
        ("health", {}, {}, "pass"),
        ("health", {"tolerances": IMPOSSIBLE}, {"chip": "calculet-2c"}, "fail"),
    ],
)
def test_every_stage_through_the_cli(built_calbin, tmp_path: Path, capsys, stage, params, target, verdict):
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {"schema_version": 1, "stage": stage, "calbin": str(built_calbin), "params": params, "target": target}
        )
    )
    assert main(["run", "--job", str(job), "--result", str(tmp_path / "result.json")]) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["stage"], result["verdict"]) == (stage, verdict)
    assert capsys.readouterr().err.splitlines()[-1] == f"verdict: {verdict}"


@pytest.mark.parametrize(
    "features",
    [
        "",
        "sampling",
        "s8",
        "s8 single_chiplet",
        "ep",
        "pp",
        "multi_board",
        "single_chiplet,multi_model,residency",
        "sampling multi_model",
    ],
)
def test_each_feature_builds_validates_and_runs(tmp_path: Path, capsys, features: str):
    out = tmp_path / "pkg"
    assert main(["build-calbin", "--decode-batch", "4", "--features", features, "--out", str(out), "--tar"]) == 0
    tar = Path(capsys.readouterr().out.strip())
    assert main(["validate", str(tar)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps({"schema_version": 2, "stage": "runner", "calbin": str(tar), "probes": [{"name": "health"}]})
    )
    device = tmp_path / "device.json"
    device.write_text(
        json.dumps({"calrt": "0.9.0", "calrt_features": ["multi_board"]} if "multi_board" in features else {})
    )
    assert (
        main(["run", "--job", str(job), "--result", str(tmp_path / "result.json"), "--device-config", str(device)]) == 0
    )
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["verdict"] == "pass", result["checks"] + result["probes"]


def test_probes_lists_the_catalogue(capsys):
    assert main(["probes", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["schema_version"] == 1
    assert [probe["name"] for probe in listed["probes"]] == list(PROBES)
    assert main(["probes"]) == 0
    assert "sampling (needs sampling):" in capsys.readouterr().out


def test_build_options_reach_the_package(tmp_path: Path, capsys):
    args = [
        "build-calbin",
        "--decode-batch",
        "2",
        "--prefill-batch",
        "2",
        "--prefill-lengths",
        "16,64",
        "--cpu-fallback",
        "rope",
    ]
    args += [
        "--s8-kv",
        "kv",
        "--features",
        "s8",
        "--golden-out",
        str(tmp_path / "golden.npz"),
        "--out",
        str(tmp_path / "p"),
    ]
    assert main(args) == 0
    manifest = read_manifest(tmp_path / "p")
    assert manifest["prefill_lengths"] == [16, 64] and manifest["cpu_fallback_ops"] == ["rope"]
    assert manifest["dtypes"]["k_cache"] == manifest["dtypes"]["v_cache"] == "s8"
    assert (tmp_path / "golden.npz").exists()
    assert main(["build-calbin", "--features", "tp ep", "--out", str(tmp_path / "q")]) == 2
    assert "at most one layout" in capsys.readouterr().err


def test_the_device_configuration_from_the_environment(built_calbin: Path, tmp_path: Path, monkeypatch):
    config = tmp_path / "device.json"
    config.write_text(json.dumps({"serial": "ENV-1", "firmware": "1.9.0"}))
    monkeypatch.setenv("NPU_SIM_DEVICE_CONFIG", str(config))
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {"schema_version": 2, "stage": "health", "calbin": str(built_calbin), "target": {"firmware": "1.8.0"}}
        )
    )
    assert main(["run", "--job", str(job), "--result", str(tmp_path / "r.json")]) == 0
    device = json.loads((tmp_path / "r.json").read_text())["device"]
    assert (device["serial"], device["firmware"]) == ("ENV-1", "1.9.0")
    config.write_text("{not json")
    assert main(["run", "--job", str(job), "--result", str(tmp_path / "r.json")]) == 2
