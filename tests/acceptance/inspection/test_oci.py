import hashlib
import json
import tracemalloc

import pytest

from acceptance.inspection.oci import check_oci_archive
from tests.inspection_builders import (
    COMPILER_COMMITS,
    COMPONENT_FILES,
    COMPONENTS,
    SPDX,
    add_blob,
    build_oci_archive,
    compiler_sbom,
    component_sbom,
    oci_image_files,
    only_manifest,
    replace_manifest,
    tar_bytes,
    write_oci_archive,
)


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


@pytest.mark.parametrize("sbom", ["file", "artifact", "cyclonedx"])
def test_a_complete_image_passes(tmp_path, sbom):
    files = oci_image_files(sbom=sbom)
    report = check_oci_archive(write_oci_archive(tmp_path / "image.oci.tar", files))
    assert report.passed, report.findings
    assert report.checked["layout_version"] == "1.0.0"
    blobs = [name.split("/")[-1] for name in files if name.startswith("blobs/")]
    assert {digest.split(":")[1] for digest, b in report.blobs.items() if b["verified"]} == set(blobs)
    assert report.licence == "LICENSE"
    assert report.sbom["format"] == ("CycloneDX" if sbom == "cyclonedx" else "SPDX")
    assert report.as_dict()["passed"] is True


def test_a_gzipped_archive_is_read_too(tmp_path):
    path = tmp_path / "image.oci.tar.gz"
    path.write_bytes(tar_bytes(oci_image_files(), compress=True))
    assert check_oci_archive(path).passed


def test_an_sbom_attached_apart(tmp_path):
    files = oci_image_files(sbom=None)
    archive = write_oci_archive(tmp_path / "image.oci.tar", files)
    assert codes(check_oci_archive(archive)) == ["sbom_missing"]
    attached = tmp_path / "image.spdx.json"
    attached.write_text(json.dumps(SPDX))
    report = check_oci_archive(archive, sbom=attached)
    assert report.passed and report.sbom["where"] == "attached image.spdx.json"
    attached.write_text(json.dumps({"name": "not an sbom"}))
    assert codes(check_oci_archive(archive, sbom=attached)) == ["sbom_invalid"]


def test_a_layer_changed_after_the_manifest_fails_with_its_digest(tmp_path):
    files = oci_image_files()
    _, manifest = only_manifest(files)
    layer = manifest["layers"][0]["digest"]
    name = "blobs/sha256/" + layer.split(":")[1]
    files[name] = files[name][:-1] + bytes([files[name][-1] ^ 1])  # same size, one bit off
    report = check_oci_archive(write_oci_archive(tmp_path / "image.oci.tar", files))
    assert codes(report) == ["digest_mismatch"]
    assert report.findings[0].detail["digest"] == layer
    assert report.findings[0].detail["actual"] == "sha256:" + hashlib.sha256(files[name]).hexdigest()


def test_a_missing_layer_and_a_wrong_size(tmp_path):
    files = oci_image_files()
    manifest_name, manifest = only_manifest(files)
    del files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    report = check_oci_archive(write_oci_archive(tmp_path / "missing.oci.tar", files))
    assert codes(report) == ["blob_missing"]
    assert report.findings[0].detail["digest"] == manifest["layers"][0]["digest"]

    files = oci_image_files()
    manifest_name, manifest = only_manifest(files)
    manifest["config"]["size"] += 1
    replace_manifest(files, manifest)
    report = check_oci_archive(write_oci_archive(tmp_path / "size.oci.tar", files))
    assert codes(report) == ["size_mismatch"]
    assert report.findings[0].detail["expected"] == report.findings[0].detail["size"] + 1


def test_a_missing_manifest_layout_and_index(tmp_path):
    files = oci_image_files()
    manifest_name, _ = only_manifest(files)
    del files[manifest_name]
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "a.tar", files))) == ["blob_missing"]

    files = oci_image_files()
    del files["oci-layout"]
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "b.tar", files))) == ["layout_missing"]

    files = oci_image_files()
    files["oci-layout"] = b'{"imageLayoutVersion": "2.0.0"}'
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "c.tar", files))) == ["layout_invalid"]

    files = oci_image_files()
    del files["index.json"]
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "d.tar", files))) == ["index_missing"]

    files = oci_image_files()
    files["index.json"] = b"{not json"
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "e.tar", files))) == ["index_invalid"]


def test_no_sbom_and_no_licence_are_named(tmp_path):
    report = check_oci_archive(write_oci_archive(tmp_path / "bare.tar", oci_image_files(sbom=None, licence=False)))
    assert codes(report) == ["sbom_missing", "licence_missing"]
    files = oci_image_files(sbom=None)
    files["sbom.spdx.json"] = json.dumps({"spdxVersion": "SPDX-3.0", "packages": []}).encode()
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "v3.tar", files))) == ["sbom_invalid"]


def test_a_licence_as_a_titled_blob(tmp_path):
    files = oci_image_files(licence=False)
    manifest_name, manifest = only_manifest(files)
    manifest["layers"].append(
        add_blob(files, b"Apache-2.0\n", "text/plain", annotations={"org.opencontainers.image.title": "LICENSE.txt"})
    )
    replace_manifest(files, manifest)
    report = check_oci_archive(write_oci_archive(tmp_path / "image.tar", files))
    assert report.passed, report.findings
    assert report.licence.startswith("LICENSE.txt (sha256:")


def test_what_is_not_an_archive(tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"\x00not a tar at all" * 10)
    assert codes(check_oci_archive(junk)) == ["archive_unreadable"]
    assert codes(check_oci_archive(tmp_path / "absent.tar")) == ["archive_missing"]


def test_a_large_layer_is_hashed_in_bounded_memory(tmp_path):
    big = bytes(range(256)) * (256 * 1024)  # 64 MiB
    archive = build_oci_archive(tmp_path / "big.tar", extra_layers=({"opt/calcc/weights.bin": big},))
    del big
    tracemalloc.start()
    report = check_oci_archive(archive)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.passed, report.findings
    assert sum(b["size"] for b in report.blobs.values()) > 64 * 1024 * 1024
    assert peak < 16 * 1024 * 1024, peak


def test_a_layer_that_unpacks_to_another_tar_than_its_config_says(tmp_path):
    files = oci_image_files(extra_layers=({"etc/motd": b"hello"},))
    manifest_name, manifest = only_manifest(files)
    config_name = "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]
    config = json.loads(files[config_name])
    config["rootfs"]["diff_ids"][0] = "sha256:" + "0" * 64
    del files[config_name]
    manifest["config"] = add_blob(files, json.dumps(config).encode(), manifest["config"]["mediaType"])
    replace_manifest(files, manifest)
    report = check_oci_archive(write_oci_archive(tmp_path / "image.tar", files))
    assert codes(report) == ["diff_id_mismatch"]
    assert report.findings[0].detail["digest"] == manifest["layers"][0]["digest"]
    config["rootfs"]["diff_ids"].pop()
    del files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]]
    manifest["config"] = add_blob(files, json.dumps(config).encode(), manifest["config"]["mediaType"])
    replace_manifest(files, manifest)
    assert codes(check_oci_archive(write_oci_archive(tmp_path / "short.tar", files))) == ["config_invalid"]


# V07: the SBOM's components compared with the files the image holds.


def component_image(tmp_path, *, sbom=None, layers=(COMPONENT_FILES,), kind="file"):
    files = oci_image_files(sbom=kind, extra_layers=layers, sbom_document=sbom or component_sbom())
    return write_oci_archive(tmp_path / "components.oci.tar", files)


def test_an_sbom_listing_every_compiled_file_of_the_image_by_digest_passes(tmp_path):
    report = check_oci_archive(component_image(tmp_path), components=True)
    assert report.passed, report.findings
    assert report.checked["sbom_files"] == 4
    # Without `components` nothing is compared: the same stock SBOM naming no file passes as before.
    assert check_oci_archive(build_oci_archive(tmp_path / "stock.tar")).passed


def test_a_component_the_image_does_not_hold_is_a_mismatch_naming_it(tmp_path):
    layer = {path: data for path, data in COMPONENT_FILES.items() if "kernels" not in path}
    report = check_oci_archive(component_image(tmp_path, layers=(layer,)), components=True)
    assert codes(report) == ["sbom_mismatch"]
    assert report.findings[0].message == (
        "SBOM component cal-kernels: opt/cal/kernels/matmul.o is not in the image (missing)"
    )


def test_a_component_whose_file_differs_is_a_mismatch_naming_both_digests(tmp_path):
    layer = {**COMPONENT_FILES, "opt/cal/bin/cal-codegen": b"\x7fELF\x02\x01\x01codegen 2.0.2"}
    report = check_oci_archive(component_image(tmp_path, layers=(layer,)), components=True)
    assert codes(report) == ["sbom_mismatch"]
    message = report.findings[0].message
    assert message.startswith("SBOM component cal-codegen: opt/cal/bin/cal-codegen in the image is sha256:")
    assert hashlib.sha256(layer["opt/cal/bin/cal-codegen"]).hexdigest() in message


def test_a_compiled_file_in_no_component_is_an_extra_naming_it(tmp_path):
    layer = {**COMPONENT_FILES, "opt/cal/kernels/softmax.o": b"\x7fELF\x02\x01\x01kernel softmax"}
    report = check_oci_archive(component_image(tmp_path, layers=(layer,)), components=True)
    assert codes(report) == ["sbom_mismatch"]
    assert "opt/cal/kernels/softmax.o (compiled, sha256:" in report.findings[0].message
    assert report.findings[0].message.endswith("is in the image but in no SBOM component (extra)")
    # A text file (a script, a README) is not a compiled component: it need not be listed.
    text = {**COMPONENT_FILES, "opt/cal/README": b"calcc toolchain\n"}
    assert check_oci_archive(component_image(tmp_path, layers=(text,)), components=True).passed


def test_a_file_a_later_layer_removes_is_missing(tmp_path):
    whiteout = {"opt/cal/lib/.wh.liboplib.a": b""}
    report = check_oci_archive(component_image(tmp_path, layers=(COMPONENT_FILES, whiteout)), components=True)
    assert [f.message for f in report.findings] == [
        "SBOM component cal-oplib: opt/cal/lib/liboplib.a is not in the image (missing)"
    ]


def test_an_sbom_without_files_or_versions_does_not_pass(tmp_path):
    report = check_oci_archive(component_image(tmp_path, sbom=SPDX), components=True)
    assert codes(report) == ["sbom_no_files"]
    unversioned = {**COMPONENTS, "cal-oplib": ("", COMPONENTS["cal-oplib"][1])}
    report = check_oci_archive(component_image(tmp_path, sbom=component_sbom(components=unversioned)), components=True)
    assert [f.message for f in report.findings] == ["SBOM component cal-oplib has no version"]


def test_a_cyclonedx_sbom_is_compared_the_same_way(tmp_path):
    def bom(files):
        return {
            "bomFormat": "CycloneDX",
            "specVersion": "1.5",
            "components": [
                {
                    "type": "library",
                    "name": name,
                    "version": version,
                    "components": [
                        {"type": "file", "name": path, "hashes": [{"alg": "SHA-256", "content": digest(files, path)}]}
                        for path in paths
                    ],
                }
                for name, (version, paths) in COMPONENTS.items()
            ],
        }

    def digest(files, path):
        return hashlib.sha256(files[path]).hexdigest()

    assert check_oci_archive(
        component_image(tmp_path, sbom=bom(COMPONENT_FILES), kind="cyclonedx"), components=True
    ).passed
    other = {**COMPONENT_FILES, "opt/cal/lib/liboplib.a": b"!<arch>\noplib 0.9.4"}
    report = check_oci_archive(component_image(tmp_path, sbom=bom(other), kind="cyclonedx"), components=True)
    assert codes(report) == ["sbom_mismatch"] and "cal-oplib" in report.findings[0].message


# V01: the compiler container holds calcc, and its SBOM gives calcc and TVM at the commits of C03 and C04.


def compiler_image(tmp_path, sbom, *, calcc_in_image=True, cyclonedx=False):
    files = oci_image_files(sbom="cyclonedx" if cyclonedx else "file", sbom_document=sbom)
    if not calcc_in_image:  # a layer whiting the compiler out: the image holds a text file, an SBOM and a licence
        files = oci_image_files(
            sbom="file", sbom_document=sbom, extra_layers=({"usr/bin/.wh.calcc": b"", "usr/share/readme": b"hi"},)
        )
    return write_oci_archive(tmp_path / "compiler.oci.tar", files)


def test_v01_s_container_with_calcc_and_the_seeds_commits_passes(tmp_path):
    report = check_oci_archive(compiler_image(tmp_path, compiler_sbom()), commits=COMPILER_COMMITS)
    assert report.passed, report.findings
    assert report.checked["compiler"] == ["/usr/bin/calcc"]
    assert report.checked["commits"]["tvm"] == ["7aebd1c3f0"]


def test_v01_s_commits_are_read_from_a_cyclonedx_sbom_too(tmp_path):
    sbom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "components": [
            {"type": "application", "name": "calcc", "version": "575c2d9e41"},
            {"type": "library", "name": "tvm", "version": "0.16", "pedigree": {"commits": [{"uid": "7aebd1c3"}]}},
        ],
    }
    report = check_oci_archive(compiler_image(tmp_path, sbom, cyclonedx=True), commits=COMPILER_COMMITS)
    assert report.passed, report.findings


def test_an_image_without_tvm_in_its_sbom_fails_v01_naming_it(tmp_path):
    report = check_oci_archive(compiler_image(tmp_path, compiler_sbom(tvm=None)), commits=COMPILER_COMMITS)
    assert codes(report) == ["commit_missing"]
    assert "no component tvm" in report.findings[0].message and "7aebd1…" in report.findings[0].message


def test_calcc_at_another_commit_fails_v01_quoting_both(tmp_path):
    report = check_oci_archive(compiler_image(tmp_path, compiler_sbom(calcc="a1b2c3d4e5")), commits=COMPILER_COMMITS)
    assert codes(report) == ["commit_mismatch"]
    assert "calcc is at a1b2c3d4e5, not the 575c2d…" in report.findings[0].message


def test_an_image_that_does_not_hold_calcc_fails_v01(tmp_path):
    """A text file, an SBOM and a licence: V07's check or the stock one passes it, V01's does not."""
    image = compiler_image(tmp_path, compiler_sbom(), calcc_in_image=False)
    assert check_oci_archive(image).passed
    report = check_oci_archive(image, commits=COMPILER_COMMITS)
    assert codes(report) == ["compiler_not_in_image"]


@pytest.mark.parametrize(
    "layer",
    [{"usr/bin/calcc": b""}, {"usr/bin/calcc": b"calcc is on its way\n"}],
    ids=["a-zero-byte-file", "a-text-file"],
)
def test_a_calcc_that_is_no_program_fails_v01_naming_it(tmp_path, layer):
    """A layer replacing the compiler with a file of its name: a file called calcc is not a compiler."""
    files = oci_image_files(sbom="file", sbom_document=compiler_sbom(), extra_layers=(layer,))
    report = check_oci_archive(write_oci_archive(tmp_path / "i.tar", files), commits=COMPILER_COMMITS)
    assert codes(report) == ["compiler_not_in_image"]
    assert "usr/bin/calcc is not one (empty, not executable, or neither ELF nor a script)" in report.findings[0].message


REAL_CALCC = "opt/calcc-575c2d/bin/calcc-1.4"


@pytest.mark.parametrize(
    ("options", "held"),
    [
        ({"symlinks": {"usr/bin/calcc": "/" + REAL_CALCC}}, "/usr/bin/calcc -> /" + REAL_CALCC),
        ({"symlinks": {"usr/local/bin/calcc": "../../../" + REAL_CALCC}}, "/usr/local/bin/calcc -> /" + REAL_CALCC),
        # A merged /usr: /bin a link to usr/bin, the only directory of PATH.
        (
            {"symlinks": {"bin": "usr/bin", "usr/bin/calcc": "/" + REAL_CALCC}, "env": ["PATH=/bin"]},
            "/bin/calcc -> /" + REAL_CALCC,
        ),
        ({"compiler_at": "opt/cal/bin/calcc", "env": ["LANG=C", "PATH=/opt/cal/bin:/usr/bin"]}, "/opt/cal/bin/calcc"),
        ({"hardlinks": {"usr/bin/calcc": REAL_CALCC}}, "/usr/bin/calcc -> /" + REAL_CALCC),
    ],
    ids=["absolute-link", "relative-link", "through-a-linked-directory", "on-the-config-s-path", "a-hard-link"],
)
def test_a_calcc_on_the_path_as_a_link_to_the_compiler_passes_v01(tmp_path, options, held):
    """The compiler installed under its own name and linked as calcc from a directory of PATH is the compiler."""
    if "symlinks" in options or "hardlinks" in options:
        options["compiler_at"] = REAL_CALCC
    files = oci_image_files(sbom="file", sbom_document=compiler_sbom(), **options)
    report = check_oci_archive(write_oci_archive(tmp_path / "i.tar", files), commits=COMPILER_COMMITS)
    assert report.passed, report.findings
    assert report.checked["compiler"] == [held]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"compiler_at": "opt/tools/calcc"}, "/opt/tools/calcc is not on the image's PATH (/usr/local/sbin:"),
        (
            {"env": ["PATH=/opt/cal/bin"]},
            "/usr/bin/calcc is not on the image's PATH (/opt/cal/bin)",
        ),
        (
            {"compiler_at": REAL_CALCC, "symlinks": {"usr/bin/calcc": "/opt/calcc/bin/calcc"}},
            "/usr/bin/calcc is a link to /opt/calcc/bin/calcc, which is not in the image",
        ),
        (
            {"compiler_at": REAL_CALCC, "symlinks": {"usr/bin/calcc": "../../../../" + REAL_CALCC}},
            "/usr/bin/calcc is a link leading out of the image",
        ),
        (
            {"compiler_at": REAL_CALCC, "symlinks": {"usr/bin/calcc": "calcc"}},
            "/usr/bin/calcc is a link leading out of the image or in a loop (calcc)",
        ),
    ],
    ids=["off-the-path", "off-the-config-s-path", "a-dangling-link", "a-link-out-of-the-image", "a-link-loop"],
)
def test_a_calcc_off_the_path_or_a_link_to_nothing_fails_v01_naming_it(tmp_path, options, said):
    """Any executable called calcc anywhere used to count; a link was never followed."""
    files = oci_image_files(sbom="file", sbom_document=compiler_sbom(), **options)
    report = check_oci_archive(write_oci_archive(tmp_path / "i.tar", files), commits=COMPILER_COMMITS)
    assert codes(report) == ["compiler_not_in_image"]
    assert said in report.findings[0].message, report.findings[0].message


def _calcc_saying(**fields) -> dict:
    sbom = compiler_sbom(calcc="a1b2c3d4e5")
    sbom["packages"][0].update(fields)
    return sbom


@pytest.mark.parametrize(
    "sbom",
    [
        _calcc_saying(comment="to be rebuilt at 575c2d9e41"),
        _calcc_saying(checksums=[{"algorithm": "SHA1", "checksumValue": "575c2d" + "0" * 34}]),
        {
            **compiler_sbom(),
            "packages": [
                *compiler_sbom()["packages"],
                {"SPDXID": "SPDXRef-calcc-old", "name": "calcc", "versionInfo": "a1b2c3d4e5"},
            ],
        },
    ],
    ids=["in-a-comment", "in-a-checksum", "a-second-calcc-at-another-commit"],
)
def test_a_commit_the_sbom_does_not_give_as_calcc_s_fails_v01(tmp_path, sbom):
    """The commit found anywhere in the package's record was enough: a comment, a checksum, or one of two calcc."""
    report = check_oci_archive(compiler_image(tmp_path, sbom), commits=COMPILER_COMMITS)
    assert codes(report) == ["commit_mismatch"]
    assert "calcc is at a1b2c3d4e5" in report.findings[0].message


@pytest.mark.parametrize(
    "calcc",
    [
        {"type": "application", "name": "calcc", "version": "0.9", "description": "built from 575c2d9e41"},
        {
            "type": "application",
            "name": "calcc",
            "version": "0.9",
            "components": [{"type": "library", "name": "libcal", "version": "575c2d9e41"}],
        },
    ],
    ids=["in-a-description", "in-a-nested-component"],
)
def test_a_cyclonedx_commit_outside_calcc_s_own_fields_fails_v01(tmp_path, calcc):
    sbom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "components": [calcc, {"type": "library", "name": "tvm", "version": "7aebd1c3"}],
    }
    report = check_oci_archive(compiler_image(tmp_path, sbom, cyclonedx=True), commits=COMPILER_COMMITS)
    assert codes(report) == ["commit_mismatch"]


def test_v01_s_commits_are_read_from_a_purl_or_a_vcs_reference_too(tmp_path):
    sbom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "components": [
            {"type": "application", "name": "calcc", "version": "0.9", "purl": "pkg:generic/calcc@575c2d9e41"},
            {
                "type": "library",
                "name": "tvm",
                "version": "0.16",
                "externalReferences": [{"type": "vcs", "url": "https://github.com/apache/tvm/commit/7aebd1c3f0"}],
            },
        ],
    }
    report = check_oci_archive(compiler_image(tmp_path, sbom, cyclonedx=True), commits=COMPILER_COMMITS)
    assert report.passed, report.findings
