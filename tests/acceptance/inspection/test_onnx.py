"""V04's original ONNX, held to C02's hash, and V05's checker, run in the sandbox on models calculet makes."""

import hashlib

from acceptance.inspection.onnx import check_onnx_checker, check_onnx_file, probe_models, read_model
from tests.inspection_builders import ONNX_CHECKER, c02_onnx, onnx_checker


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_the_models_calculet_makes_read_back_as_written():
    models = probe_models()
    valid = read_model(models["valid"][0])
    assert (valid.ir_version, valid.opsets, valid.inputs, valid.outputs) == (8, {"ai.onnx": 17}, ["x", "y"], ["z"])
    assert valid.nodes == [{"op_type": "Add", "inputs": ["x", "y"], "outputs": ["z"]}]
    assert read_model(models["dangling-input"][0]).nodes[0]["inputs"] == ["x", "undefined"]


def test_the_onnx_whose_sha256_is_c02_s_passes(tmp_path):
    path = tmp_path / "qwen3.onnx"
    path.write_bytes(c02_onnx())
    assert hashlib.sha256(path.read_bytes()).hexdigest().startswith("316f06")
    report = check_onnx_file(path, sha256_prefix="316f06")
    assert report.passed, report.findings
    assert report.checked["opsets"] == {"ai.onnx": 17} and report.checked["nodes"] == 1


def test_another_onnx_fails_naming_both_hashes(tmp_path):
    path = tmp_path / "other.onnx"
    path.write_bytes(probe_models()["valid"][0])
    report = check_onnx_file(path, sha256_prefix="316f06")
    assert codes(report) == ["hash_mismatch"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"the file's SHA-256 is {digest}, not the 316f06… the seed records" in report.findings[0].message


def test_a_file_that_is_no_model_fails_even_with_the_hash(tmp_path):
    """Not a ModelProto: the hash alone would not say which file was meant (here the prefix is the file's own)."""
    path = tmp_path / "notes.onnx"
    path.write_bytes(b"\xff\xff\xff")
    prefix = hashlib.sha256(b"\xff\xff\xff").hexdigest()[:6]
    assert codes(check_onnx_file(path, sha256_prefix=prefix)) == ["not_onnx"]


def test_a_checker_that_accepts_the_valid_model_and_refuses_the_invalid_ones_passes(tmp_path):
    report = check_onnx_checker(onnx_checker(tmp_path / "d"))
    assert report.passed, report.findings
    assert [(run["model"], run["accepted"]) for run in report.checked["runs"]] == [
        ("valid", True),
        ("dangling-input", False),
        ("truncated", False),
    ]


def test_a_checker_that_accepts_everything_fails_naming_each_invalid_model(tmp_path):
    report = check_onnx_checker(onnx_checker(tmp_path / "d", command="true"))
    assert codes(report) == ["accepts_invalid_onnx", "accepts_invalid_onnx"]
    assert [f.detail["model"] for f in report.findings] == ["dangling-input", "truncated"]
    assert "reads the tensor 'undefined'" in report.findings[0].message


def test_a_checker_that_only_parses_fails_on_the_dangling_input(tmp_path):
    parsing_only = ONNX_CHECKER.replace('sys.exit(f"node reads undefined tensor {tensor}")', "pass")
    assert parsing_only != ONNX_CHECKER
    report = check_onnx_checker(onnx_checker(tmp_path / "d", checker=parsing_only))
    assert codes(report) == ["accepts_invalid_onnx"]
    assert report.findings[0].detail["model"] == "dangling-input"


def test_a_checker_that_refuses_everything_fails(tmp_path):
    report = check_onnx_checker(onnx_checker(tmp_path / "d", command="exit 3"))
    assert codes(report) == ["refuses_valid_onnx"]
    assert "(exit 3)" in report.findings[0].message


def test_a_checker_without_its_command_fails(tmp_path):
    root = onnx_checker(tmp_path / "d")
    (root / "run.txt").unlink()
    assert codes(check_onnx_checker(root)) == ["delivery_incomplete"]
