"""Editing a built package as a vendor's toolchain might have written it: text lines, goldens, digests."""

import hashlib
import io
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from npu_sim.calbin.goldens import read_golden
from npu_sim.calbin.layout import CHECKSUMS, GOLDEN


def resum(root: Path) -> None:
    """Rewrite SHA256SUMS for the files as they are now, so only the edit itself is a finding."""
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    lines = [f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    (root / CHECKSUMS).write_text("".join(lines))


def set_line(root: Path, file: str, key: str, value: str | None, digests: bool = True) -> None:
    """Set `key: value` in a text file of the package (appended if absent; removed when value is None)."""
    path = root / file
    lines = path.read_text().splitlines()
    pattern = re.compile(rf"^{re.escape(key)}[:\s]")
    found = [i for i, line in enumerate(lines) if pattern.match(line)]
    if value is None:
        lines = [line for i, line in enumerate(lines) if i not in found]
    elif found:
        lines[found[0]] = f"{key}: {value}"
    else:
        lines.append(f"{key}: {value}")
    path.write_text("\n".join(lines) + "\n")
    if digests:
        resum(root)


def replace_text(root: Path, file: str, old: str, new: str) -> None:
    path = root / file
    text = path.read_text()
    assert old in text, f"{old!r} is not in {file}"
    path.write_text(text.replace(old, new))
    resum(root)


def change_golden(root: Path, change: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Edit the package's golden arrays and write them back (digests updated)."""
    golden = read_golden((root / GOLDEN).read_bytes(), "package")
    arrays = golden.arrays()
    change(arrays)
    (root / GOLDEN).write_bytes(_npz(arrays))
    resum(root)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()
