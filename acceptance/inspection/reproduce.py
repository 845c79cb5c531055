"""Is a build reproducible (V03: one script, no hidden manual step)? The answer's build command runs twice,
each time on a fresh copy of its working directory in a fresh sandbox of agent/calculet_agent/sandbox.py (no
network, the host read-only, its own directory path, another time zone), and the outputs it names must
come out byte for byte the same.

An output is a file or a directory; a directory's digest covers every file's path, mode's executable bit
and content, and every symlink's target, so the finding can name the files that differ.
"""

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from calculet_agent.sandbox import Limits

from acceptance.inspection import Report
from acceptance.inspection.isolated import DEFAULT_LIMITS, run_isolated

CHUNK = 1024 * 1024
RUNS = ({"TZ": "UTC"}, {"TZ": "Asia/Shanghai"})
DIFFERING_KEPT = 20


@dataclass
class ReproReport(Report):
    reproducible: bool = False


def reproduce(
    command: str,
    workdir: Path,
    outputs: Sequence[str],
    *,
    limits: Limits = DEFAULT_LIMITS,
    keep: Path | None = None,
) -> ReproReport:
    """Run `command` twice on fresh copies of `workdir` and compare the `outputs` it writes. With `keep`, the
    first build's outputs are moved there (under the same names), to be compared with what was delivered."""
    report = ReproReport()
    workdir = Path(workdir)
    report.checked.update(command=command, outputs=list(outputs), runs=[])
    if not command.strip():
        report.add("command_missing", "no build command to run")
    if not outputs:
        report.add("outputs_missing", "no outputs named: nothing to compare")
    for output in outputs:
        path = PurePosixPath(output)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            report.add("output_invalid", f"output {output!r} is not a path inside the working directory", output=output)
    if not workdir.is_dir():
        report.add("workdir_missing", f"the working directory {workdir.name} does not exist")
    if report.findings:
        return report
    manifests = []
    for number, env in enumerate(RUNS, start=1):
        manifest = _run_once(command, workdir, outputs, env, limits, number, report, keep if number == 1 else None)
        if manifest is None:
            return report
        manifests.append(manifest)
    first, second = manifests
    for output in outputs:
        one, two = first[output], second[output]
        if one is None or two is None or one == two:
            continue
        differing = sorted(name for name in set(one) | set(two) if one.get(name) != two.get(name))
        report.add(
            "not_reproducible",
            f"{output} differs between the two builds ({len(differing)} file(s): "
            f"{', '.join(differing[:3])}{' ...' if len(differing) > 3 else ''})",
            output=output,
            differing=differing[:DIFFERING_KEPT],
            digests=[_digest(one), _digest(two)],
        )
    report.reproducible = not report.findings
    return report


def _run_once(
    command: str,
    source: Path,
    outputs: Sequence[str],
    env: dict[str, str],
    limits: Limits,
    number: int,
    report: ReproReport,
    keep: Path | None,
) -> dict[str, dict[str, str] | None] | None:
    """One build in a fresh copy; each output's per-file manifest (None where it is missing), or None when
    the build failed. The outputs are moved to `keep` when given."""
    scratch = Path(tempfile.mkdtemp(prefix=f"calculet-repro-{number}-"))
    try:
        workdir = scratch / "build"
        shutil.copytree(source, workdir, symlinks=True)
        ran = run_isolated(["/bin/sh", "-c", command], workdir=workdir, limits=limits, env=env)
        record: dict = {"run": number, "env": env, **ran.record}
        report.checked["runs"].append(record)
        if not ran.outcome.clean_exit:
            report.add(
                "build_failed",
                f"build {number} failed: {ran.outcome.reason}",
                run=number,
                output_tail=ran.output_tail,
            )
            return None
        manifests: dict[str, dict[str, str] | None] = {}
        for output in outputs:
            manifests[output] = _manifest(workdir / output)
            if manifests[output] is None:
                report.add("output_missing", f"build {number} did not write {output}", run=number, output=output)
        record["digests"] = {name: _digest(m) if m is not None else None for name, m in manifests.items()}
        if keep is not None:
            for output, manifest in manifests.items():
                if manifest is not None:
                    (keep / output).parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(workdir / output, keep / output)
        return manifests
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _manifest(path: Path) -> dict[str, str] | None:
    """Relative name -> what it is (file content and executable bit, or symlink target)."""
    if path.is_symlink():
        return {".": f"link {os.readlink(path)}"}
    if path.is_file():
        return {".": _file_entry(path)}
    if not path.is_dir():
        return None
    entries = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            full = Path(root, name)
            relative = str(full.relative_to(path))
            entries[relative] = f"link {os.readlink(full)}" if full.is_symlink() else _file_entry(full)
    return entries


def _file_entry(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            hasher.update(chunk)
    executable = "x" if path.stat().st_mode & stat.S_IXUSR else "-"
    return f"{executable} {hasher.hexdigest()}"


def _digest(manifest: dict[str, str]) -> str:
    hasher = hashlib.sha256()
    for name in sorted(manifest):
        hasher.update(f"{name}\0{manifest[name]}\n".encode())
    return f"sha256:{hasher.hexdigest()}"
