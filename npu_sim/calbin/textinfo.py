"""The toolchain's text files: one `key: value` per line, `#` comments.

A line without a colon is read as `key value` (the seed quotes the field both ways: `smodel_type
llm_decode`). Every value keeps its line number, so a finding can point at `file:line` as the seed's
evidence does (`model_memory_reserved_info.txt:3`).
"""

import re
from dataclasses import dataclass, field

from npu_sim.calbin.findings import Finding
from npu_sim.calbin.layout import MEMORY_UNITS

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_SHAPE = re.compile(r"\[\s*\d+(\s*,\s*\d+)*\s*\]")


@dataclass(frozen=True)
class Entry:
    value: str
    line: int


@dataclass
class TextInfo:
    file: str
    entries: dict[str, Entry] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def where(self, key: str) -> str:
        return f"{self.file}:{key}"

    def line(self, key: str) -> int | None:
        entry = self.entries.get(key)
        return entry.line if entry else None

    def error(self, code: str, key: str, message: str) -> None:
        self.findings.append(Finding(code, "error", self.where(key), message, self.line(key)))

    def warning(self, code: str, key: str, message: str) -> None:
        self.findings.append(Finding(code, "warning", self.where(key), message, self.line(key)))

    def text(self, key: str, required: bool = True) -> str | None:
        entry = self.entries.get(key)
        if entry is None:
            if required:
                self.error("field_missing", key, f"{key} is required")
            return None
        return entry.value

    def integer(self, key: str, required: bool = True, minimum: int | None = None) -> int | None:
        value = self.text(key, required)
        if value is None:
            return None
        try:
            number = int(value, 0)
        except ValueError:
            self.error("field_type", key, f"{key} must be an integer, not {value!r}")
            return None
        if minimum is not None and number < minimum:
            self.error("field_type", key, f"{key} must be at least {minimum}, not {number}")
            return None
        return number

    def words(self, key: str, required: bool = True) -> list[str] | None:
        """A list written as words separated by commas and/or spaces; empty is allowed."""
        value = self.text(key, required)
        return None if value is None else [w for w in re.split(r"[,\s]+", value) if w]

    def shape(self, key: str, required: bool = True) -> list[int] | None:
        value = self.text(key, required)
        if value is None:
            return None
        if not _SHAPE.fullmatch(value):
            self.error("field_type", key, f"{key} must be a shape like [1,256], not {value!r}")
            return None
        return [int(d) for d in value.strip("[] ").split(",")]

    def size(self, key: str, required: bool = True) -> tuple[int, str] | None:
        """A memory size `<integer> <unit>`; the unit must be a known one."""
        value = self.text(key, required)
        if value is None:
            return None
        parts = value.split()
        if len(parts) != 2 or not parts[0].isdigit():
            self.error("field_type", key, f"{key} must be `<integer> <unit>` (e.g. 1024 B), not {value!r}")
            return None
        if parts[1] not in MEMORY_UNITS:
            known = ", ".join(MEMORY_UNITS)
            self.error("memory_unit_unknown", key, f"unknown unit {parts[1]!r} in {value!r}; known: {known}")
            return None
        return int(parts[0]), parts[1]


def parse_text(file: str, data: bytes, findings: list[Finding]) -> TextInfo:
    """Read the file; what cannot be read, and every later finding about it, goes to `findings`."""
    info = TextInfo(file, findings=findings)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        info.findings.append(Finding("text_unreadable", "error", file, f"{file} is not UTF-8 text: {error}"))
        return info
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(":") if ":" in line else line.partition(" ")
        key, value = key.strip(), value.strip()
        if not _KEY.fullmatch(key):
            info.findings.append(
                Finding("line_unreadable", "error", f"{file}:{number}", f"cannot read {raw!r}", number)
            )
            continue
        if key in info.entries:
            first = info.entries[key].line
            info.findings.append(
                Finding(
                    "field_duplicate", "error", f"{file}:{key}", f"{key} is set again (first on line {first})", number
                )
            )
            continue
        info.entries[key] = Entry(value, number)
    return info


def write_text(header: str, entries: list[tuple[str, object]]) -> bytes:
    """A text file in the same form: a comment line, then `key: value` lines."""
    lines = [f"# {header}"] + [f"{key}: {value}".rstrip() for key, value in entries]
    return ("\n".join(lines) + "\n").encode()
