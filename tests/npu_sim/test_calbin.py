import io
import json
import tarfile
from pathlib import Path

import pytest

from npu_sim.calbin import build_calbin, read_manifest, validate
from npu_sim.calbin.package import MANIFEST


def edit_manifest(path: Path, change) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    change(manifest)
    (path / MANIFEST).write_text(json.dumps(manifest))


def findings_of(path: Path) -> dict[tuple[str, str], str]:
    """(code, field) -> severity."""
    return {(f.code, f.field): f.severity for f in validate(path)}


def test_a_built_package_has_no_findings(built_calbin: Path, built_calbin_tar: Path):
    assert validate(built_calbin) == []
    assert validate(built_calbin_tar) == []
    assert read_manifest(built_calbin) == read_manifest(built_calbin_tar)


def test_same_seed_same_bytes(tmp_path: Path):
    first = build_calbin(tmp_path / "a", decode_batch=4, seed=5)
    second = build_calbin(tmp_path / "b", decode_batch=4, seed=5)
    names = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(second).as_posix() for p in second.rglob("*") if p.is_file())
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in names)
    tar_a = build_calbin(tmp_path / "c", decode_batch=4, seed=5, tar=True)
    tar_b = build_calbin(tmp_path / "d.tar", decode_batch=4, seed=5)
    assert tar_a.name == "c.tar" and tar_b.name == "d.tar"
    assert tar_a.read_bytes() == tar_b.read_bytes()
    other = build_calbin(tmp_path / "e", decode_batch=4, seed=6)
    assert (other / "weights/lm_head.npy").read_bytes() != (first / "weights/lm_head.npy").read_bytes()


def test_a16_memory_in_an_impossible_unit(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m["memory"].update(device_memory_required={"value": 16777216, "unit": "MB"}))
    findings = validate(calbin_copy)
    [finding] = [f for f in findings if f.code == "memory_exceeds_device"]
    assert finding.severity == "error"
    assert finding.field == "memory.device_memory_required"
    assert "16.0 TiB" in finding.message


def test_per_chiplet_memory_that_does_not_fit(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m["memory"].update(dram_per_chiplet={"value": 17, "unit": "GiB"}))
    assert findings_of(calbin_copy) == {("memory_exceeds_device", "memory.dram_per_chiplet"): "error"}


def test_unknown_memory_unit(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m["memory"].update(device_memory_required={"value": 2, "unit": "MiBs"}))
    assert findings_of(calbin_copy) == {("memory_unit_unknown", "memory.device_memory_required.unit"): "error"}


def test_understated_memory_is_a_warning(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m["memory"].update(device_memory_required={"value": 1, "unit": "KiB"}))
    assert findings_of(calbin_copy) == {("memory_understated", "memory.device_memory_required"): "warning"}


def test_a17_prefill_labelled_decode(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m["submodels"][0].update(smodel_type="llm_decode"))
    findings = findings_of(calbin_copy)
    assert findings[("smodel_type_mismatch", "submodels[0].smodel_type")] == "error"
    assert findings[("submodel_missing", "submodels")] == "error"


def test_missing_and_unsupported_schema_version(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m.pop("schema_version"))
    assert findings_of(calbin_copy) == {("schema_version_missing", "schema_version"): "error"}
    edit_manifest(calbin_copy, lambda m: m.update(schema_version=2))
    assert findings_of(calbin_copy) == {("schema_version_unsupported", "schema_version"): "error"}


def test_digest_mismatch(calbin_copy: Path):
    weight = calbin_copy / "weights" / "lm_head.npy"
    data = bytearray(weight.read_bytes())
    data[-1] ^= 1
    weight.write_bytes(bytes(data))
    index = [w["file"] for w in read_manifest(calbin_copy)["weights"]].index("weights/lm_head.npy")
    assert findings_of(calbin_copy) == {("digest_mismatch", f"weights[{index}].sha256"): "error"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.update(max_seq_len="256"), "max_seq_len"),
        (lambda m: m["submodels"][1].update(batch=8.0), "submodels[1].batch"),
        (lambda m: m["memory"]["dram_per_chiplet"].update(value="1024"), "memory.dram_per_chiplet.value"),
        (lambda m: m["compatibility"].update(chip="calculet-2c"), "compatibility.chip"),
        (lambda m: m.update(goldens=[]), "goldens"),
        (lambda m: m["model"].update(vocab=True), "model.vocab"),
    ],
)
def test_fields_of_the_wrong_json_type(calbin_copy: Path, change, field):
    edit_manifest(calbin_copy, change)
    findings = findings_of(calbin_copy)
    assert findings[("field_type", field)] == "error"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m["dtypes"].update(logits="bf17"), "dtypes.logits"),
        (lambda m: m["dtypes"].update(v_cache="f32"), "dtypes.v_cache"),
        (lambda m: m["submodels"][0]["inputs"][0].update(dtype="int32"), "submodels[0].inputs[0].dtype"),
        (lambda m: m["weights"][0].update(dtype="float"), "weights[0].dtype"),
    ],
)
def test_unknown_dtypes(calbin_copy: Path, change, field):
    edit_manifest(calbin_copy, change)
    assert findings_of(calbin_copy) == {("dtype_unknown", field): "error"}


def test_missing_fields_unknown_fields_and_bad_ranges(calbin_copy: Path):
    def change(m):
        del m["chiplets"]
        m["vendor_notes"] = "hello"
        m["compatibility"]["calrt"] = "0.7.6 or newer"
        m["submodels"][1]["name"] = "prefill"

    edit_manifest(calbin_copy, change)
    assert findings_of(calbin_copy) == {
        ("field_missing", "chiplets"): "error",
        ("unknown_field", "vendor_notes"): "warning",
        ("compat_range_invalid", "compatibility.calrt"): "error",
        ("submodel_name_duplicate", "submodels[1].name"): "error",
    }


def test_file_paths_may_not_leave_the_package(calbin_copy: Path):
    edit_manifest(calbin_copy, lambda m: m["weights"][0].update(file="../outside.npy"))
    assert findings_of(calbin_copy) == {("path_unsafe", "weights[0].file"): "error"}
    edit_manifest(calbin_copy, lambda m: m["weights"][0].update(file="weights/gone.npy"))
    assert findings_of(calbin_copy) == {("file_missing", "weights[0].file"): "error"}


def test_unreadable_packages(tmp_path: Path):
    assert [f.code for f in validate(tmp_path / "nothing")] == ["package_missing"]
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    assert [f.code for f in validate(tmp_path / "junk.tar")] == ["package_unreadable"]
    (tmp_path / "empty").mkdir()
    assert [f.code for f in validate(tmp_path / "empty")] == ["manifest_missing"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / MANIFEST).write_text("{not json")
    assert [f.code for f in validate(tmp_path / "bad")] == ["manifest_invalid"]


def tar_with(path: Path, member: tarfile.TarInfo, built_calbin: Path) -> Path:
    manifest = (built_calbin / MANIFEST).read_bytes()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    "bad",
    [
        member("/etc/evil"),
        member("weights/../../evil"),
        member("weights/link.npy", tarfile.SYMTYPE, "/etc/passwd"),
        member("weights/inside-link.npy", tarfile.SYMTYPE, "lm_head.npy"),
        member("weights/hard.npy", tarfile.LNKTYPE, "manifest.json"),
        member("dev/null", tarfile.CHRTYPE),
        member("dev/fifo", tarfile.FIFOTYPE),
    ],
)
def test_unsafe_tar_members_are_refused(tmp_path: Path, built_calbin: Path, bad: tarfile.TarInfo):
    path = tar_with(tmp_path / "bad.tar", bad, built_calbin)
    unsafe = [f for f in validate(path) if f.code == "tar_member_unsafe"]
    assert [(f.field, f.severity) for f in unsafe] == [(bad.name, "error")]


def test_duplicate_tar_members_are_refused(tmp_path: Path, built_calbin: Path):
    path = tar_with(tmp_path / "dup.tar", member(MANIFEST), built_calbin)
    assert [f.code for f in validate(path) if f.code == "tar_member_unsafe"] == ["tar_member_unsafe"]


def test_a_tar_is_read_without_extracting_it(monkeypatch: pytest.MonkeyPatch, built_calbin_tar: Path, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError("nothing may be extracted")

    monkeypatch.setattr(tarfile.TarFile, "extract", refuse)
    monkeypatch.setattr(tarfile.TarFile, "extractall", refuse)
    monkeypatch.chdir(tmp_path)
    assert read_manifest(built_calbin_tar)["schema_version"] == 1
    assert validate(built_calbin_tar) == []
    assert list(tmp_path.iterdir()) == []


def test_goldens_must_fit_the_model(calbin_copy: Path):
    def change(m):
        tensors = m["goldens"]["tensors"]
        decode = next(t for t in tensors if t["name"] == "decode_logits")
        decode["shape"] = [16, 500]
        m["goldens"]["tensors"] = [t for t in tensors if t["name"] != "decode_input_ids"]

    edit_manifest(calbin_copy, change)
    findings = findings_of(calbin_copy)
    assert findings[("golden_missing", "goldens.tensors")] == "error"
    assert ("golden_shape_mismatch", "goldens.tensors[2]") in findings  # decode_logits, after the removal
