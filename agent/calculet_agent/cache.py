"""Inputs kept by SHA-256 in the agent's state directory, so a package is fetched once however many runs
read it. A file is in the cache only once its digest was checked; a partial download resumes."""

import os
import shutil
from collections.abc import Callable
from pathlib import Path


class DigestMismatchError(Exception):
    pass


class Cache:
    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def size_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.root.glob("*/*") if path.is_file())

    def fetch(self, sha256: str, download: Callable[[Path], str]) -> Path:
        """The cached file of `sha256`, downloaded into a partial file first (resumed where one was cut);
        `download` returns the SHA-256 of what it wrote, computed as it wrote it."""
        final = self.path(sha256)
        if final.exists():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        partial = final.with_name(f"{sha256}.partial")
        actual = download(partial)
        if actual != sha256:
            partial.unlink()
            raise DigestMismatchError(f"the input fetched as {sha256} has SHA-256 {actual}")
        os.replace(partial, final)
        return final

    def copy_into(self, sha256: str, destination: Path) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.path(sha256), destination)
