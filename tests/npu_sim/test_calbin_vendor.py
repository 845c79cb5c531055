"""The vendor's own package (the seed's A01-A17): only the parameter blocks, the reservation files and the
tokenizer's config, without the files the simulator adds. It is checked on its static facts, and a runner on
the simulator says it cannot run it rather than calling it invalid."""

import shutil
from pathlib import Path

import pytest

from npu_sim.calbin import read_manifest, validate
from npu_sim.calbin.layout import CHECKSUMS, MODEL_MEMORY, PACKAGE_INFO
from npu_sim.runner import run_job
from tests.npu_sim.packages import seed_package, set_line, vendor_form

PREFILL = "prefill/submodel_memory_reserved_info.txt"
DECODE = "decode/submodel_memory_reserved_info.txt"


def findings_of(path: Path) -> dict[tuple[str, str], str]:
    return {(f.code, f.field): f.severity for f in validate(path)}


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return seed_package(tmp_path / "seed-package")


def test_the_seeds_package_passes_with_a16_and_a17_reported(seed: Path):
    assert findings_of(seed) == {
        ("memory_exceeds_device", f"{MODEL_MEMORY}:device_memory_required"): "warning",  # A16
        ("smodel_type_mismatch", f"{PREFILL}:smodel_type"): "warning",  # A17
        ("checksums_absent", CHECKSUMS): "warning",
    }
    [a16] = [f for f in validate(seed) if f.code == "memory_exceeds_device"]
    assert "16777216 MB is 16.0 TiB" in a16.message and "reported, not refused" in a16.message
    manifest = read_manifest(seed)
    assert manifest["form"] == "vendor" and manifest["name"] == "qwen3-30b-a3b"
    assert (manifest["max_seq_len"], manifest["decode_batch"], manifest["chiplets"]) == (40960, 1, [0, 1])
    assert manifest["memory"]["chiplets"]["chip0"] == {"dram": 15_113_064_448, "sram": 17_662_336}  # A05, A06
    assert [b["size"] for b in manifest["param_blocks"]] == [9_404_557_312, 8_782_227_456]  # A02, A03
    assert manifest["compatibility"] == {}  # the answer declares what it runs on


@pytest.mark.parametrize(
    ("file", "key", "value", "code"),
    [
        (MODEL_MEMORY, "param_blk0.chip_mask", "0x3", "param_mask_shared"),  # A07
        (MODEL_MEMORY, "param_blk1.chip_mask", "0x1", "param_mask_mismatch"),
        (MODEL_MEMORY, "chip1.dram_reserved", "17179869185 B", "memory_exceeds_device"),  # A05
        (MODEL_MEMORY, "chip0.sram_reserved", "64 MiB", "memory_exceeds_device"),  # A06
        (MODEL_MEMORY, "chip_num", "3", "chip_num_mismatch"),
        (MODEL_MEMORY, "param_blk1.size", "8782227457", "param_block_size"),
        (MODEL_MEMORY, "param_blk1.file", "param_blk9.bin", "file_missing"),
        (DECODE, "output0.size", "151936", "io_size_mismatch"),  # A11
        (DECODE, "input0.dtype", "FP32", "io_shape_mismatch"),  # A10
        (PREFILL, "output0.shape", "[1,1,151935]", "io_shape_mismatch"),  # A09
        (DECODE, "chip_mask", "0x1", "submodel_mask_mismatch"),
    ],
)
def test_a_wrong_static_fact_is_an_error(seed: Path, file: str, key: str, value: str, code: str):
    set_line(seed, file, key, value, digests=False)
    errors = {c for (c, _), severity in findings_of(seed).items() if severity == "error"}
    assert code in errors


def test_neither_metadata_file_is_not_a_package(seed: Path):
    (seed / MODEL_MEMORY).unlink()
    assert [f.code for f in validate(seed)] == ["package_info_missing"]


def test_a_vendor_sha256sums_is_checked(seed: Path):
    (seed / CHECKSUMS).write_text(f"{'0' * 64}  {MODEL_MEMORY}\n")
    assert findings_of(seed)[("digest_mismatch", MODEL_MEMORY)] == "error"


def test_on_the_simulator_each_probe_says_it_cannot_run_the_vendors_package(built_calbin: Path, tmp_path: Path):
    package = vendor_form(Path(shutil.copytree(built_calbin, tmp_path / "vendor")))
    assert not (package / PACKAGE_INFO).exists()
    assert [f for f in validate(package) if f.severity == "error"] == []
    job = {
        "schema_version": 2,
        "stage": "runner",
        "calbin": str(package),
        "probes": [{"name": "fixed_task", "params": {}}],
    }
    result = run_job(job)
    assert result["verdict"] == "fail"
    [probe] = result["probes"]
    assert probe["verdict"] == "fail"
    [finding] = probe["findings"]
    assert finding["code"] == "not_exercised"
    assert "vendor's own form" in finding["message"] and "only a board runs" in finding["message"]
    [load] = [c for c in result["checks"] if c["name"] == "load_and_configure"]
    assert load["passed"] is False and "vendor's own form" in load["detail"]
