"""V04's original ONNX, held to C02's hash, and V05's checker, run in the sandbox on models calculet makes."""

import hashlib
import random

import pytest

from acceptance.inspection.onnx import OPS, check_onnx_checker, check_onnx_file, probe_models, read_model
from tests.inspection_builders import ONNX_CHECKER, add_model, c02_onnx, onnx_checker, qwen3_model

VALID = {"valid", "valid-longer"}
INVALID = {"dangling-input", "truncated"}


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_the_models_calculet_makes_read_back_as_written():
    models = probe_models(random.Random(7))
    valid = read_model(models["valid"][0])
    assert (valid.ir_version, valid.opsets) == (8, {"ai.onnx": 17})
    assert valid.nodes and all(node["op_type"] in OPS for node in valid.nodes)
    assert valid.outputs == valid.nodes[-1]["outputs"]
    dangling = read_model(models["dangling-input"][0])
    defined = set(dangling.inputs) | {out for node in dangling.nodes for out in node["outputs"]}
    assert [t for node in dangling.nodes for t in node["inputs"] if t not in defined]


@pytest.mark.parametrize("seed", range(50))
def test_the_models_cannot_be_told_apart_by_their_size_or_their_bytes(seed):
    """A checker deciding by size meets an invalid model as long as a valid one: the undefined-tensor model is
    the valid one with a name changed, the truncated one longer than it; and the next check's models differ."""
    models = probe_models(random.Random(seed))
    assert len(models["dangling-input"][0]) == len(models["valid"][0])
    assert len(models["truncated"][0]) > len(models["valid"][0])
    again = probe_models(random.Random(seed + 1000))
    assert not {data for data, _ in models.values()} & {data for data, _ in again.values()}


def test_the_onnx_whose_sha256_is_c02_s_passes(tmp_path):
    path = tmp_path / "qwen3.onnx"
    path.write_bytes(c02_onnx())
    assert hashlib.sha256(path.read_bytes()).hexdigest().startswith("316f06")
    report = check_onnx_file(path, sha256_prefix="316f06")
    assert report.passed, report.findings
    assert report.checked["opsets"] == {"ai.onnx": 17} and report.checked["nodes"] == 1
    assert report.checked["initializers"] == 2 + 48 * 7


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"vocab": 32000}, "a vocabulary of 151936 by a hidden size of 2048 (M01, M04)"),
        ({"hidden": 4096}, "a vocabulary of 151936 by a hidden size of 2048 (M01, M04)"),
        ({"q_heads": 16}, "32 query heads of 128"),
        ({"kv_heads": 8}, "4 KV heads of 128"),
        ({"layers": 32}, "48 layers each routing to 128 experts"),
        ({"experts": 64}, "48 layers each routing to 128 experts"),
        ({"expert_ffn": 1408}, "experts' FFNs of 768"),
    ],
    ids=["vocab", "hidden", "q-heads", "kv-heads", "layers", "experts", "expert-ffn"],
)
def test_another_model_with_a_forged_prefix_fails_naming_the_seed_s_fact(tmp_path, changes, named):
    """Six hex digits are found in minutes: a model of other shapes whose SHA-256 begins with the prefix asked (here
    the file's own, which a forger reaches with a nonce) is still not the seed's model."""
    data = qwen3_model(**changes)
    path = tmp_path / "forged.onnx"
    path.write_bytes(data)
    report = check_onnx_file(path, sha256_prefix=hashlib.sha256(data).hexdigest()[:6])
    assert set(codes(report)) == {"not_the_seed_model"}
    assert any(named in finding.message and "it is another model" in finding.message for finding in report.findings)


def test_the_add_model_with_its_own_prefix_fails_on_every_fact(tmp_path):
    data = add_model()
    path = tmp_path / "add.onnx"
    path.write_bytes(data)
    report = check_onnx_file(path, sha256_prefix=hashlib.sha256(data).hexdigest()[:6])
    assert codes(report) == ["not_the_seed_model"] * 5


def test_another_onnx_fails_naming_both_hashes(tmp_path):
    path = tmp_path / "other.onnx"
    path.write_bytes(add_model())
    report = check_onnx_file(path, sha256_prefix="316f06")
    assert codes(report)[0] == "hash_mismatch"
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
    accepted = {run["model"]: run["accepted"] for run in report.checked["runs"]}
    assert accepted == {"valid": True, "valid-longer": True, "dangling-input": False, "truncated": False}
    assert isinstance(report.checked["seed"], int)


def test_a_checker_that_accepts_everything_fails_naming_each_invalid_model(tmp_path):
    report = check_onnx_checker(onnx_checker(tmp_path / "d", command="true"), seed=3)
    assert codes(report) == ["accepts_invalid_onnx", "accepts_invalid_onnx"]
    assert {f.detail["model"] for f in report.findings} == INVALID
    undefined = next(f for f in report.findings if f.detail["model"] == "dangling-input")
    assert "reads the tensor '" in undefined.message and "which nothing defines" in undefined.message


def test_a_checker_that_only_parses_fails_on_the_dangling_input(tmp_path):
    parsing_only = ONNX_CHECKER.replace('sys.exit(f"node reads undefined tensor {tensor}")', "pass")
    assert parsing_only != ONNX_CHECKER
    report = check_onnx_checker(onnx_checker(tmp_path / "d", checker=parsing_only))
    assert codes(report) == ["accepts_invalid_onnx"]
    assert report.findings[0].detail["model"] == "dangling-input"


# A vendor's checker that knows calculet's models rather than checking them: each passed when the models were the
# same for every check (one Add of x and y, its undefined-tensor twin, the Add cut in half, in that order).
FIXED_ADD_SHA256 = hashlib.sha256(add_model()).hexdigest()
KNOWING = {
    "the valid model's digest": f'[ "$(sha256sum model.onnx | cut -c1-64)" = "{FIXED_ADD_SHA256}" ]',
    "the valid model's size": f'[ "$(wc -c < model.onnx)" -eq {len(add_model())} ]',
    "the undefined tensor's name": '! grep -q undefined model.onnx && [ "$(wc -c < model.onnx)" -gt 80 ]',
}


@pytest.mark.parametrize("command", KNOWING.values(), ids=KNOWING.keys())
def test_a_checker_that_knows_the_models_rather_than_checks_them_fails(tmp_path, command):
    report = check_onnx_checker(onnx_checker(tmp_path / "d", command=command))
    assert {"refuses_valid_onnx", "accepts_invalid_onnx"} & set(codes(report)), report.checked["runs"]


def test_a_checker_that_refuses_everything_fails(tmp_path):
    report = check_onnx_checker(onnx_checker(tmp_path / "d", command="exit 3"))
    assert codes(report) == ["refuses_valid_onnx", "refuses_valid_onnx"]
    assert "(exit 3)" in report.findings[0].message


def test_a_checker_without_its_command_fails(tmp_path):
    root = onnx_checker(tmp_path / "d")
    (root / "run.txt").unlink()
    assert codes(check_onnx_checker(root)) == ["delivery_incomplete"]


def test_a_large_file_s_structure_is_read_too(tmp_path):
    """Past 256 MiB the structure used not to be read: garbage of that size with the prefix passed as ONNX."""
    path = tmp_path / "big.onnx"
    with path.open("wb") as stream:
        stream.seek(257 * 1024 * 1024)
        stream.write(b"garbage")
    prefix = hashlib.sha256(path.read_bytes()).hexdigest()[:6]
    assert codes(check_onnx_file(path, sha256_prefix=prefix)) == ["not_onnx"]


def test_a_large_model_is_read_by_seeking_over_its_weights(tmp_path):
    """A graph holding a 300 MiB initializer (TensorProto raw_data, field 9): its structure read, its weights not."""
    from acceptance.inspection.onnx import OPSET_17, _encode_varint, _int, _key, _len

    weight_bytes = 300 * 1024 * 1024
    raw_data_head = _len(8, "w") + _key(9, 2) + _encode_varint(weight_bytes)
    initializer = _key(5, 2) + _encode_varint(len(raw_data_head) + weight_bytes) + raw_data_head
    node = _len(1, _len(1, "x") + _len(1, "w") + _len(2, "z") + _len(4, "Add"))
    names = _len(11, _len(1, "x")) + _len(12, _len(1, "z"))
    graph_length = len(node + names + initializer) + weight_bytes
    path = tmp_path / "large.onnx"
    with path.open("wb") as stream:
        stream.write(_int(1, 8) + _key(7, 2) + _encode_varint(graph_length) + node + names + initializer)
        stream.seek(weight_bytes, 1)  # the weights: a hole, zeros
        stream.write(OPSET_17)
    report = check_onnx_file(path, sha256_prefix="0")
    assert "not_onnx" not in codes(report)
    assert report.checked["nodes"] == 1 and report.checked["opsets"] == {"ai.onnx": 17}


def test_a_model_with_an_empty_graph_fails(tmp_path):
    """IR version, opset and a graph field holding nothing: a ModelProto, not the model that was compiled."""
    from acceptance.inspection.onnx import OPSET_17, _int, _len

    data = _int(1, 8) + _len(7, b"") + OPSET_17
    path = tmp_path / "empty.onnx"
    path.write_bytes(data)
    report = check_onnx_file(path, sha256_prefix=hashlib.sha256(data).hexdigest()[:6])
    assert codes(report) == ["not_onnx"] and "has no node" in report.findings[0].message
