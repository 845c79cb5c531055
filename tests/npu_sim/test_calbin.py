import io
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from npu_sim.calbin import build_calbin, read_manifest, validate
from npu_sim.calbin.layout import MODEL_MEMORY, PACKAGE_INFO, PARAM_TABLE
from tests.npu_sim.packages import change_golden, replace_text, resum, seed_package, set_line

PREFILL = "prefill/submodel_memory_reserved_info.txt"
DECODE = "decode/submodel_memory_reserved_info.txt"


def findings_of(path: Path) -> dict[tuple[str, str], str]:
    """(code, field) -> severity."""
    return {(f.code, f.field): f.severity for f in validate(path)}


def test_a_built_package_has_no_findings(built_calbin: Path, built_calbin_tar: Path):
    assert validate(built_calbin) == []
    assert validate(built_calbin_tar) == []
    assert read_manifest(built_calbin) == read_manifest(built_calbin_tar)


def test_the_package_is_laid_out_as_the_toolchain_lays_it_out(built_calbin: Path):
    names = sorted(p.relative_to(built_calbin).as_posix() for p in built_calbin.rglob("*") if p.is_file())
    assert names == [
        "SHA256SUMS",
        "__Tokenizer/config.json",
        DECODE,
        "golden/golden.npz",
        MODEL_MEMORY,
        PACKAGE_INFO,
        "param_blk0.bin",
        "param_blk1.bin",
        PARAM_TABLE,
        PREFILL,
    ]
    memory = (built_calbin / MODEL_MEMORY).read_text().splitlines()
    assert memory[2].startswith("device_memory_required: ") and memory[2].endswith(" B")  # line 3, as A16 cites
    manifest = read_manifest(built_calbin)
    assert manifest["decode_batch"] == 8 and manifest["max_seq_len"] == 256 and manifest["layout"] == "tp"
    # The embedding lives on chip 0 only (M11), so chip 0's block is the larger one, as A02 > A03.
    blocks = {b["file"]: b for b in manifest["param_blocks"]}
    assert blocks["param_blk0.bin"]["chip_mask"] == "0x1" and blocks["param_blk1.bin"]["chip_mask"] == "0x2"
    assert blocks["param_blk0.bin"]["size"] > blocks["param_blk1.bin"]["size"]


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
    assert (other / "param_blk0.bin").read_bytes() != (first / "param_blk0.bin").read_bytes()


def test_a16_memory_in_an_impossible_unit(calbin_copy: Path):
    set_line(calbin_copy, MODEL_MEMORY, "device_memory_required", "16777216 MB")
    [finding] = validate(calbin_copy)
    assert (finding.code, finding.severity) == ("memory_exceeds_device", "error")
    assert finding.field == f"{MODEL_MEMORY}:device_memory_required" and finding.line == 3
    assert "16.0 TiB" in finding.message and "read as bytes it would be 16.0 MiB" in finding.message


def test_understated_device_memory_is_a_warning(calbin_copy: Path):
    set_line(calbin_copy, MODEL_MEMORY, "device_memory_required", "1 KiB")
    assert findings_of(calbin_copy) == {("memory_understated", f"{MODEL_MEMORY}:device_memory_required"): "warning"}


@pytest.mark.parametrize(("key", "value"), [("chip0.dram_reserved", "17 GiB"), ("chip1.sram_reserved", "33 MiB")])
def test_a05_a06_reservations_beyond_the_chiplet(calbin_copy: Path, key: str, value: str):
    set_line(calbin_copy, MODEL_MEMORY, key, value)
    findings = findings_of(calbin_copy)
    assert findings[("memory_exceeds_device", f"{MODEL_MEMORY}:{key}")] == "error"


def test_unknown_memory_unit(calbin_copy: Path):
    set_line(calbin_copy, MODEL_MEMORY, "device_memory_required", "2 MiBs")
    assert findings_of(calbin_copy) == {("memory_unit_unknown", f"{MODEL_MEMORY}:device_memory_required"): "error"}


@pytest.mark.parametrize("line", ["smodel_type: llm_decode", "smodel_type llm_decode"])
def test_a17_prefill_labelled_decode(calbin_copy: Path, line: str):
    replace_text(calbin_copy, PREFILL, "smodel_type: llm_prefill", line)
    findings = validate(calbin_copy)
    [mismatch] = [f for f in findings if f.code == "smodel_type_mismatch"]
    assert (mismatch.field, mismatch.severity, mismatch.line) == (f"{PREFILL}:smodel_type", "error", 3)
    assert "takes 256 tokens per lane, which is llm_prefill" in mismatch.message
    # The sub-model is still the prefill by its input: the label is the one defect, not a missing prefill.
    assert set(findings_of(calbin_copy)) == {("smodel_type_mismatch", f"{PREFILL}:smodel_type")}


@pytest.mark.parametrize(
    ("mask", "code"),
    [("0x0", "param_mask_empty"), ("0x3", "param_mask_shared"), ("0x2", "param_mask_mismatch")],
)
def test_a07_a_block_on_no_chiplet_on_both_or_on_the_other(calbin_copy: Path, mask: str, code: str):
    set_line(calbin_copy, MODEL_MEMORY, "param_blk0.chip_mask", mask)
    assert findings_of(calbin_copy) == {(code, f"{MODEL_MEMORY}:param_blk0.chip_mask"): "error"}


def test_a09_a10_logits_shape_and_a11_d2h_size(calbin_copy: Path):
    set_line(calbin_copy, DECODE, "output0.shape", "[8,1,500]", digests=False)
    set_line(calbin_copy, DECODE, "output0.size", "8000")
    # A shape the model does not have; its size agrees with the shape, so the D2H is wrong for the model too.
    assert findings_of(calbin_copy) == {
        ("io_shape_mismatch", f"{DECODE}:output0.shape"): "error",
        ("io_size_mismatch", f"{DECODE}:output0.size"): "error",
    }
    [a11] = [f for f in validate(calbin_copy) if f.code == "io_size_mismatch"]
    assert a11.message == "the D2H of BF16 logits is 8 x 512 x 2 = 8,192 bytes, not 8,000 (A11)"
    set_line(calbin_copy, DECODE, "output0.shape", "[8,1,512]", digests=False)
    set_line(calbin_copy, DECODE, "output0.size", "8192")
    set_line(calbin_copy, PREFILL, "output0.size", "512")
    [finding] = [f for f in validate(calbin_copy) if f.code == "io_size_mismatch"]
    assert finding.field == f"{PREFILL}:output0.size"
    assert "BF16[1, 1, 512] is 1024 bytes, the file says 512" in finding.message


def test_the_seeds_own_package_text_is_caught(tmp_path: Path):
    """The current calbin's metadata as the seed quotes it (A05, A06, A09-A11, A16, A17), at full scale."""
    root = seed_package(tmp_path / "seed-package")
    (root / PACKAGE_INFO).write_text(
        "schema_version: 2\nname: qwen3-30b-a3b\narchitecture: qwen3_moe\nlayout: tp\nfeatures:\n"
        "weight_dtype: f32\nactivation_dtype: f32\nk_cache_dtype: bf16\nv_cache_dtype: bf16\nlogits_dtype: bf16\n"
        "prefill_lengths: dynamic\nsubmodels: prefill decode\ncompat.calrt: >=0.7.6,<0.8\ncompat.driver: >=2.3\n"
        "compat.firmware: >=1.8\ncompat.chip: calculet-2c\n"
    )
    findings = {(f.code, f.field) for f in validate(root)}
    assert ("memory_exceeds_device", f"{MODEL_MEMORY}:device_memory_required") in findings  # A16
    assert ("smodel_type_mismatch", f"{PREFILL}:smodel_type") in findings  # A17
    assert not any(code.startswith("io_") or code.startswith("param_mask") for code, _ in findings)  # A05-A11 fine
    set_line(root, DECODE, "output0.size", "151936", digests=False)
    [a11] = [f for f in validate(root) if f.code == "io_size_mismatch"]
    assert "1 x 151936 x 2 = 303,872 bytes" in a11.message or "is 303872 bytes" in a11.message


def test_schema_version_and_legacy_packages(calbin_copy: Path, tmp_path: Path):
    set_line(calbin_copy, PACKAGE_INFO, "schema_version", None)
    assert findings_of(calbin_copy) == {("field_missing", f"{PACKAGE_INFO}:schema_version"): "error"}
    set_line(calbin_copy, PACKAGE_INFO, "schema_version", "3")
    assert findings_of(calbin_copy) == {("schema_version_unsupported", f"{PACKAGE_INFO}:schema_version"): "error"}
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "manifest.json").write_text('{"schema_version": 1}')
    [finding] = validate(legacy)
    assert finding.code == "legacy_manifest" and "convert-calbin" in finding.message


def test_digest_mismatch(calbin_copy: Path):
    block = calbin_copy / "param_blk1.bin"
    data = bytearray(block.read_bytes())
    data[-1] ^= 1
    block.write_bytes(bytes(data))
    assert findings_of(calbin_copy) == {("digest_mismatch", "param_blk1.bin"): "error"}


@pytest.mark.parametrize(
    ("file", "key", "value"),
    [
        (DECODE, "batch", "8.0"),
        (MODEL_MEMORY, "chip_num", "two"),
        (MODEL_MEMORY, "chip0.dram_reserved", "1024"),
        (DECODE, "input0.shape", "8x1"),
        (PACKAGE_INFO, "compat.chip", ""),
    ],
)
def test_fields_of_the_wrong_type(calbin_copy: Path, file: str, key: str, value: str):
    set_line(calbin_copy, file, key, value)
    assert findings_of(calbin_copy)[("field_type", f"{file}:{key}")] == "error"


@pytest.mark.parametrize(
    ("file", "key", "value"),
    [(DECODE, "input0.dtype", "INT33"), (PACKAGE_INFO, "weight_dtype", "f16"), (PACKAGE_INFO, "v_cache_dtype", "f32")],
)
def test_unknown_dtypes(calbin_copy: Path, file: str, key: str, value: str):
    set_line(calbin_copy, file, key, value)
    assert findings_of(calbin_copy)[("dtype_unknown", f"{file}:{key}")] == "error"


def test_missing_fields_unknown_features_and_bad_ranges(calbin_copy: Path):
    set_line(calbin_copy, MODEL_MEMORY, "chip_num", None, digests=False)
    set_line(calbin_copy, PACKAGE_INFO, "features", "sampling teleport", digests=False)
    set_line(calbin_copy, PACKAGE_INFO, "compat.calrt", "0.7.6 or newer", digests=False)
    set_line(calbin_copy, PACKAGE_INFO, "layout", "zigzag")
    findings = findings_of(calbin_copy)
    assert findings[("field_missing", f"{MODEL_MEMORY}:chip_num")] == "error"
    assert findings[("feature_unknown", f"{PACKAGE_INFO}:features")] == "error"
    assert findings[("compat_range_invalid", f"{PACKAGE_INFO}:compat.calrt")] == "error"
    assert findings[("layout_unknown", f"{PACKAGE_INFO}:layout")] == "error"
    # A sampling package needs its token_ids output and sampling_params input.
    assert findings[("sampling_io_missing", f"{DECODE}:output_num")] == "error"


def test_the_parameter_table_must_cover_the_model_where_the_layout_puts_it(calbin_copy: Path):
    table = (calbin_copy / PARAM_TABLE).read_text().splitlines()
    q_proj_half = next(i for i, line in enumerate(table) if line.startswith("1 layers.0.q_proj "))
    moved = table[q_proj_half].replace("1 layers.0.q_proj", "0 layers.0.q_proj", 1)
    (calbin_copy / PARAM_TABLE).write_text("\n".join(table[:q_proj_half] + [moved] + table[q_proj_half + 1 :]) + "\n")
    resum(calbin_copy)
    findings = findings_of(calbin_copy)
    assert findings[("param_placement", f"{PARAM_TABLE}:{q_proj_half + 1}")] == "error"
    assert findings[("param_missing", PARAM_TABLE)] == "error"


def test_parameter_shapes_and_bounds(calbin_copy: Path):
    replace_text(calbin_copy, PARAM_TABLE, "layers.0.k_proj 147712 f32 [64,32]", "layers.0.k_proj 147712 f32 [64,31]")
    assert ("param_shape_mismatch", f"{PARAM_TABLE}:5") in findings_of(calbin_copy)
    replace_text(calbin_copy, PARAM_TABLE, "layers.0.k_proj 147712 f32 [64,31]", "layers.0.k_proj 99999999 f32 [64,32]")
    assert ("param_out_of_block", f"{PARAM_TABLE}:5") in findings_of(calbin_copy)
    replace_text(calbin_copy, PARAM_TABLE, "layers.0.k_proj 99999999 f32 [64,32]", "layers.0.k_proj 131328 f32 [64,32]")
    assert ("param_overlap", PARAM_TABLE) in findings_of(calbin_copy)


def test_file_paths_may_not_leave_the_package(calbin_copy: Path):
    set_line(calbin_copy, MODEL_MEMORY, "param_blk0.file", "../outside.bin")
    assert findings_of(calbin_copy)[("path_unsafe", f"{MODEL_MEMORY}:param_blk0.file")] == "error"
    set_line(calbin_copy, MODEL_MEMORY, "param_blk0.file", "gone.bin")
    assert findings_of(calbin_copy)[("file_missing", f"{MODEL_MEMORY}:param_blk0.file")] == "error"


def test_unreadable_packages(tmp_path: Path):
    assert [f.code for f in validate(tmp_path / "nothing")] == ["package_missing"]
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    assert [f.code for f in validate(tmp_path / "junk.tar")] == ["package_unreadable"]
    (tmp_path / "empty").mkdir()
    assert [f.code for f in validate(tmp_path / "empty")] == ["package_info_missing"]


def test_goldens_must_be_there_and_fit_the_model(calbin_copy: Path):
    def narrow(arrays):
        arrays["decode_logits"] = arrays["decode_logits"][:, :500]
        arrays["prefill_logits"] = arrays["prefill_logits"][:, :500]

    change_golden(calbin_copy, narrow)
    assert findings_of(calbin_copy) == {("golden_invalid", "golden/golden.npz"): "error"}
    (calbin_copy / "golden/golden.npz").unlink()
    resum(calbin_copy)
    assert findings_of(calbin_copy) == {("golden_missing", "golden/golden.npz"): "error"}


def test_unlisted_files_are_a_warning(calbin_copy: Path):
    (calbin_copy / "notes.txt").write_text("from the vendor")
    assert findings_of(calbin_copy) == {("file_unlisted", "notes.txt"): "warning"}


def tar_with(path: Path, member: tarfile.TarInfo, built_calbin: Path) -> Path:
    info_bytes = (built_calbin / PACKAGE_INFO).read_bytes()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(PACKAGE_INFO)
        info.size = len(info_bytes)
        tar.addfile(info, io.BytesIO(info_bytes))
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
        member("param_link.bin", tarfile.SYMTYPE, "/etc/passwd"),
        member("inside-link.bin", tarfile.SYMTYPE, "param_blk0.bin"),
        member("hard.bin", tarfile.LNKTYPE, PACKAGE_INFO),
        member("dev/null", tarfile.CHRTYPE),
        member("dev/fifo", tarfile.FIFOTYPE),
    ],
)
def test_unsafe_tar_members_are_refused(tmp_path: Path, built_calbin: Path, bad: tarfile.TarInfo):
    path = tar_with(tmp_path / "bad.tar", bad, built_calbin)
    unsafe = [f for f in validate(path) if f.code == "tar_member_unsafe"]
    assert [(f.field, f.severity) for f in unsafe] == [(bad.name, "error")]


def test_duplicate_tar_members_are_refused(tmp_path: Path, built_calbin: Path):
    path = tar_with(tmp_path / "dup.tar", member(PACKAGE_INFO), built_calbin)
    assert [f.code for f in validate(path) if f.code == "tar_member_unsafe"] == ["tar_member_unsafe"]


def test_a_tar_is_read_without_extracting_it(monkeypatch: pytest.MonkeyPatch, built_calbin_tar: Path, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError("nothing may be extracted")

    monkeypatch.setattr(tarfile.TarFile, "extract", refuse)
    monkeypatch.setattr(tarfile.TarFile, "extractall", refuse)
    monkeypatch.chdir(tmp_path)
    assert read_manifest(built_calbin_tar)["schema_version"] == 2
    assert validate(built_calbin_tar) == []
    assert list(tmp_path.iterdir()) == []


def test_the_golden_out_file_is_the_packages_golden(tmp_path: Path):
    package = build_calbin(tmp_path / "p", decode_batch=2, golden_out=tmp_path / "vendor" / "golden.npz")
    assert (tmp_path / "vendor" / "golden.npz").read_bytes() == (package / "golden/golden.npz").read_bytes()
    lanes = np.load(tmp_path / "vendor" / "golden.npz")["lane_decode_logits"]
    assert lanes.shape == (2, 6, 512)


def test_build_refuses_what_it_cannot_build(tmp_path: Path):
    for features, message in (
        (("tp", "ep"), "at most one layout"),
        (("teleport",), "unknown feature"),
        (("s8", "ep"), "s8 is built for the tp and single_chiplet layouts"),
    ):
        with pytest.raises(ValueError, match=message):
            build_calbin(tmp_path / "x", features=features)
    with pytest.raises(ValueError, match="no op cumsum"):
        build_calbin(tmp_path / "y", cpu_fallback=["cumsum"])
    shutil.rmtree(tmp_path, ignore_errors=True)
