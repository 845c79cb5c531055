"""The calbin package as the vendor's toolchain lays it out (docs/calbin-format.md): build, read, validate."""

import os
from typing import Any

from npu_sim.calbin.build import BuildOptions, build_calbin
from npu_sim.calbin.check_files import check_files
from npu_sim.calbin.check_meta import check_meta
from npu_sim.calbin.findings import CalbinError, Finding
from npu_sim.calbin.metadata import PackageMeta, read_meta
from npu_sim.calbin.package import open_package

__all__ = [
    "BuildOptions",
    "CalbinError",
    "Finding",
    "PackageMeta",
    "build_calbin",
    "open_package",
    "read_manifest",
    "validate",
]


def validate(path: str | os.PathLike[str]) -> list[Finding]:
    """Every finding about a package: tar members, the metadata files, parameter blocks, goldens, digests."""
    findings: list[Finding] = []
    try:
        with open_package(path) as package:
            findings += package.problems
            meta = read_meta(package)
            check_meta(meta)
            findings += meta.findings
            findings += check_files(package, meta)
    except CalbinError as error:
        findings.append(Finding(error.code, "error", "", str(error)))
    return findings


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The package's metadata as one dict (`PackageMeta.manifest`); only the metadata files are read."""
    with open_package(path) as package:
        return read_meta(package).manifest()
