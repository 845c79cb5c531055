"""An SDK delivery: entry points declared in its headers and defined in its library, the versions they and
the answer name, and the answer's minimal example built against them.

The seed's own check (section 2) is `nm -D --defined-only lib.so | c++filt`: E2 means the headers declare
a call and the same version's library defines it as a dynamic symbol. The library is read with
pyelftools (`.dynsym`); C++ names are demangled with the system's `c++filt` when there is one, otherwise
matched in their mangled form. Each is read once: the symbols into an index by name, the headers parsed
into the declarations they make, so the cost does not grow with the number of entry points.

An entry point is `Name`, a function or a member of any class, or `Class::Name` (any number of scopes),
whose last scopes must match. A header (`.h`, `.hpp` and the like, or a text file without a suffix as C++'s
own) declares it when its declarations, parsed with their namespaces and classes (an inline namespace's members
also in the enclosing namespace; attributes, `[[...]]` and visibility macros skipped, function-like ones in a
class head too; function bodies not looked into; a forward declaration `class X;` or a deleted function
declaring nothing), hold a function of that name in those scopes.

The version is read four times and must be one: from the library's file name (`libcalrt.so.0.7.6`), from
its soname (`libcalrt.so.0`, the major version of a real SDK's chain `libcalrt.so -> libcalrt.so.0 ->
libcalrt.so.0.7.6`, or the whole version), from the headers' version macro (`#define CALRT_VERSION
"0.7.6"`) and from the answer. One that names none, or names another, is a finding naming which.
"""

import os
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
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
LIBRARY_VERSION = re.compile(r"\.so\.(\d+(?:\.\d+)*)$")
VERSION_MACRO = re.compile(r'#\s*define\s+(\w*VERSION\w*)\s+"?v?(\d+(?:\.\d+)+)"?\s*$')
MAX_HEADER_BYTES = 4 * 1024 * 1024
# What a header's parse looks at: comments, preprocessor lines and literals (each skipped whole), numbers,
# names, `::` and the punctuation that shapes a declaration.
TOKENS = re.compile(
    r"""//[^\n]*|/\*.*?\*/|^[ \t]*\#(?:\\\n|[^\n])*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
    r"""|\d[\w.']*|[A-Za-z_$][\w$]*|::|[{}()\[\];:<>=~,*&^]""",
    re.MULTILINE | re.DOTALL,
)
CLASS_KEYS = {"class", "struct", "union"}
ACCESS = {"public", "private", "protected"}
# A name followed by parentheses that are not a declaration's parameters.
PARENTHESISED = {"__attribute__", "__declspec", "alignas", "_Alignas", "decltype", "__asm__", "__asm", "asm"}
NOT_FUNCTIONS = {
    *("if", "for", "while", "switch", "return", "sizeof", "alignof", "operator", "throw", "noexcept"),
    *("static_assert", "_Static_assert", "typeid", "new", "delete", "case", "default"),
    *("void", "int", "char", "bool", "float", "double", "long", "short", "unsigned", "signed", "auto"),
    *("const", "volatile", "constexpr", "inline", "static", "extern", "virtual", "explicit"),
}
NOT_DECLARING = {"typedef", "using", "friend", "static_assert", "_Static_assert"}


@dataclass
class SdkReport(Report):
    entry_points: dict[str, dict] = field(default_factory=dict)  # per entry point: declared_in, symbol
    library_version: str | None = None


@dataclass
class BuildReport(Report):
    compiler: str | None = None


SHARED_LIBRARY = re.compile(r"\.so(?:\.\d+)*$")


def sdk_library(lib_dir: Path) -> Path:
    """The one shared library of an SDK's `lib/`: its only regular file named `*.so` or `*.so.<numbers>`, any
    other such name a link leading to it (a real SDK's chain `libx.so -> libx.so.1 -> libx.so.1.2.3`).
    ValueError naming what is wrong otherwise."""
    named = sorted(path for path in lib_dir.iterdir() if SHARED_LIBRARY.search(path.name)) if lib_dir.is_dir() else []
    files = [path for path in named if path.is_file() and not path.is_symlink()]
    if len(files) != 1:
        found = ", ".join(path.name for path in files) or "none"
        raise ValueError(
            f"lib/ must hold exactly one shared library (other names of it as links to it); files found: {found}"
        )
    library = files[0]
    for link in named:
        if link.is_symlink() and link.resolve() != library.resolve():
            raise ValueError(f"lib/{link.name} is a link to {os.readlink(link)}, not to {library.name}")
    return library


def check_sdk(
    headers_dir: Path,
    library: Path,
    entry_points: Sequence[str],
    *,
    version: str | None = None,
    also_look_for: Sequence[str] = (),
) -> SdkReport:
    """Every entry point declared in a header under `headers_dir` and defined as a callable dynamic symbol of
    `library`, and the library's file name, soname and headers of one version: with `version` (the answer's;
    empty when it names none) that one. A soname other than the file's name must be a link beside it to the
    library, as the loader finds it. `also_look_for` are looked up in the same read and reported in
    `entry_points`, their absence no finding."""
    report = SdkReport()
    library = Path(library)
    wanted = list(dict.fromkeys([*entry_points, *also_look_for]))
    declarations, macros = _read_headers(Path(headers_dir), {entry.split("::")[-1] for entry in wanted}, report)
    symbols = _defined_symbols(library, report)
    report.checked["entry_points"] = list(entry_points)
    if not entry_points:
        report.add("no_entry_points", "no entry points to check: an SDK is proven by the calls it must carry")
    if symbols is not None:
        _check_soname_link(library, report)
        _check_versions(library, macros, version, report)
    if symbols is None:
        return report
    defined = _symbol_index(symbols, report)
    required = set(entry_points)
    for entry in wanted:
        declared_in = _declared_in(entry, declarations)
        symbol = _defined_as(entry, defined, symbols)
        report.entry_points[entry] = {"declared_in": declared_in, "symbol": symbol}
        if entry not in required:
            continue
        if declared_in is None:
            report.add("entry_point_not_declared", f"{entry} is not declared in any header", entry_point=entry)
        if symbol is None:
            report.add(
                "entry_point_not_defined",
                f"{entry} is not a defined dynamic symbol of {library.name}",
                entry_point=entry,
            )
    return report


Declarations = dict[str, list[tuple[tuple[str, ...], str]]]  # function name -> (its scopes and name, header)


def _read_headers(headers_dir: Path, names: set[str], report: Report) -> tuple[Declarations, dict[str, str]]:
    """The functions named in `names` that the headers under `headers_dir` declare, and each version macro
    found (`MACRO in header` -> version). A header that does not mention one of `names` cannot declare it and is
    only searched for its version macro."""
    declarations: Declarations = defaultdict(list)
    macros: dict[str, str] = {}
    if not headers_dir.is_dir():
        report.add("headers_missing", f"the headers directory {headers_dir.name} does not exist")
        return declarations, macros
    alternatives = "|".join(map(re.escape, sorted(names)))
    # A plain search first (re scans for a literal fast; `\b` defeats that), the whole words only where it hits.
    anywhere, mentions = re.compile(alternatives), re.compile(rf"\b(?:{alternatives})\b")
    read = []
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
        name = str(path.relative_to(headers_dir))
        read.append(name)
        text = data.decode("utf-8", errors="replace")
        if b"VERSION" in data:
            for line in re.findall(r"^[ \t]*#[ \t]*define[ \t]+\w*VERSION[^\n]*", text, re.MULTILINE):
                if found := VERSION_MACRO.match(line.strip()):
                    macros[f"{found.group(1)} in {name}"] = found.group(2)
        if not names or not anywhere.search(text) or not mentions.search(text):
            continue
        for scopes in _declared_functions(TOKENS.findall(text)):
            if scopes[-1] in names:
                declarations[scopes[-1]].append((scopes, name))
    report.checked["headers"] = read
    if not read:
        report.add("headers_missing", f"no header files under {headers_dir.name}")
    return declarations, macros


@dataclass(frozen=True)
class Scope:
    """A namespace or class a declaration is in; an inline namespace's members are also its enclosing one's."""

    name: str
    inline: bool = False


def _declared_functions(tokens: list[str]) -> Iterator[tuple[str, ...]]:
    """The functions a header's tokens declare, each as its scopes and name (`("calrt", "OutputBuf",
    "Wait")`), and once more without its inline namespaces (`("calrt", "v2", "OutputBuf", "Wait")` is also
    `("calrt", "OutputBuf", "Wait")`): statements at namespace, class or `extern "C"` level whose first
    parenthesis follows a name. Function bodies, enumerations and initialisers are skipped whole."""
    frames: list[tuple[Scope, ...] | None] = []  # per open brace: the scopes it adds, None for a skipped block
    scope: tuple[Scope, ...] = ()
    statement: list[str] = []
    depth = 0  # parentheses and brackets

    def declared() -> Iterator[tuple[str, ...]]:
        name = _function_in(statement)
        if name:
            full = tuple(part.name for part in scope) + name
            yield full
            visible = tuple(part.name for part in scope if not part.inline) + name
            if visible != full:
                yield visible

    for token in tokens:
        first = token[0]
        if first in "/#\"'" or first.isdigit():
            if first == '"' and depth == 0 and not (frames and frames[-1] is None):
                statement.append(token)  # extern "C"
            continue
        if frames and frames[-1] is None:
            if token == "{":
                frames.append(None)
            elif token == "}":
                frames.pop()
            continue
        if token == ";":
            # Ends the statement even inside parentheses: at namespace or class level only `#if`/`#else`
            # branches, both read, leave one open (`void f(int a,` `#else` `void f(int a, int b,` ...).
            yield from declared()
            statement, depth = [], 0
            continue
        if token in "([":
            depth += 1
        elif token in ")]":
            depth = max(0, depth - 1)
        elif depth:
            pass
        elif token == "{":
            opened = _block_scopes(statement)
            if opened is None:
                yield from declared()
            frames.append(opened)
            scope = _scope_of(frames)
            statement = []
            continue
        elif token == "}":
            if frames:
                frames.pop()
                scope = _scope_of(frames)
            statement = []
            continue
        elif token == ":" and len(statement) == 1 and statement[0] in ACCESS:
            statement = []
            continue
        statement.append(token)


def _scope_of(frames: list[tuple[Scope, ...] | None]) -> tuple[Scope, ...]:
    return tuple(part for frame in frames if frame for part in frame)


def _cleaned(statement: list[str]) -> list[str]:
    """The statement without its template parameter lists, attributes (`[[...]]`, `__attribute__((...))`,
    `alignas(...)`) and what brackets enclose."""
    out: list[str] = []
    skip_parens = skip_brackets = angle = 0
    i = 0
    while i < len(statement):
        token = statement[i]
        if angle:
            angle += (token == "<") - (token == ">")
        elif skip_parens:
            skip_parens += (token == "(") - (token == ")")
        elif skip_brackets:
            skip_brackets += (token == "[") - (token == "]")
        elif token == "template" and i + 1 < len(statement) and statement[i + 1] == "<":
            angle, i = 1, i + 1
        elif token in PARENTHESISED and i + 1 < len(statement) and statement[i + 1] == "(":
            skip_parens, i = 1, i + 1
        elif token == "[":
            skip_brackets = 1
        else:
            out.append(token)
        i += 1
    return out


def _block_scopes(statement: list[str]) -> tuple[Scope, ...] | None:
    """What a brace after `statement` opens: a namespace or class (the scopes it adds), `extern "C"` (none),
    or a block to skip (None): a function's body, an enumeration, an initialiser."""
    tokens = _cleaned(statement)
    if "namespace" in tokens:
        return _namespace_scopes(tokens)
    if tokens[:1] == ["extern"] and len(tokens) == 2 and tokens[1].startswith('"'):
        return ()
    key = next((i for i, token in enumerate(tokens) if token in CLASS_KEYS), None)
    if key is not None:
        tokens = _without_head_macros(tokens, key)
    if key is None or "enum" in tokens or "(" in tokens or "=" in tokens:
        return None
    head = []
    for token in tokens[key + 1 :]:
        if token in (":", "<", "final"):
            break
        head.append(token)
    return tuple(Scope(name) for name in _trailing_name(head) or ("",))


def _namespace_scopes(tokens: list[str]) -> tuple[Scope, ...]:
    """`inline namespace v2`, `namespace a::inline b`, perhaps after a macro that ends without a semicolon and
    before a visibility macro: `_GLIBCXX_BEGIN_NAMESPACE_VERSION namespace std _GLIBCXX_VISIBILITY(default)`."""
    at = tokens.index("namespace")
    inline = "inline" in tokens[:at]
    scopes: list[Scope] = []
    rest = tokens[at + 1 :]
    i = 0
    while i < len(rest):
        if rest[i] == "inline":
            inline, i = True, i + 1
            continue
        if not rest[i].isidentifier():
            break
        scopes.append(Scope(rest[i], inline))
        inline = False
        if rest[i + 1 : i + 2] != ["::"]:
            break
        i += 2
    return tuple(scopes)


def _without_head_macros(tokens: list[str], key: int) -> list[str]:
    """A class head without the function-like macros right after its key (`class CALRT_API(default) Name`):
    a name and parentheses there cannot be the class's name."""
    i = key + 1
    while i + 1 < len(tokens) and tokens[i].isidentifier() and tokens[i + 1] == "(":
        depth, i = 1, i + 2
        while i < len(tokens) and depth:
            depth += (tokens[i] == "(") - (tokens[i] == ")")
            i += 1
    return tokens[: key + 1] + tokens[i:]


def _trailing_name(tokens: list[str]) -> tuple[str, ...]:
    """The qualified name that ends `tokens` (`ns :: Class` -> ("ns", "Class")); () when they end otherwise."""
    if not tokens or not tokens[-1].isidentifier():
        return ()
    parts = [tokens[-1]]
    i = len(tokens) - 2
    while i >= 1 and tokens[i] == "::" and tokens[i - 1].isidentifier():
        parts.insert(0, tokens[i - 1])
        i -= 2
    return tuple(parts)


def _function_in(statement: list[str]) -> tuple[str, ...]:
    """The function a statement declares, as its own qualified name: the name before its first parenthesis,
    unless that parenthesis follows an `=` (an initialiser), opens a function pointer (`(*`) or follows a
    keyword. A deleted function (`= delete`) declares nothing to call; a class's forward declaration, its
    attributes and macros with it, declares no function."""
    tokens = _cleaned(statement)
    if not tokens or tokens[0] in NOT_DECLARING:
        return ()
    if tokens[0] == "extern" and len(tokens) > 1 and tokens[1].startswith('"'):
        tokens = tokens[2:]
    if tokens[:1] and tokens[0] in CLASS_KEYS:
        tokens = _without_head_macros(tokens, 0)
    if "(" not in tokens or tokens[-2:] == ["=", "delete"]:
        return ()
    paren = tokens.index("(")
    if "=" in tokens[:paren] or tokens[paren + 1 : paren + 2] in (["*"], ["^"], ["&"]):
        return ()
    name = _trailing_name(tokens[:paren])
    if not name or name[-1] in NOT_FUNCTIONS:
        return ()
    return name


def _declared_in(entry: str, declarations: Declarations) -> str | None:
    wanted = tuple(entry.split("::"))
    for scopes, header in declarations.get(wanted[-1], []):
        if scopes[-len(wanted) :] == wanted:
            return header
    return None


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


def _check_soname_link(library: Path, report: SdkReport) -> None:
    """The loader finds a library by its soname: when that is not the file's own name, a link of that name
    beside it must lead to it (`libcalrt.so.0 -> libcalrt.so.0.7.6`)."""
    soname = report.checked["library"]["soname"]
    if not soname or soname == library.name:
        return
    link = library.parent / soname
    if not link.is_symlink() or link.resolve() != library.resolve():
        report.add(
            "soname_link_missing",
            f"the soname {soname} is not a link to {library.name} beside it: the loader would not find the library",
            soname=soname,
        )


def _check_versions(library: Path, macros: dict[str, str], expected: str | None, report: SdkReport) -> None:
    """One version from the file name, the soname (its leading numbers: a soname often carries only the major
    version), the headers' version macros and the answer (`expected`, unless None)."""
    soname = report.checked["library"]["soname"] or ""
    named = LIBRARY_VERSION.search(library.name)
    report.library_version = named.group(1) if named else None
    in_soname = LIBRARY_VERSION.search(soname)
    sources = {
        "the library's file name": report.library_version,
        "the library's soname": in_soname.group(1) if in_soname else None,
    }
    sources.update((f"the header macro {macro}", value) for macro, value in sorted(macros.items()))
    if not macros:
        sources["a header's version macro"] = None
    if expected is not None:
        sources["the answer"] = expected.strip().removeprefix("v") or None
    report.checked["versions"] = sources
    for source, value in sources.items():
        if value is None:
            report.add("version_missing", f"{source} names no version", source=source)
    version = report.library_version
    if version is None:
        return
    for source, value in sources.items():
        agrees = value == version or (source == "the library's soname" and f"{version}.".startswith(f"{value}."))
        if value is not None and not agrees:
            report.add(
                "version_mismatch",
                f"{source} says version {value}, the library's file name {version}",
                source=source,
                version=value,
                library_version=version,
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


TEMPLATE_ARGUMENTS = re.compile(r"<[^<>]*>")
ABI_TAG = re.compile(r"\[abi:\w+\]")


def _qualified_name(demangled: str) -> tuple[str, ...]:
    """("ns", "Class", "method") from `ret ns::Class::method<T>(args) const`."""
    name = ABI_TAG.sub("", demangled)
    while (shorter := TEMPLATE_ARGUMENTS.sub("", name)) != name:
        name = shorter
    return tuple(name.split("(", 1)[0].split(" ")[-1].split("::"))


SymbolIndex = dict[str, list[tuple[tuple[str, ...], str]]] | None  # last name -> (scopes and name, as shown)


def _symbol_index(symbols: dict[str, str], report: SdkReport) -> SymbolIndex:
    """The callable symbols by their last name, demangled with c++filt; None when there is no c++filt."""
    callable_names = sorted(name for name, kind in symbols.items() if kind in CALLABLE_TYPES)
    demangled = _demangle(callable_names)
    report.checked["demangled_with"] = "c++filt" if demangled is not None else None
    if demangled is None:
        return None
    index: dict[str, list[tuple[tuple[str, ...], str]]] = defaultdict(list)
    for name in callable_names:
        shown = demangled.get(name, name)
        qualified = _qualified_name(shown) if name in demangled else (name,)
        index[qualified[-1]].append((qualified, shown))
    return index


def _defined_as(entry: str, index: SymbolIndex, symbols: dict[str, str]) -> str | None:
    parts = tuple(entry.split("::"))
    if index is not None:
        return next((shown for qualified, shown in index.get(parts[-1], []) if qualified[-len(parts) :] == parts), None)
    # Without c++filt, Itanium ABI names: each scope is its length and its name (`_ZN5calrt9KvManager5ApplyEv`).
    encoded = re.compile(r"(?<![0-9])" + re.escape("".join(f"{len(part)}{part}" for part in parts)))
    for name, kind in symbols.items():
        if kind in CALLABLE_TYPES and (name == entry if not name.startswith("_Z") else encoded.search(name)):
            return name
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
