"""The runner digest a board's agent registers: the SHA-256 of what its runner command runs on this host, so
that a changed runner is a changed registration, which waits for the integration team's approval.

What runs is more than the command's first word: `python3 runner.py` or `python -m board_runner` run a script
or a module that the interpreter only loads. So the digest covers the first word's executable (looked up on
the PATH the runner gets), every later word that names an existing file by its absolute path (the runner runs
in its run's own directory, where a relative one names nothing of the host's), and, after `-m`, what the module
resolves to for the runner's interpreter: a plain module's file, or, for a module inside a package, every file
of its top-level package (its `__main__` imports the rest: a changed `pkg/runner.py` is a changed runner).
"""

import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from calculet_agent.sandbox import scrubbed_environment

logger = logging.getLogger("calculet_agent")

# Asked of the runner's own interpreter, in the runner's environment: the file `python -m NAME` would run, then
# one line per directory of its top-level package when it is in one (none for a plain module).
MODULE_FILE = """
import importlib.util, sys
spec = importlib.util.find_spec(sys.argv[1])
if spec is not None and spec.submodule_search_locations is not None:
    spec = importlib.util.find_spec(sys.argv[1] + ".__main__")
print(spec.origin if spec is not None and spec.has_location else "")
top = importlib.util.find_spec(sys.argv[1].split(".")[0]) if spec is not None else None
for location in (top.submodule_search_locations or []) if top is not None else []:
    print(location)
"""
MODULE_SECONDS = 30


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as opened:
        for block in iter(lambda: opened.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_files(directory: Path) -> list[Path]:
    """Every regular file under a package's directory, sorted by relative path; compiled bytecode is left out
    (the interpreter rewrites it from the sources, which are covered)."""
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        found += [Path(root, name) for name in names if not name.endswith(".pyc") and Path(root, name).is_file()]
    return sorted(found, key=lambda path: path.relative_to(directory).parts)


def _module_files(interpreter: str, module: str) -> list[Path]:
    """The files `interpreter -m module` runs: a plain module's file, or every file of the top-level package the
    module is in; none when it does not resolve (or the first word is no Python)."""
    with tempfile.TemporaryDirectory(prefix="calculet-agent-digest-") as empty:
        try:
            found = subprocess.run(
                [interpreter, "-c", MODULE_FILE, module],
                cwd=empty,
                env=scrubbed_environment(),
                capture_output=True,
                text=True,
                timeout=MODULE_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
    origin, *packages = (found.stdout.splitlines() if found.returncode == 0 else []) or [""]
    if not origin or not Path(origin).is_file():
        return []
    in_package = [path for location in packages if Path(location).is_dir() for path in _package_files(Path(location))]
    return in_package or [Path(origin)]


def runner_files(command: str) -> list[Path]:
    """The host's files the runner command runs, in the command's order, each once."""
    words = shlex.split(command)
    executable = shutil.which(words[0], path=scrubbed_environment()["PATH"]) if words else None
    if executable is None:
        return []
    files = [Path(executable)]
    for before, word in zip(words, words[1:], strict=False):
        if before == "-m":
            files.extend(_module_files(executable, word))
        elif Path(word).is_absolute() and Path(word).is_file():
            files.append(Path(word))
    return list(dict.fromkeys(path.resolve() for path in files))


def runner_digest(command: str) -> str:
    """The digest the agent registers: empty when the first word names no executable; the SHA-256 of the
    executable when it is the only file the command runs (a board's own runner binary, whose digest is as it
    was); else the SHA-256 of one line `<sha256> <path>` per file, in the command's order (a package's files in
    the order of their paths within it)."""
    files = runner_files(command)
    logger.info("the runner digest covers %s", ", ".join(map(str, files)) or "nothing")
    if len(files) <= 1:
        return _file_sha256(files[0]) if files else ""
    lines = "".join(f"{_file_sha256(path)} {path}\n" for path in files)
    return hashlib.sha256(lines.encode()).hexdigest()
