"""A build's outputs against what was delivered: the whole file, or every part by digest (image blobs written
as files or inside a tar the build wrote), and each missing part named."""

import hashlib
import json

from acceptance.inspection.delivered import Delivered, archive_parts, check_built_is_delivered, image_parts
from acceptance.inspection.oci import check_oci_archive
from tests.inspection_builders import oci_image_files, only_manifest, tar_bytes, write_oci_archive


def image(tmp_path, **options) -> Delivered:
    archive = write_oci_archive(tmp_path / "image.tar", oci_image_files(**options))
    report = check_oci_archive(archive)
    assert report.passed, report.findings
    return Delivered("the image", hashlib.sha256(archive.read_bytes()).hexdigest(), image_parts(report.images))


def test_the_delivered_archive_itself_is_the_delivery(tmp_path):
    delivered = image(tmp_path)
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "copy.tar").write_bytes((tmp_path / "image.tar").read_bytes())
    report = check_built_is_delivered(tmp_path / "built", [delivered])
    assert report.passed and report.checked["found_as"] == {"whole": "copy.tar"}


def test_blobs_written_as_files_or_inside_another_tar_are_the_delivery(tmp_path):
    delivered = image(tmp_path)
    files = oci_image_files()
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "repacked.tar").write_bytes(tar_bytes({f"./{name}": data for name, data in files.items()}))
    report = check_built_is_delivered(tmp_path / "built", [delivered])
    assert report.passed, report.findings
    assert set(report.checked["found_as"]) == {"config", "layer 1"}


def test_each_part_the_build_did_not_write_is_named(tmp_path):
    delivered = image(tmp_path, extra_layers=({"etc/a": b"1"}, {"etc/b": b"2"}, {"etc/c": b"3"}))
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "out.txt").write_text("hi\n")
    report = check_built_is_delivered(tmp_path / "built", [delivered])
    _name, manifest = only_manifest(oci_image_files(extra_layers=({"etc/a": b"1"}, {"etc/b": b"2"}, {"etc/c": b"3"})))
    assert [f.code for f in report.findings] == ["build_not_delivered"]
    assert report.findings[0].message == (
        f"the build's output is not the image: it did not write its config {manifest['config']['digest']}, "
        f"layer 1 {manifest['layers'][0]['digest']}, layer 2 {manifest['layers'][1]['digest']} (and 2 more)"
    )
    assert set(report.findings[0].detail["missing"]) == {"config", "layer 1", "layer 2", "layer 3", "layer 4"}


def test_one_of_several_deliveries_is_enough_and_each_is_named_when_none_is_written(tmp_path):
    package_files = {"pkg/info.json": json.dumps({"batch": 8}).encode(), "pkg/weights.bin": b"\0" * 32}
    (tmp_path / "package.tar").write_bytes(tar_bytes(package_files))
    package = Delivered("the package", "0" * 64, archive_parts(tmp_path / "package.tar"))
    assert package.parts == {name: f"sha256:{hashlib.sha256(data).hexdigest()}" for name, data in package_files.items()}
    built = tmp_path / "built"
    (built / "pkg").mkdir(parents=True)
    (built / "pkg" / "info.json").write_bytes(package_files["pkg/info.json"])
    report = check_built_is_delivered(built, [image(tmp_path), package])
    assert [f.detail["artifact"] for f in report.findings] == ["the image", "the package"]
    assert "did not write its pkg/weights.bin" in report.findings[1].message
    (built / "pkg" / "weights.bin").write_bytes(package_files["pkg/weights.bin"])
    report = check_built_is_delivered(built, [image(tmp_path), package])
    assert report.passed and report.checked["artifact"] == "the package"
