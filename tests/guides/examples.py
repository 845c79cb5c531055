"""The examples of a Markdown guide, as the guide marks them.

A fenced block whose info string is `bash` or `python` is an example. The previous non-blank line says
what the tests do with it: `<!-- tested -->` (run it) or `<!-- not tested: <why> -->` (leave it). An
example with neither is an error, so none can slip past the tests unnoticed.
"""

import re
from dataclasses import dataclass
from pathlib import Path

EXAMPLE_LANGUAGES = {"bash", "python"}
FENCE = re.compile(r"^```(?P<info>\S*)\s*$")
TESTED = re.compile(r"^<!--\s*tested\s*-->$")
NOT_TESTED = re.compile(r"^<!--\s*not tested:\s*\S.*-->$")


@dataclass
class Example:
    language: str
    code: str
    line: int  # of the opening fence, counted from 1
    tested: bool


class MarkerError(ValueError):
    pass


def examples(path: Path) -> list[Example]:
    """Every bash and python example of the guide, in order. Raises MarkerError for an unmarked one or an
    unclosed fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index
        index += 1
        while index < len(lines) and lines[index].strip() != "```":
            index += 1
        if index == len(lines):
            raise MarkerError(f"{path.name}:{start + 1}: the fenced block is never closed")
        language = match.group("info")
        if language in EXAMPLE_LANGUAGES:
            code = "\n".join(lines[start + 1 : index]) + "\n"
            found.append(Example(language, code, start + 1, _is_tested(path, lines, start)))
        index += 1
    return found


def _is_tested(path: Path, lines: list[str], fence: int) -> bool:
    previous = next((line.strip() for line in reversed(lines[:fence]) if line.strip()), "")
    if TESTED.match(previous):
        return True
    if NOT_TESTED.match(previous):
        return False
    raise MarkerError(
        f"{path.name}:{fence + 1}: a {lines[fence].strip()[3:]} example needs <!-- tested --> or "
        "<!-- not tested: why --> on the line before it"
    )
