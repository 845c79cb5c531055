"""Is what a build writes the artifact that was delivered? A reproducible build proves nothing about a
deliverable unless its output is that deliverable: the image's config and layers, or the package's files, each
found by digest among the files the build wrote.

The build's outputs are read once: every regular file hashed, and every member of a file that is a tar
archive too (a build that writes its image as an OCI archive whose own bytes differ from the delivered one,
tar headers and all, still holds the same blobs). Links are not followed.
"""

import hashlib
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.inspection import Report

CHUNK = 1024 * 1024
MAX_MEMBERS = 100_000
NAMED_IN_MESSAGE = 3


@dataclass(frozen=True)
class Delivered:
    """One delivered artifact as a build may write it: the whole file's digest, or its parts (what each is,
    such as "config", "layer 2" or a package file's path -> `sha256:<hex>`)."""

    name: str
    sha256: str
    parts: dict[str, str] = field(default_factory=dict)


def check_built_is_delivered(built: Path, delivered: Sequence[Delivered]) -> Report:
    """The build's outputs under `built` hold one of the `delivered` artifacts, whole or every one of its parts.
    Otherwise a finding for each names what the build did not write."""
    report = Report()
    written = _written_digests(Path(built))
    report.checked["written_digests"] = len(written)
    missing_by_artifact = {}
    for artifact in delivered:
        whole = f"sha256:{artifact.sha256}"
        if whole in written:
            report.checked.update(artifact=artifact.name, found_as={"whole": written[whole]})
            return report
        found = {what: written[digest] for what, digest in artifact.parts.items() if digest in written}
        missing = {what: digest for what, digest in artifact.parts.items() if what not in found}
        if artifact.parts and not missing:
            report.checked.update(artifact=artifact.name, found_as=found)
            return report
        missing_by_artifact[artifact.name] = missing
    for name, missing in missing_by_artifact.items():
        if not missing:
            report.add("build_not_delivered", f"the build did not write {name}", artifact=name)
            continue
        named = ", ".join(f"{what} {digest}" for what, digest in list(missing.items())[:NAMED_IN_MESSAGE])
        more = f" (and {len(missing) - NAMED_IN_MESSAGE} more)" if len(missing) > NAMED_IN_MESSAGE else ""
        report.add(
            "build_not_delivered",
            f"the build's output is not {name}: it did not write its {named}{more}",
            artifact=name,
            missing=missing,
        )
    if not delivered:
        report.add("build_not_delivered", "nothing delivered to compare the build's output with")
    return report


def _written_digests(built: Path) -> dict[str, str]:
    """`sha256:<hex>` -> where the build wrote it (a file's path under `built`, or `archive:member`)."""
    written: dict[str, str] = {}
    for root, _dirs, files in os.walk(built):
        for name in sorted(files):
            path = Path(root, name)
            if path.is_symlink() or not path.is_file():
                continue
            where = str(path.relative_to(built))
            with path.open("rb") as stream:
                written.setdefault(f"sha256:{_sha256(stream)}", where)
            if tarfile.is_tarfile(path):
                _add_members(path, where, written)
    return written


def _add_members(path: Path, where: str, written: dict[str, str]) -> None:
    try:
        with tarfile.open(path, "r:*") as archive:
            for count, member in enumerate(archive):
                if count >= MAX_MEMBERS:
                    return
                stream = archive.extractfile(member) if member.isfile() else None
                if stream is not None:
                    written.setdefault(f"sha256:{_sha256(stream)}", f"{where}:{member.name}")
    except (tarfile.TarError, EOFError, OSError):
        return  # not an archive after all: its own digest was taken


def _sha256(stream) -> str:
    hasher = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        hasher.update(chunk)
    return hasher.hexdigest()


def archive_parts(path: Path) -> dict[str, str]:
    """A package delivered as a tar: each regular file's path -> `sha256:<hex>`."""
    parts = {}
    with tarfile.open(path, "r:*") as archive:
        for count, member in enumerate(archive):
            if count >= MAX_MEMBERS:
                break
            stream = archive.extractfile(member) if member.isfile() else None
            if stream is not None:
                parts[member.name.removeprefix("./")] = f"sha256:{_sha256(stream)}"
    return parts


def image_parts(images: list[dict]) -> dict[str, str]:
    """An image's config and layers (`oci.ImageReport.images`) as parts: "config", "layer 1", ... (with the
    manifest's digest when the image index names several)."""
    parts = {}
    for image in images:
        suffix = f" of manifest {image['manifest']}" if len(images) > 1 else ""
        parts[f"config{suffix}"] = image["config"]
        for number, layer in enumerate(image["layers"], start=1):
            parts[f"layer {number}{suffix}"] = layer
    return parts
