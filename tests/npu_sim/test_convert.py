"""A package in the old manifest.json format gets one command to the toolchain layout."""

import dataclasses
import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from npu_sim.calbin import read_manifest, validate
from npu_sim.calbin.build import golden_run
from npu_sim.calbin.convert import convert_calbin
from npu_sim.cli import main
from npu_sim.model import PRESETS, ReferenceModel, init_weights
from npu_sim.runner import run_job

TINY = PRESETS["tiny"]


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Schema 1 as the simulator used to write it: manifest.json, weights/*.npy, goldens/*.npy."""
    root = tmp_path_factory.mktemp("old") / "tiny-b2"
    weights = init_weights(TINY, 4)
    goldens = golden_run(ReferenceModel(TINY, weights), ("bf16", "bf16"), np.arange(1, 17), 6).arrays()
    entries = {"weights": [], "goldens": []}
    for kind, arrays in (("weights", weights), ("goldens", goldens)):
        for name, array in arrays.items():
            if name == "format":
                continue
            data = npy(array)
            (root / kind).mkdir(parents=True, exist_ok=True)
            (root / kind / f"{name}.npy").write_bytes(data)
            entries[kind].append(
                {"name": name, "file": f"{kind}/{name}.npy", "sha256": hashlib.sha256(data).hexdigest()}
            )
    model = {k: v for k, v in dataclasses.asdict(TINY).items() if k != "max_seq_len"}
    manifest = {
        "schema_version": 1,
        "name": "qwen3-moe-tiny-b2-s4",
        "model": model,
        "seed": 4,
        "max_seq_len": TINY.max_seq_len,
        "chiplets": 2,
        "submodels": [
            {"name": "prefill", "smodel_type": "llm_prefill", "batch": 1},
            {"name": "decode", "smodel_type": "llm_decode", "batch": 2},
        ],
        "compatibility": {
            "calrt": ">=0.7.6,<0.8",
            "driver": ">=2.3,<3",
            "firmware": ">=1.8,<2",
            "chip": ["calculet-2c"],
        },
        "weights": entries["weights"],
        "goldens": {"decode_steps": 6, "tensors": entries["goldens"]},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_an_old_package_is_refused_with_the_command_that_converts_it(old_package: Path):
    [finding] = validate(old_package)
    assert finding.code == "legacy_manifest" and "python -m npu_sim convert-calbin" in finding.message


def test_the_converted_package_validates_and_runs(old_package: Path, tmp_path: Path):
    converted = convert_calbin(old_package, tmp_path / "new")
    assert validate(converted) == []
    manifest = read_manifest(converted)
    assert (manifest["name"], manifest["decode_batch"], manifest["layout"]) == ("qwen3-moe-tiny-b2-s4", 2, "tp")
    result = run_job({"schema_version": 1, "stage": "golden", "calbin": str(converted)})
    assert result["verdict"] == "pass", [c for c in result["checks"] if not c["passed"]]
    probe = run_job(
        {
            "schema_version": 2,
            "stage": "golden",
            "calbin": str(converted),
            "probes": [{"name": "decode_batch", "params": {"batch": 2}}],
        }
    )["probes"][0]
    assert probe["verdict"] == "fail" and "per-lane goldens for 0 lanes" in probe["findings"][0]["message"]


def test_conversion_refuses_a_tampered_or_foreign_package(old_package: Path, tmp_path: Path, capsys):
    assert main(["convert-calbin", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    tampered = tmp_path / "tampered"
    shutil.copytree(old_package, tampered)
    (tampered / "weights" / "lm_head.npy").write_bytes(npy(np.zeros((64, 512), dtype=np.float32)))
    assert main(["convert-calbin", str(tampered), str(tmp_path / "out2")]) == 2
    assert "does not match its sha256" in capsys.readouterr().err
    assert main(["convert-calbin", str(old_package), str(tmp_path / "out3.tar")]) == 0
    assert validate(tmp_path / "out3.tar") == []
