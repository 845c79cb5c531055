"""An SDK delivery: entry points declared in its headers and defined in its library, and the answer's minimal
example built against them.

The seed's own check (section 2) is `nm -D --defined-only lib.so | c++filt`: E2 means the headers declare
a call and the same version's library defines it as a dynamic symbol. The library is read with
pyelftools (`.dynsym`); C++ names are demangled with the system's `c++filt` when there is one, otherwise
matched in their mangled form.

An entry point is `Name`, a function or a member of any class, or `Class::Name` (any number of scopes),
whose last scopes must match. A header (`.h`, `.hpp` and the like, or a text file without a suffix as C++'s
own) declares it when, comments removed, it names `Name(` and, for a member, the same header declares
`class Class` or `struct Class`.
"""

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from calculet_agent.sandbox import Limits
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from acceptance.inspection import Report
from acceptance.inspection.isolated import DEFAULT_LIMITS, run_isolated

HEADER_SUFFIXES = {".h", ".hh", ".hpp", ".hxx", ".h++", ".inc", ".def"}
C_SUFFIXES = {".c"}
CXX_SUFFIXES = {".cc", ".cpp", ".cxx", ".c++"}
CALLABLE_TYPES = {"STT_FUNC", "STT_GNU_IFUNC"}
VERSION = re.compile(r"\d+(?:\.\d+)+")
LIBRARY_VERSION = re.compile(r"\.so\.(\d+(?:\.\d+)+)$")
HEADER_VERSION = re.compile(r'^\s*#\s*define\s+\w*VERSION\w*\s+"?(\d+(?:\.\d+)+)"?\s*$', re.MULTILINE)
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
MAX_HEADER_BYTES = 4 * 1024 * 1024


@dataclass
class SdkReport(Report):
    entry_points: dict[str, dict] = field(default_factory=dict)  # per entry point: declared_in, symbol
    library_version: str | None = None


@dataclass
class BuildReport(Report):
    compiler: str | None = None


def check_sdk(
    headers_dir: Path,
    library: Path,
    entry_points: Sequence[str],
    *,
    version: str | None = None,
    also_look_for: Sequence[str] = (),
) -> SdkReport:
    """Every entry point declared in a header under `headers_dir` and defined as a callable dynamic symbol of
    `library`. With `version`, the library (and a header's `#define ..._VERSION`) must be that version.
    `also_look_for` are looked up in the same read and reported in `entry_points`, their absence no finding."""
    report = SdkReport()
    headers = _read_headers(Path(headers_dir), report)
    symbols = _defined_symbols(Path(library), report)
    report.checked.update(headers=sorted(headers), entry_points=list(entry_points))
    if not entry_points:
        report.add("no_entry_points", "no entry points to check: an SDK is proven by the calls it must carry")
    _check_versions(headers, Path(library), symbols is not None, version, report)
    if symbols is None:
        return report
    demangled = _demangle(sorted(symbols))
    report.checked["demangled_with"] = "c++filt" if demangled is not None else None
    required = set(entry_points)
    for entry in dict.fromkeys([*entry_points, *also_look_for]):
        declared_in = _declared_in(entry, headers)
        symbol = _defined_as(entry, symbols, demangled)
        report.entry_points[entry] = {"declared_in": declared_in, "symbol": symbol}
        if entry not in required:
            continue
        if declared_in is None:
            report.add("entry_point_not_declared", f"{entry} is not declared in any header", entry_point=entry)
        if symbol is None:
            report.add(
                "entry_point_not_defined",
                f"{entry} is not a defined dynamic symbol of {Path(library).name}",
                entry_point=entry,
            )
    return report


def _read_headers(headers_dir: Path, report: Report) -> dict[str, str]:
    """Each header's text without comments, by its path under `headers_dir`."""
    if not headers_dir.is_dir():
        report.add("headers_missing", f"the headers directory {headers_dir.name} does not exist")
        return {}
    headers = {}
    # Links are not followed: a delivery's headers are its own files.
    paths = [Path(root, name) for root, _dirs, files in os.walk(headers_dir) for name in files]
    for path in sorted(paths):
        # C++ headers may have no suffix (`<vector>`); such a file counts when it is text.
        if path.is_symlink() or not path.is_file() or path.suffix.lower() not in HEADER_SUFFIXES | {""}:
            continue
        if path.stat().st_size > MAX_HEADER_BYTES:
            report.add("header_too_large", f"{path.name} is larger than {MAX_HEADER_BYTES} bytes")
            continue
        data = path.read_bytes()
        if not path.suffix and b"\0" in data[:8192]:
            continue
        headers[str(path.relative_to(headers_dir))] = COMMENTS.sub(" ", data.decode("utf-8", errors="replace"))
    if not headers:
        report.add("headers_missing", f"no header files under {headers_dir.name}")
    return headers


def _defined_symbols(library: Path, report: SdkReport) -> dict[str, str] | None:
    """The library's defined callable dynamic symbols (name -> symbol type), as `nm -D --defined-only`."""
    if not library.is_file():
        report.add("library_missing", f"the library {library.name} does not exist")
        return None
    try:
        with library.open("rb") as stream:
            elf = ELFFile(stream)
            dynsym = elf.get_section_by_name(".dynsym")
            dynamic = elf.get_section_by_name(".dynamic")
            soname = None
            if isinstance(dynamic, DynamicSection):
                tags = [tag for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_SONAME"]
                soname = getattr(tags[0], "soname", None) if tags else None
            report.checked["library"] = {"name": library.name, "soname": soname, "machine": elf["e_machine"]}
            if not isinstance(dynsym, SymbolTableSection):
                report.add("no_dynamic_symbols", f"{library.name} has no dynamic symbol table")
                return None
            symbols = {
                symbol.name: symbol["st_info"]["type"]
                for symbol in dynsym.iter_symbols()
                if symbol.name
                and symbol["st_shndx"] != "SHN_UNDEF"
                and symbol["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE")
            }
    except ELFError as error:
        report.add("library_not_elf", f"{library.name} is not an ELF shared library: {error}")
        return None
    report.checked["defined_symbols"] = len(symbols)
    return symbols


def _check_versions(
    headers: dict[str, str], library: Path, readable: bool, expected: str | None, report: SdkReport
) -> None:
    soname = report.checked.get("library", {}).get("soname") or ""
    found = LIBRARY_VERSION.search(library.name) or LIBRARY_VERSION.search(soname)
    report.library_version = found.group(1) if found else None
    header_versions = {name: m.group(1) for name, text in headers.items() if (m := HEADER_VERSION.search(text))}
    report.checked["versions"] = {"library": report.library_version, "headers": header_versions}
    if report.library_version:
        for name, header_version in header_versions.items():
            if header_version != report.library_version:
                report.add(
                    "version_mismatch",
                    f"{name} says version {header_version}, the library is {report.library_version}",
                    header=name,
                    header_version=header_version,
                    library_version=report.library_version,
                )
    if expected is not None and readable:
        versions = {report.library_version, *header_versions.values()} - {None}
        if not versions:
            report.add("version_unknown", f"neither the library nor a header says its version (expected {expected})")
        elif versions != {expected}:
            said = sorted(v for v in versions if v)
            report.add(
                "version_mismatch",
                f"the answer names version {expected}, the SDK says {', '.join(said)}",
                expected=expected,
                found=said,
            )


def _demangle(names: list[str]) -> dict[str, str] | None:
    """Mangled name -> demangled, through `c++filt`; None when the system has none."""
    cxxfilt = shutil.which("c++filt")
    mangled = [name for name in names if name.startswith("_Z")]
    if cxxfilt is None:
        return None
    if not mangled:
        return {}
    result = subprocess.run([cxxfilt], input="\n".join(mangled), capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != len(mangled):
        return None
    return dict(zip(mangled, lines, strict=True))


def _qualified_name(demangled: str) -> str:
    """`ns::Class::method` from `ret ns::Class::method<T>(args) const`."""
    depth, name = 0, []
    for char in demangled.split("(", 1)[0]:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif depth == 0:
            name.append(char)
    return "".join(name).split(" ")[-1]


def _defined_as(entry: str, symbols: dict[str, str], demangled: dict[str, str] | None) -> str | None:
    parts = entry.split("::")
    callable_names = [name for name, kind in symbols.items() if kind in CALLABLE_TYPES]
    for name in callable_names:
        if not name.startswith("_Z"):
            if len(parts) == 1 and name == entry:
                return name
            continue
        if demangled is not None and name in demangled:
            qualified = _qualified_name(demangled[name])
            if qualified == entry or qualified.endswith("::" + entry):
                return demangled[name]
        elif demangled is None:
            # Itanium ABI: each scope is its length and its name (`_ZN5calrt9KvManager5ApplyEv`).
            encoded = "".join(f"{len(part)}{part}" for part in parts)
            if re.search(rf"(?<![0-9]){re.escape(encoded)}", name):
                return name
    return None


def _declared_in(entry: str, headers: dict[str, str]) -> str | None:
    *scopes, name = entry.split("::")
    call = re.compile(rf"\b{re.escape(name)}\s*\(")
    owner = re.compile(rf"\b(?:class|struct)\s+(?:\w+\s+)*{re.escape(scopes[-1])}\b") if scopes else None
    for header, text in headers.items():
        if call.search(text) and (owner is None or owner.search(text)):
            return header
    return None


def build_example(headers_dir: Path, library: Path, source: Path, *, limits: Limits = DEFAULT_LIMITS) -> BuildReport:
    """Compile and link the answer's minimal example against the headers and the library, in a fresh
    sandbox of agent/calculet_agent/sandbox.py (no network, the host read-only). C for `.c`, C++ otherwise."""
    report = BuildReport()
    source, headers_dir, library = Path(source), Path(headers_dir), Path(library)
    suffix = source.suffix.lower()
    if suffix not in C_SUFFIXES | CXX_SUFFIXES:
        report.add(
            "source_unsupported", f"{source.name} is neither C nor C++ ({', '.join(sorted(C_SUFFIXES | CXX_SUFFIXES))})"
        )
        return report
    for path, what in ((source, "example"), (library, "library")):
        if not path.is_file():
            report.add(f"{what}_missing", f"the {what} {path.name} does not exist")
    if not headers_dir.is_dir():
        report.add("headers_missing", f"the headers directory {headers_dir.name} does not exist")
    if report.findings:
        return report
    candidates = ("cc", "gcc", "clang") if suffix in C_SUFFIXES else ("c++", "g++", "clang++")
    compiler = next((found for name in candidates if (found := shutil.which(name))), None)
    report.compiler = compiler
    if compiler is None:
        report.add("compiler_missing", f"no {' or '.join(candidates)} on this host: the example was not built")
        return report
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    report.checked["compiler"] = {"path": compiler, "version": (version.splitlines() or [""])[0]}
    with tempfile.TemporaryDirectory(prefix="calculet-build-") as scratch:
        workdir = Path(scratch)
        # Links are copied as links: the compiler's user, not this process, decides what they may reach.
        shutil.copytree(headers_dir, workdir / "include", symlinks=True)
        (workdir / "lib").mkdir()
        shutil.copy2(library, workdir / "lib" / library.name, follow_symlinks=False)
        shutil.copy2(source, workdir / source.name, follow_symlinks=False)
        argv = [compiler, "-Iinclude", source.name, f"lib/{library.name}", "-o", "example", "-Wl,-rpath,$ORIGIN/lib"]
        ran = run_isolated(argv, workdir=workdir, limits=limits)
        report.checked["command"] = argv
        report.checked["sandbox"] = ran.record
        if not ran.outcome.clean_exit or not (workdir / "example").is_file():
            report.add(
                "build_failed",
                f"{source.name} did not build against the headers and {library.name}: "
                f"{ran.outcome.reason or 'no executable was written'}",
                output_tail=ran.output_tail,
            )
    return report
