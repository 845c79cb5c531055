"""A stand-in for the vendor's CalRT SDK, as `build-calbin` stands in for its packages: headers declaring the
given entry points and a shared library defining them, built with the system C++ compiler (g++), and a
minimal example calling each. The SDK check (acceptance/inspection/sdk.py) reads them as it reads the
vendor's: declarations in the headers, defined dynamic symbols of the library, the example built against both.

`build_sdk` raises FileNotFoundError when there is no g++, and CalledProcessError when it fails.
"""

import io
import os
import subprocess
import tarfile
from collections import defaultdict
from pathlib import Path
from typing import Any

CALRT_VERSION = "0.7.6"


def sdk_header(entry_points: list[str], version: str | None = CALRT_VERSION) -> str:
    """A header declaring each entry point: `Class::Name` as a member of `calrt::Class`, `Name` as a C call;
    `CALRT_VERSION` defined as `version` (not at all when None)."""
    members: dict[str, list[str]] = defaultdict(list)
    functions = []
    for entry in entry_points:
        if "::" in entry:
            owner, name = entry.split("::")
            members[owner].append(name)
        else:
            functions.append(entry)
    lines = ["#pragma once", *([f'#define CALRT_VERSION "{version}"'] if version else []), "namespace calrt {"]
    for owner, names in members.items():
        lines += [f"class {owner} {{", " public:", *(f"  int {name}(int value);" for name in names), "};"]
    lines += ["}  // namespace calrt", 'extern "C" {', *(f"int {name}(int value);" for name in functions), "}"]
    return "\n".join(lines) + "\n"


def build_sdk(
    root: Path,
    entry_points: list[str],
    *,
    undefined: tuple[str, ...] = (),
    version: str = CALRT_VERSION,
    header_version: str | None = "",
    file_name: str = "",
    soname: str = "",
    links: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """Headers declaring every entry point and a library defining all but `undefined`, built with g++.

    The library is `lib/<file_name>` (by default `libcalrt-linux-x86_64.so.<version>`) with the soname
    `soname` (by default its file name) and `links` beside it, each a symbolic link to it (a real SDK's chain:
    `libcalrt.so`, `libcalrt.so.0`). The header defines `CALRT_VERSION` as `header_version` (by default
    `version`; None for no macro). Returns (headers directory, library)."""
    include = root / "include" / "calrt"
    include.mkdir(parents=True)
    (include / "calrt.h").write_text(sdk_header(entry_points, version if header_version == "" else header_version))
    body = ['#include "calrt/calrt.h"']
    for entry in entry_points:
        if entry in undefined:
            continue
        if "::" in entry:
            body.append(f"int calrt::{entry}(int value) {{ return value + 1; }}")
        else:
            body.append(f'extern "C" int {entry}(int value) {{ return value + 2; }}')
    source = root / "calrt.cpp"
    source.write_text("\n".join(body) + "\n")
    library = root / "lib" / (file_name or f"libcalrt-linux-x86_64.so.{version}")
    library.parent.mkdir()
    subprocess.run(
        [
            "g++",
            "-shared",
            "-fPIC",
            f"-I{root / 'include'}",
            f"-Wl,-soname,{soname or library.name}",
            str(source),
            "-o",
            str(library),
        ],
        check=True,
        capture_output=True,
    )
    for link in links:
        (library.parent / link).symlink_to(library.name)
    return root / "include", library


def example_source(entry_points: list[str]) -> str:
    """A minimal C++ example calling each entry point once."""
    calls = []
    for n, entry in enumerate(entry_points):
        if "::" in entry:
            owner, name = entry.split("::")
            calls.append(f"  {{ calrt::{owner} object; total += object.{name}({n}); }}")
        else:
            calls.append(f"  total += {entry}({n});")
    return (
        "\n".join(
            ['#include "calrt/calrt.h"', "int main() {", "  int total = 0;", *calls, "  return total > 0 ? 0 : 1;", "}"]
        )
        + "\n"
    )


def sdk_archive(root: Path, entry_points: list[str], *, version: str = CALRT_VERSION, **options: Any) -> bytes:
    """The SDK as a vendor delivers it: a tar of `include/` (the headers), `lib/` (the one shared library and
    its links), `example/` (the minimal example) and `entry_points.txt` (the calls it declares, one a line),
    reproducible (sorted, times and owners zero). `options` are `build_sdk`'s."""
    headers, library = build_sdk(root, entry_points, version=version, **options)
    files = {f"include/{path.relative_to(headers)}": path.read_bytes() for path in headers.rglob("*") if path.is_file()}
    files[f"lib/{library.name}"] = library.read_bytes()
    files["example/example.cpp"] = example_source(entry_points).encode()
    files["entry_points.txt"] = "".join(f"{entry}\n" for entry in entry_points).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(files[name]), 0o644
            archive.addfile(info, io.BytesIO(files[name]))
        for link in sorted(path for path in library.parent.iterdir() if path.is_symlink()):
            info = tarfile.TarInfo(f"lib/{link.name}")
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(link)
            archive.addfile(info)
    return buffer.getvalue()
