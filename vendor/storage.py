"""Content-addressed artifact bytes: one stored copy per SHA-256, in the `artifacts` storage."""

import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.core.files import File
from django.core.files.storage import storages
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.db import IntegrityError, transaction

from vendor.models import Blob

CHUNK_BYTES = 1024 * 1024


def artifact_storage():
    return storages["artifacts"]


def blob_storage_name(sha256: str) -> str:
    return f"sha256/{sha256[:2]}/{sha256}"


def file_sha256(path: Path) -> tuple[str, int]:
    """Digest and size of a file, read in constant memory."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def blob_store_file(path: Path, *, sha256: str, size: int, move: bool = False) -> Blob:
    """Store verified bytes once per digest and return their Blob.

    Preconditions: `sha256` and `size` were computed over the file's bytes. A second call with the same
    digest keeps the first copy. With `move`, the file at `path` is consumed: renamed into a filesystem
    store (no second copy of a multi-GB upload), or deleted once copied or found already stored.
    """
    try:
        return _blob_store(path, sha256=sha256, size=size, move=move)
    finally:
        if move:
            Path(path).unlink(missing_ok=True)


def _blob_store(path: Path, *, sha256: str, size: int, move: bool) -> Blob:
    existing = Blob.objects.filter(sha256=sha256).first()
    if existing is not None:
        return existing
    name = blob_storage_name(sha256)
    storage = artifact_storage()
    if not storage.exists(name) and not (move and _rename_into(storage, name, Path(path))):
        with open(path, "rb") as handle:
            saved = storage.save(name, File(handle))
        if saved != name:  # another process stored the same bytes first; keep theirs
            storage.delete(saved)
    try:
        with transaction.atomic():
            return Blob.objects.create(sha256=sha256, size=size, storage_name=name)
    except IntegrityError:
        return Blob.objects.get(sha256=sha256)


def _rename_into(storage, name: str, path: Path) -> bool:
    """Rename a file into a filesystem store, durably. False when the store is not a local filesystem
    on the same device."""
    try:
        target = Path(storage.path(name))
    except NotImplementedError:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    os.chmod(path, 0o444)
    try:
        os.replace(path, target)
    except OSError as error:
        if error.errno == errno.EXDEV:
            return False
        raise
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return True


@contextmanager
def blob_local_path(blob: Blob) -> Iterator[Path]:
    """A local filesystem path holding the blob's bytes: the stored file itself, or a temporary copy
    for remote stores (S3)."""
    storage = artifact_storage()
    try:
        yield Path(storage.path(blob.storage_name))
        return
    except NotImplementedError:
        pass
    with tempfile.TemporaryDirectory(prefix="calculet-blob-") as tmp:
        local = Path(tmp) / blob.sha256
        with storage.open(blob.storage_name, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK_BYTES)
        yield local


class SpoolUploadHandler(TemporaryFileUploadHandler):
    """Django's spooling of a multipart file to FILE_UPLOAD_TEMP_DIR, which removes what it spooled when a
    write fails (a full disk): Django's own handler leaves the partial file until it is garbage-collected."""

    def receive_data_chunk(self, raw_data, start):
        try:
            return super().receive_data_chunk(raw_data, start)
        except OSError:
            self.upload_interrupted()
            raise
