"""Resumable uploads (the tus 1.0 protocol's state, without its HTTP).

The bytes of an upload go to `<UPLOAD_TEMP_DIR>/<id>.part` in constant memory. The SHA-256 of the whole
upload is computed on the way, and its state is stored with the offset after every chunk (`Upload.hash_state`,
a `rehashes` SHA-256 state: hashlib's cannot be saved), so the next chunk continues it in whichever web
worker it lands, never reading the bytes already stored. The last byte hands the file to `artifact_ingest`,
which verifies it against the declared digest.
"""

import datetime
import fcntl
import hashlib
import hmac
import os
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rehashes import PySha256

from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import NO_SPACE, ConflictError, DomainError, StorageFullError
from vendor.models import Upload
from vendor.services.artifacts import (
    ArtifactRejectedError,
    artifact_ingest,
    artifact_metadata_clean,
    artifact_uploader_organisation,
    artifact_version_check,
    upload_temp_dir,
)
from vendor.storage import CHUNK_BYTES

METADATA_KEYS = ("kind", "version", "filename", "sha256")
WRITEBACK_BYTES = 8 * 1024 * 1024
INGEST_FIELD_NAMES = {
    "sha256": "Upload-Metadata.sha256",
    "size": "Upload-Length",
    "file": "Upload-Metadata.filename",
    "version": "Upload-Metadata.version",
}


class UploadExpiredError(DomainError):
    status_code = HTTPStatus.GONE
    code = "expired"


class UploadBusyError(DomainError):
    status_code = HTTPStatus.LOCKED
    code = "locked"


class ChecksumMismatchError(DomainError):
    status_code = 460  # tus checksum extension: "Checksum Mismatch"
    code = "checksum_mismatch"


def _hash_resume(upload: Upload, path: Path) -> PySha256:
    """The SHA-256 of the upload's first `offset` bytes, continued from its stored state. Only an upload
    without a state it can read (begun before states were stored, or cut back to what its file holds) reads
    its stored bytes, once."""
    if upload.offset == 0:
        return PySha256()
    try:
        return PySha256.deserialize(bytes(upload.hash_state))
    except ValueError:
        digest = PySha256()
        remaining = upload.offset
        with open(path, "rb") as handle:
            while remaining and (chunk := handle.read(min(CHUNK_BYTES, remaining))):
                digest.update(chunk)
                remaining -= len(chunk)
        return digest


def upload_path(upload: Upload) -> Path:
    return Path(settings.UPLOAD_TEMP_DIR) / f"{upload.id}.part"


def upload_create(*, actor, length, metadata: dict) -> Upload:
    """Open an upload of `length` bytes for the actor's organisation.

    Preconditions: the actor is a vendor engineer; `metadata` carries kind, version, filename and the
    declared sha256 (hex); `length` is within UPLOAD_MAX_BYTES; the name and version are not already a
    verified artifact with other content. Errors name the tus header at fault.
    """
    organisation = artifact_uploader_organisation(actor)
    for key in METADATA_KEYS:
        if key not in metadata:
            raise DomainError(f"Upload-Metadata lacks {key}.", field=f"Upload-Metadata.{key}")
    cleaned = artifact_metadata_clean(
        kind=metadata["kind"],
        version=metadata["version"],
        file_name=metadata["filename"],
        sha256=metadata["sha256"],
        size=length,
        field_names={**{key: f"Upload-Metadata.{key}" for key in METADATA_KEYS}, "size": "Upload-Length"},
    )
    artifact_version_check(organisation, cleaned, field="Upload-Metadata.version")
    with transaction.atomic():
        upload = Upload.objects.create(
            organisation=organisation,
            user=actor,
            length=length,
            metadata={key: cleaned[key] for key in METADATA_KEYS},
            expires_at=timezone.now() + datetime.timedelta(hours=settings.UPLOAD_EXPIRY_HOURS),
        )
        audit_record(actor=actor, action="upload.create", obj=upload, after={"length": length, **upload.metadata})
        upload_temp_dir()
        upload_path(upload).touch(exist_ok=False)
    return upload


@contextmanager
def _exclusive(path: Path):
    """One writer per upload across threads and processes; a second one is told the upload is busy."""
    if not path.exists():
        raise UploadExpiredError("The upload's bytes are gone; start a new upload.")
    # Unbuffered: a write that fails leaves nothing in a buffer to be written (or fail again) later.
    with open(path, "r+b", buffering=0) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise UploadBusyError("Another request is writing to this upload.") from error
        yield handle


def upload_check_open(upload: Upload) -> None:
    if upload.artifact_id is None and upload.expires_at <= timezone.now():
        raise UploadExpiredError("The upload expired; start a new upload.")


def upload_append(
    *, actor, upload: Upload, offset: int, stream, content_length: int, chunk_checksum: tuple[str, bytes] | None = None
) -> Upload:
    """Append one PATCH's bytes at `offset`, reading `stream` in constant memory.

    Preconditions: `offset` equals the upload's offset (ConflictError otherwise: a replayed or skipped
    chunk); the chunk does not run past the declared length; with `chunk_checksum` (algorithm and raw
    digest from Upload-Checksum), the chunk must match it or it is discarded (ChecksumMismatchError).
    A connection that breaks off keeps the bytes received (unless a checksum was given: then they cannot
    be trusted). When the last byte arrives the upload becomes an artifact (see `artifact_ingest`).
    """
    upload_check_open(upload)
    if upload.artifact_id is not None:
        raise ConflictError("The upload is complete.", field="Upload-Offset", code="complete")
    if offset + content_length > upload.length:
        raise DomainError(
            f"The chunk ends at byte {offset + content_length}, past the upload's length {upload.length}.",
            field="Content-Length",
        )
    path = upload_path(upload)
    with _exclusive(path) as handle:
        upload.refresh_from_db(fields=["offset", "artifact", "hash_state"])
        if upload.artifact_id is not None:
            raise ConflictError("The upload is complete.", field="Upload-Offset", code="complete")
        if offset != upload.offset:
            raise ConflictError(
                f"Upload-Offset {offset} does not match the upload's offset {upload.offset}.", field="Upload-Offset"
            )
        on_disk = os.fstat(handle.fileno()).st_size
        if on_disk < offset:
            Upload.objects.filter(pk=upload.pk).update(offset=on_disk, hash_state=b"")
            raise ConflictError(f"Only {on_disk} bytes are stored; resume from there.", field="Upload-Offset")
        handle.truncate(offset)  # bytes past the recorded offset were never acknowledged
        received, digest = _receive(handle, offset, stream, content_length, _hash_resume(upload, path), chunk_checksum)
        if not received:
            return upload
        upload.offset = offset + received
        upload.hash_state = digest.serialize()
        Upload.objects.filter(pk=upload.pk, offset=offset).update(offset=upload.offset, hash_state=upload.hash_state)
        if upload.offset < upload.length:
            return upload
        return _upload_finish(actor=actor, upload=upload, sha256=digest.finalize())


def _receive(handle, offset: int, stream, content_length: int, digest, chunk_checksum):
    """Copy up to `content_length` bytes from `stream` to `handle` at `offset`.

    Returns (bytes kept, `digest` advanced over them). A chunk with a checksum is kept whole or not at all.
    On a full disk nothing of the chunk is kept (the file is cut back to `offset`, the acknowledged end) and
    StorageFullError is raised."""
    try:
        return _copy(handle, offset, stream, content_length, digest, chunk_checksum)
    except OSError as error:
        if error.errno not in NO_SPACE:
            raise
        handle.truncate(offset)
        raise StorageFullError(
            f"The artifact store is full; nothing of this chunk was kept. Resume at Upload-Offset {offset} later."
        ) from error


def _copy(handle, offset: int, stream, content_length: int, digest, chunk_checksum):
    chunk_digest = hashlib.new(chunk_checksum[0]) if chunk_checksum is not None else None
    handle.seek(offset)
    received = 0
    written_back = 0
    while received < content_length:
        try:
            block = stream.read(min(CHUNK_BYTES, content_length - received))
        except OSError:  # the client went away mid-chunk
            break
        if not block:
            break
        remaining = memoryview(block)
        while remaining:
            remaining = remaining[handle.write(remaining) :]
        digest.update(block)
        if chunk_digest is not None:
            chunk_digest.update(block)
        received += len(block)
        if received - written_back >= WRITEBACK_BYTES:
            _write_back(handle, offset + max(written_back - WRITEBACK_BYTES, 0), offset + received)
            written_back = received
    if chunk_digest is not None:
        if received < content_length:
            handle.truncate(offset)
            return 0, None
        if not hmac.compare_digest(chunk_digest.digest(), chunk_checksum[1]):
            handle.truncate(offset)
            raise ChecksumMismatchError(
                "The chunk's digest does not match Upload-Checksum; it was discarded.", field="Upload-Checksum"
            )
    os.fsync(handle.fileno())
    return received, digest


def _write_back(handle, start: int, end: int) -> None:
    """Start writing [start, end) to disk while more bytes arrive, so the fsync at the end of the PATCH does
    not wait for the whole chunk, and drop the pages written back since the last call: a multi-GB upload
    then neither waits for the disk at its end nor crowds the page cache. (Linux starts asynchronous
    writeback of dirty pages on POSIX_FADV_DONTNEED.)"""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(handle.fileno(), start, end - start, os.POSIX_FADV_DONTNEED)


def _upload_finish(*, actor, upload: Upload, sha256: str | None) -> Upload:
    """Hand the complete file to `artifact_ingest` and link the resulting artifact, verified or rejected."""
    metadata = {**upload.metadata, "size": upload.length}
    try:
        artifact = artifact_ingest(
            actor=actor,
            path=upload_path(upload),
            metadata=metadata,
            sha256=sha256,
            size=upload.length if sha256 is not None else None,
            field_names=INGEST_FIELD_NAMES,
        )
    except ArtifactRejectedError as error:
        Upload.objects.filter(pk=upload.pk).update(artifact=error.artifact)
        upload.artifact = error.artifact
        raise
    except ConflictError:
        # Another upload verified this name and version with other bytes meanwhile; nothing is left to resume.
        Upload.objects.filter(pk=upload.pk).delete()
        raise
    Upload.objects.filter(pk=upload.pk).update(artifact=artifact)
    upload.artifact = artifact
    return upload


def upload_terminate(*, actor, upload: Upload) -> None:
    """Delete an upload and its partial bytes (tus termination). A finished upload's artifact stays."""
    with transaction.atomic():
        locked = lock_rows(Upload.objects).get(pk=upload.pk)
        audit_record(
            actor=actor, action="upload.terminate", obj=locked, after={"offset": locked.offset, **locked.metadata}
        )
        locked.delete()
        upload_path(upload).unlink(missing_ok=True)


def upload_expire_stale(*, now: datetime.datetime | None = None) -> int:
    """Delete unfinished uploads past their expiry, with their bytes; returns how many."""
    now = now or timezone.now()
    count = 0
    for upload in Upload.objects.filter(artifact__isnull=True, expires_at__lte=now).iterator():
        with transaction.atomic():  # the row first, the audit head last (the lock order)
            Upload.objects.filter(pk=upload.pk).delete()
            audit_record(actor=None, action="upload.expire", obj=upload, after={"offset": upload.offset})
        upload_path(upload).unlink(missing_ok=True)
        count += 1
    return count
