"""Every finding code validation has, each produced by one edit of a good package.

The table is complete: a code validation can produce that has no edit here fails
`test_every_finding_code_has_an_edit_here`. Detailed messages are tested in test_calbin.py.
"""

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from npu_sim.calbin import validate
from npu_sim.calbin.layout import CHECKSUMS, GOLDEN, MODEL_CONFIG, MODEL_MEMORY, PACKAGE_INFO, PARAM_TABLE
from tests.npu_sim.packages import change_golden, replace_text, resum, set_line, vendor_form

PREFILL = "prefill/submodel_memory_reserved_info.txt"
DECODE = "decode/submodel_memory_reserved_info.txt"
Edit = Callable[[Path], None]


def lines(*edits: tuple[str, str, str | None]) -> Edit:
    """`file: key: value` edits (value None removes the key), digests rewritten after the last."""

    def edit(root: Path) -> None:
        for file, key, value in edits:
            set_line(root, file, key, value, digests=False)
        resum(root)

    return edit


def at(file: str, key: str, value: str | None) -> tuple[Edit, str]:
    """One `file: key: value` edit, and the finding pointing at that key."""
    return lines((file, key, value)), f"{file}:{key}"


def text(file: str, old: str, new: str) -> Edit:
    return lambda root: replace_text(root, file, old, new)


def config(**changes: object) -> Edit:
    def edit(root: Path) -> None:
        values = json.loads((root / MODEL_CONFIG).read_text())
        (root / MODEL_CONFIG).write_text(json.dumps(values | changes))
        resum(root)

    return edit


def write(file: str, data: bytes, digests: bool = True) -> Edit:
    def edit(root: Path) -> None:
        (root / file).write_bytes(data)
        if digests:
            resum(root)

    return edit


def param_line(number: int, change: Callable[[str], str]) -> Edit:
    """Change line `number` (1-based) of the parameter table."""

    def edit(root: Path) -> None:
        table = (root / PARAM_TABLE).read_text().splitlines()
        table[number - 1] = change(table[number - 1])
        (root / PARAM_TABLE).write_text("\n".join(table) + "\n")
        resum(root)

    return edit


def whole(make: Callable[[Path], None]) -> Edit:
    """Replace the package at its path with what `make` puts there."""

    def edit(root: Path) -> None:
        shutil.rmtree(root)
        make(root)

    return edit


def unsafe_tar(root: Path) -> None:
    with tarfile.open(root, "w") as archive:
        member = tarfile.TarInfo("../escape.txt")
        member.size = 2
        archive.addfile(member, io.BytesIO(b"hi"))


def without_lane(arrays: dict[str, np.ndarray]) -> None:
    arrays["decode_logits"] = arrays["decode_logits"][:, :100]


def legacy(root: Path) -> None:
    root.mkdir()
    (root / "manifest.json").write_text("{}")


def no_golden(root: Path) -> None:
    (root / GOLDEN).unlink()
    resum(root)


def bad_digest_line(root: Path) -> None:
    path = root / CHECKSUMS
    path.write_text("not a digest line\n" + path.read_text())


S8_ON_EP = lines(
    (PACKAGE_INFO, "features", "s8"),
    (PACKAGE_INFO, "weight_dtype", "s8"),
    (PACKAGE_INFO, "activation_dtype", "s8"),
    (PACKAGE_INFO, "v_cache_dtype", "s8"),
    (PACKAGE_INFO, "layout", "ep"),
)
SAMPLING_IO = lines(
    (DECODE, "output_num", "2"),
    (DECODE, "output1.name", "token_ids"),
    (DECODE, "output1.shape", "[8,1]"),
    (DECODE, "output1.dtype", "INT32"),
    (DECODE, "output1.size", "32"),
)
SHAPE_500 = lines((DECODE, "output0.shape", "[8,1,500]"), (DECODE, "output0.size", "8000"))
ON_CHIPLET_0 = lines((PACKAGE_INFO, "layout", "single_chiplet"), (PACKAGE_INFO, "chip_affinity", "0"))

# code -> (the edit, the finding's field; None where the package as a whole cannot be read)
CASES: dict[str, tuple[Edit, str | None]] = {
    "package_missing": (whole(lambda root: None), None),
    "package_unreadable": (whole(lambda root: root.write_bytes(b"not a package" * 50)), None),
    "package_info_missing": (whole(lambda root: root.mkdir()), None),
    "legacy_manifest": (whole(legacy), None),
    "tar_member_unsafe": (whole(unsafe_tar), "../escape.txt"),
    "text_unreadable": (write(DECODE, b"smodel_type: \xff\xfe\n"), DECODE),
    "line_unreadable": (text(PACKAGE_INFO, "layout: tp\n", "layout: tp\nnot a key: x\n"), f"{PACKAGE_INFO}:6"),
    "field_duplicate": (text(PACKAGE_INFO, "layout: tp\n", "layout: tp\nlayout: tp\n"), f"{PACKAGE_INFO}:layout"),
    "field_missing": at(MODEL_MEMORY, "chip_num", None),
    "field_type": at(DECODE, "batch", "eight"),
    "schema_version_unsupported": at(PACKAGE_INFO, "schema_version", "3"),
    "architecture_unsupported": at(PACKAGE_INFO, "architecture", "llama"),
    "layout_unknown": at(PACKAGE_INFO, "layout", "zigzag"),
    "feature_unknown": at(PACKAGE_INFO, "features", "teleport"),
    "chip_affinity_invalid": at(PACKAGE_INFO, "chip_affinity", "1"),
    "dtype_unknown": at(PACKAGE_INFO, "weight_dtype", "f16"),
    "s8_inconsistent": at(PACKAGE_INFO, "weight_dtype", "s8"),
    "s8_layout": (S8_ON_EP, f"{PACKAGE_INFO}:layout"),
    "compat_range_invalid": at(PACKAGE_INFO, "compat.calrt", "0.7.6 or newer"),
    "chip_unknown": at(PACKAGE_INFO, "compat.chip", "calculet-9x"),
    "timing_preset_unknown": at(PACKAGE_INFO, "timing_preset", "huge"),
    "prefill_length_invalid": at(PACKAGE_INFO, "prefill_lengths", "64 1000"),
    "config_invalid": (write(MODEL_CONFIG, b"{not json"), MODEL_CONFIG),
    "model_invalid": (config(num_key_value_heads=3), MODEL_CONFIG),
    "max_seq_len_differs": (config(max_position_embeddings=300), MODEL_CONFIG),
    "memory_unit_unknown": at(MODEL_MEMORY, "device_memory_required", "2 MiBs"),
    "memory_exceeds_device": at(MODEL_MEMORY, "device_memory_required", "16777216 MB"),
    "memory_understated": at(MODEL_MEMORY, "device_memory_required", "1 KiB"),
    "chip_num_mismatch": at(MODEL_MEMORY, "chip_num", "3"),
    "layout_chiplets_mismatch": (lines((PACKAGE_INFO, "layout", "multi_board")), f"{MODEL_MEMORY}:chip_num"),
    "param_mask_empty": at(MODEL_MEMORY, "param_blk0.chip_mask", "0x0"),
    "param_mask_shared": at(MODEL_MEMORY, "param_blk0.chip_mask", "0x3"),
    "param_mask_mismatch": at(MODEL_MEMORY, "param_blk0.chip_mask", "0x2"),
    "param_mask_unused": (ON_CHIPLET_0, f"{MODEL_MEMORY}:param_blk1.chip_mask"),
    "param_block_num_mismatch": at(MODEL_MEMORY, "param_block_num", "3"),
    "param_block_size": (lines((MODEL_MEMORY, "param_blk1.size", "366084")), f"{MODEL_MEMORY}:param_blk1.file"),
    "param_table_invalid": (param_line(2, lambda line: "0 embed_tokens zero f32"), f"{PARAM_TABLE}:2"),
    "param_placement": (param_line(5, lambda line: "1" + line[1:]), f"{PARAM_TABLE}:5"),
    "param_missing": (param_line(3, lambda line: "# " + line), PARAM_TABLE),
    "param_shape_mismatch": (param_line(5, lambda line: line.replace("[64,32]", "[64,31]")), f"{PARAM_TABLE}:5"),
    "param_out_of_block": (param_line(5, lambda line: line.replace(" 147712 ", " 99999999 ")), f"{PARAM_TABLE}:5"),
    "param_overlap": (param_line(5, lambda line: line.replace(" 147712 ", " 131328 ")), PARAM_TABLE),
    "submodel_missing": at(PACKAGE_INFO, "submodels", "decode"),
    "submodel_name_duplicate": (lines((PACKAGE_INFO, "submodels", "prefill decode decode")), f"{DECODE}:submodel_name"),
    "submodel_name_mismatch": at(DECODE, "submodel_name", "decoder"),
    "submodel_mask_mismatch": at(DECODE, "chip_mask", "0x1"),
    "submodel_shape": (
        lines((DECODE, "input0.size", "16"), (DECODE, "input0.shape", "[4,1]")),
        f"{DECODE}:input0.shape",
    ),
    "smodel_type_unknown": at(DECODE, "smodel_type", "llm_encode"),
    "smodel_type_mismatch": at(PREFILL, "smodel_type", "llm_decode"),
    "io_missing": at(DECODE, "output0.name", "scores"),
    "io_shape_mismatch": (SHAPE_500, f"{DECODE}:output0.shape"),
    "io_dtype_mismatch": at(DECODE, "output0.dtype", "FP16"),
    "io_size_mismatch": at(DECODE, "output0.size", "8000"),
    "sampling_io_missing": (lines((PACKAGE_INFO, "features", "sampling")), f"{DECODE}:output_num"),
    "sampling_io_undeclared": (SAMPLING_IO, f"{DECODE}:output_num"),
    "golden_missing": (no_golden, GOLDEN),
    "golden_invalid": (lambda root: change_golden(root, without_lane), GOLDEN),
    "path_unsafe": at(MODEL_MEMORY, "param_blk0.file", "../outside.bin"),
    "file_missing": at(MODEL_MEMORY, "param_blk0.file", "gone.bin"),
    "digest_invalid": (bad_digest_line, f"{CHECKSUMS}:1"),
    "digest_mismatch": (write(PARAM_TABLE, b"# emptied\n", digests=False), PARAM_TABLE),
    "file_unlisted": (write("notes.txt", b"hello\n", digests=False), "notes.txt"),
    "checksums_absent": (vendor_form, CHECKSUMS),
}


def test_every_finding_code_has_an_edit_here(produced_finding_codes):
    assert set(CASES) == produced_finding_codes


@pytest.mark.parametrize("code", CASES)
def test_each_edit_gives_its_finding(calbin_copy: Path, code: str):
    edit, field = CASES[code]
    edit(calbin_copy)
    findings = [(f.code, f.field) for f in validate(calbin_copy)]
    assert any(c == code and (field is None or f == field) for c, f in findings), findings
