"""Reading a calbin package from a directory or a tar, without extracting it."""

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import numpy as np

from npu_sim.calbin.findings import CalbinError, Finding

# The destination handed to tarfile's data filter. Nothing is extracted there; the filter only
# needs it to decide whether a member would land outside it.
_FILTER_DESTINATION = os.path.abspath(os.path.join(os.sep, "calbin-package"))


def unsafe_path_reason(name: str) -> str | None:
    """Why a relative path taken from a package or a manifest may not be used, or None."""
    if not name:
        return "empty path"
    if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in name.replace("\\", "/").split("/"):
        return "'..' in path"
    return None


class Package(Protocol):
    problems: list[Finding]

    def has(self, name: str) -> bool: ...

    def read(self, name: str) -> bytes: ...

    def sha256(self, name: str) -> str: ...

    def size(self, name: str) -> int: ...

    def names(self) -> list[str]: ...


class DirPackage:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.problems: list[Finding] = []

    def _path(self, name: str) -> Path:
        reason = unsafe_path_reason(name)
        path = (self.root / name).resolve()
        if reason is None and not path.is_relative_to(self.root):
            reason = "resolves outside the package"
        if reason:
            raise CalbinError("path_unsafe", f"{name}: {reason}")
        return path

    def has(self, name: str) -> bool:
        return self._path(name).is_file()

    def names(self) -> list[str]:
        """Every regular file, as a relative path with forward slashes."""
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())

    def read(self, name: str) -> bytes:
        return self._path(name).read_bytes()

    def size(self, name: str) -> int:
        return self._path(name).stat().st_size

    def sha256(self, name: str) -> str:
        digest = hashlib.sha256()
        with self._path(name).open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()


class TarPackage:
    """Reads member headers once; refuses links, device files, absolute and '..' names."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.problems: list[Finding] = []
        self.members: dict[str, tarfile.TarInfo] = {}
        for member in tar.getmembers():
            name = member.name[2:] if member.name.startswith("./") else member.name
            reason = self._refusal(member, name)
            if reason:
                self.problems.append(Finding("tar_member_unsafe", "error", member.name, reason))
            elif member.isfile():
                self.members[name] = member

    def _refusal(self, member: tarfile.TarInfo, name: str) -> str | None:
        reason = unsafe_path_reason(member.name)
        if reason:
            return reason
        if member.issym() or member.islnk():
            return "links are not allowed in a calbin"
        if not (member.isfile() or member.isdir()):
            return "only regular files and directories are allowed"
        if name in self.members:
            return "duplicate member"
        try:
            tarfile.data_filter(member, _FILTER_DESTINATION)
        except tarfile.FilterError as error:
            return f"refused by tarfile's data filter: {error}"
        return None

    def _member(self, name: str) -> tarfile.TarInfo:
        reason = unsafe_path_reason(name)
        if reason:
            raise CalbinError("path_unsafe", f"{name}: {reason}")
        if name not in self.members:
            raise CalbinError("file_missing", f"{name}: no such regular file in the tar")
        return self.members[name]

    def has(self, name: str) -> bool:
        return unsafe_path_reason(name) is None and name in self.members

    def names(self) -> list[str]:
        return sorted(self.members)

    def size(self, name: str) -> int:
        return self._member(name).size

    def read(self, name: str) -> bytes:
        f = self.tar.extractfile(self._member(name))
        if f is None:
            raise CalbinError("file_missing", f"{name}: cannot be read")
        return f.read()

    def sha256(self, name: str) -> str:
        f = self.tar.extractfile(self._member(name))
        if f is None:
            raise CalbinError("file_missing", f"{name}: cannot be read")
        digest = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
        return digest.hexdigest()


@contextmanager
def open_package(path: str | os.PathLike[str]) -> Iterator[Package]:
    p = Path(path)
    if p.is_dir():
        yield DirPackage(p)
    elif p.is_file():
        try:
            with tarfile.open(p, "r:*") as tar:
                yield TarPackage(tar)
        except tarfile.TarError as error:
            raise CalbinError("package_unreadable", f"{p}: not a directory or a readable tar ({error})") from error
    else:
        raise CalbinError("package_missing", f"{p}: no such file or directory")


def load_array(package: Package, name: str) -> np.ndarray:
    return np.load(io.BytesIO(package.read(name)), allow_pickle=False)
