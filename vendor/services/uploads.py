"""Resumable uploads (the tus 1.0 protocol's state, without its HTTP).

The bytes of an upload go to `<UPLOAD_TEMP_DIR>/<id>.part` in constant memory. The SHA-256 of the whole
upload is computed on the way, and its state is stored with the offset after every chunk (`Upload.hash_state`,
a `rehashes` SHA-256 state: hashlib's cannot be saved), so the next chunk continues it in whichever web
worker it lands, never reading the bytes already stored. The last byte hands the file to `artifact_ingest`,
which verifies it against the declared digest.
"""

import contextlib
import datetime
import fcntl
import hashlib
import hmac
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop
from rehashes import PySha256

from calculet.actors import SYSTEM, Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import NO_SPACE, ConflictError, DomainError, NotFoundError, StorageFullError
from vendor.inputs import ArtifactDeclaration
from vendor.models import Upload
from vendor.services.artifacts import (
    ArtifactRejectedError,
    artifact_ingest,
    artifact_uploader_organisation,
    artifact_version_check,
    upload_temp_dir,
)
from vendor.storage import CHUNK_BYTES

WRITEBACK_BYTES = 8 * 1024 * 1024
# A PATCH records what it holds (fsynced, with its hash state) every CHECKPOINT_BYTES or CHECKPOINT_SECONDS,
# so a worker killed mid-chunk loses at most that much (HEAD reports the rest) and a termination is seen soon.
# The byte checkpoint's fsync runs while the next bytes are read (the offset is stored once it completed); the
# time checkpoint's is waited for, so a client that pauses has what it sent recorded at once.
CHECKPOINT_BYTES = 64 * 1024 * 1024
CHECKPOINT_SECONDS = 2.0
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


class UploadTerminatedError(NotFoundError):
    """The upload was terminated (DELETE) while this request was writing to it."""


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


def upload_create(*, actor: Actor, length: int, declaration: ArtifactDeclaration) -> Upload:
    """Open an upload of `length` bytes for the actor's organisation.

    Preconditions: the actor is a vendor engineer; `length` is from 1 to UPLOAD_MAX_BYTES (the tus header
    parser checks it); the name and version are not already a verified artifact with other content. Errors
    name the tus header at fault.
    """
    organisation = artifact_uploader_organisation(actor)
    artifact_version_check(organisation, declaration, field="Upload-Metadata.version")
    with transaction.atomic():
        upload = Upload.objects.create(
            organisation=organisation,
            user=actor_user(actor),
            length=length,
            metadata=declaration.stored(),
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
        raise UploadExpiredError(gettext_noop("The upload's bytes are gone; start a new upload."))
    # Unbuffered: a write that fails leaves nothing in a buffer to be written (or fail again) later.
    with open(path, "r+b", buffering=0) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise UploadBusyError(gettext_noop("Another request is writing to this upload.")) from error
        yield handle


def upload_check_open(upload: Upload) -> None:
    if upload.artifact_id is None and upload.expires_at <= timezone.now():
        raise UploadExpiredError(gettext_noop("The upload expired; start a new upload."))


def upload_append(
    *,
    actor: Actor,
    upload: Upload,
    offset: int,
    stream,
    content_length: int,
    chunk_checksum: tuple[str, bytes] | None = None,
) -> Upload:
    """Append one PATCH's bytes at `offset`, reading `stream` in constant memory.

    Preconditions: `offset` equals the upload's offset (ConflictError otherwise: a replayed or skipped
    chunk); the chunk does not run past the declared length; with `chunk_checksum` (algorithm and raw
    digest from Upload-Checksum), the chunk must match it or it is discarded (ChecksumMismatchError).
    A connection that breaks off keeps the bytes received (unless a checksum was given: then they cannot
    be trusted), and so does a worker killed mid-chunk, up to its last checkpoint. A termination meanwhile
    stops the chunk (UploadTerminatedError, 404). When the last byte arrives the upload becomes an artifact
    (see `artifact_ingest`).
    """
    upload_check_open(upload)
    if upload.artifact_id is not None:
        raise ConflictError(gettext_noop("The upload is complete."), field="Upload-Offset", code="complete")
    if offset + content_length > upload.length:
        raise DomainError(
            gettext_noop("The chunk ends at byte %(offset)s, past the upload's length %(length)s."),
            field="Content-Length",
            params={"offset": offset + content_length, "length": upload.length},
        )
    path = upload_path(upload)
    with _exclusive(path) as handle:
        upload.refresh_from_db(fields=["offset", "artifact", "hash_state"])
        if upload.artifact_id is not None:
            raise ConflictError(gettext_noop("The upload is complete."), field="Upload-Offset", code="complete")
        if offset != upload.offset:
            raise ConflictError(
                gettext_noop("Upload-Offset %(offset)s does not match the upload's offset %(upload_offset)s."),
                field="Upload-Offset",
                params={"offset": offset, "upload_offset": upload.offset},
            )
        on_disk = os.fstat(handle.fileno()).st_size
        if on_disk < offset:
            Upload.objects.filter(pk=upload.pk).update(offset=on_disk, hash_state=b"")
            raise ConflictError(
                gettext_noop("Only %(on_disk)s bytes are stored; resume from there."),
                field="Upload-Offset",
                params={"on_disk": on_disk},
            )
        handle.truncate(offset)  # bytes past the recorded offset were never acknowledged
        chunk = _Chunk(upload, handle, offset, _hash_resume(upload, path), chunk_checksum)
        try:
            chunk.receive(stream, content_length)
        except UploadTerminatedError:
            path.unlink(missing_ok=True)
            raise
        upload.offset, upload.hash_state = chunk.recorded, chunk.hash_state
        if upload.offset < upload.length:
            return upload
        return _upload_finish(actor=actor, upload=upload, sha256=chunk.digest.finalize())


class _Chunk:
    """One PATCH's bytes, copied from the request to the upload's file at `offset` and recorded in the
    upload's row: at checkpoints while they arrive (not for a chunk with a checksum, which is kept whole or
    not at all) and at the end."""

    def __init__(self, upload: Upload, handle, offset: int, digest: PySha256, chunk_checksum):
        self.upload, self.handle, self.start = upload, handle, offset
        self.recorded = offset  # the offset the row holds
        self.hash_state = bytes(upload.hash_state)
        self.digest = digest
        self.chunk_checksum = chunk_checksum
        self.chunk_digest = hashlib.new(chunk_checksum[0]) if chunk_checksum is not None else None
        self.read = 0  # bytes taken from the request body
        self.flush: _Flush | None = None  # a checkpoint's fsync in flight

    def receive(self, stream, content_length: int) -> None:
        """Copy up to `content_length` bytes. On a full disk nothing past the last recorded offset is kept,
        the rest of the body is read and dropped (so a client still sending hears the answer) and
        StorageFullError is raised."""
        try:
            self._copy(stream, content_length)
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            self.handle.truncate(self.recorded)
            _discard(stream, content_length - self.read)
            kept = "nothing of this chunk was kept" if self.recorded == self.start else "the chunk was kept in part"
            raise StorageFullError(
                gettext_noop("The artifact store is full; %(kept)s. Resume at Upload-Offset %(recorded)s later."),
                params={"kept": kept, "recorded": self.recorded},
            ) from error

    def _copy(self, stream, content_length: int) -> None:
        self.handle.seek(self.start)
        received = written_back = checkpointed = 0
        checkpoint_at = time.monotonic() + CHECKPOINT_SECONDS
        try:
            while received < content_length:
                try:
                    block = stream.read(min(CHUNK_BYTES, content_length - received))
                except OSError:  # the client went away mid-chunk
                    break
                if not block:
                    break
                self.read += len(block)
                remaining = memoryview(block)
                while remaining:
                    remaining = remaining[self.handle.write(remaining) :]
                self.digest.update(block)
                if self.chunk_digest is not None:
                    self.chunk_digest.update(block)
                received += len(block)
                if received - written_back >= WRITEBACK_BYTES:
                    _write_back(self.handle, self.start + max(written_back - WRITEBACK_BYTES, 0), self.start + received)
                    written_back = received
                if self.flush is not None and self.flush.done():
                    self._store_flush()
                if time.monotonic() >= checkpoint_at:
                    # Waited for: a client that pauses mid-chunk has what it sent recorded now, not later.
                    self._checkpoint(self.start + received)
                    checkpointed, checkpoint_at = received, time.monotonic() + CHECKPOINT_SECONDS
                elif received - checkpointed >= CHECKPOINT_BYTES and received < content_length:
                    self._checkpoint_begin(self.start + received)
                    checkpointed, checkpoint_at = received, time.monotonic() + CHECKPOINT_SECONDS
                time.sleep(0)  # under gevent, let the worker's other connections run between blocks
        except BaseException:
            self._abandon_flush()
            raise
        if self.chunk_digest is not None:
            if received < content_length:
                self.handle.truncate(self.start)
                self._check_not_terminated()
                return
            if not hmac.compare_digest(self.chunk_digest.digest(), self.chunk_checksum[1]):
                self.handle.truncate(self.start)
                raise ChecksumMismatchError(
                    gettext_noop("The chunk's digest does not match Upload-Checksum; it was discarded."),
                    field="Upload-Checksum",
                )
        self._record(self.start + received)

    def _checkpoint(self, end: int) -> None:
        if self.chunk_digest is None:
            self._record(end)
        else:
            self._check_not_terminated()

    def _checkpoint_begin(self, end: int) -> None:
        """A checkpoint whose fsync runs in another thread while the next bytes are read, written and hashed
        (at most one at a time); its offset is stored once the fsync has completed."""
        if self.chunk_digest is None:
            self._store_flush()
            self.flush = _Flush(self.handle, end, self.digest.serialize())
        else:
            self._check_not_terminated()

    def _store_flush(self) -> None:
        """Wait for the flush in flight, if any, and store the offset it made durable."""
        flush, self.flush = self.flush, None
        if flush is not None:
            flush.wait()
            self._store(flush.end, flush.hash_state)

    def _abandon_flush(self) -> None:
        """Let a flush in flight end before the file is cut back or closed; what it made durable stays
        unrecorded, as if it had not run."""
        flush, self.flush = self.flush, None
        if flush is not None:
            with contextlib.suppress(OSError):
                flush.wait()

    def _record(self, end: int) -> None:
        """Make the bytes up to `end` durable and store the offset with the hash state; a row that is gone
        means the upload was terminated meanwhile."""
        self._store_flush()
        if end == self.recorded:
            self._check_not_terminated()
            return
        _fsync(self.handle)
        self._store(end, self.digest.serialize())

    def _store(self, end: int, state: bytes) -> None:
        if not Upload.objects.filter(pk=self.upload.pk, offset=self.recorded).update(offset=end, hash_state=state):
            raise UploadTerminatedError(gettext_noop("The upload was terminated while this chunk was being sent."))
        self.recorded, self.hash_state = end, state

    def _check_not_terminated(self) -> None:
        if not Upload.objects.filter(pk=self.upload.pk).exists():
            raise UploadTerminatedError(gettext_noop("The upload was terminated while this chunk was being sent."))


def _gevent_hub():
    """gevent's hub when gevent has patched the standard library (gunicorn.conf.py's workers), else None."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("socket"):
        return None
    import gevent

    return gevent.get_hub()


def _fsync(handle) -> None:
    """Wait until the disk holds the file's bytes. Under gevent the wait goes to gevent's thread pool: in the
    worker's own thread it would stall every other connection of the worker meanwhile."""
    hub = _gevent_hub()
    if hub is not None:
        hub.threadpool.apply(os.fsync, (handle.fileno(),))
    else:
        os.fsync(handle.fileno())


# Sync workers and the test server: threads for the flushes in flight (one per PATCH at a time).
_FLUSH_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="upload-fsync")


class _Flush:
    """An fsync of the upload's file running in another thread (gevent's thread pool under gevent), and the
    offset and hash state that are durable once it has completed: `done()` polls, `wait()` blocks (under
    gevent cooperatively) and raises what the fsync raised."""

    def __init__(self, handle, end: int, hash_state: bytes):
        self.end, self.hash_state = end, hash_state
        hub = _gevent_hub()
        if hub is not None:
            result = hub.threadpool.spawn(os.fsync, handle.fileno())
            self.done, self.wait = result.ready, result.get
        else:
            future = _FLUSH_THREADS.submit(os.fsync, handle.fileno())
            self.done, self.wait = future.done, future.result


def _discard(stream, length: int) -> None:
    """Read and drop up to `length` more bytes of a request body."""
    while length > 0:
        try:
            block = stream.read(min(CHUNK_BYTES, length))
        except OSError:
            return
        if not block:
            return
        length -= len(block)
        time.sleep(0)


def _write_back(handle, start: int, end: int) -> None:
    """Start writing [start, end) to disk while more bytes arrive, so the fsync at the end of the PATCH does
    not wait for the whole chunk, and drop the pages written back since the last call: a multi-GB upload
    then neither waits for the disk at its end nor crowds the page cache. (Linux starts asynchronous
    writeback of dirty pages on POSIX_FADV_DONTNEED.)"""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(handle.fileno(), start, end - start, os.POSIX_FADV_DONTNEED)


def _upload_finish(*, actor: Actor, upload: Upload, sha256: str | None) -> Upload:
    """Hand the complete file to `artifact_ingest` and link the resulting artifact, verified or rejected."""
    stored = upload.metadata
    declaration = ArtifactDeclaration(
        kind=stored["kind"], version=stored["version"], file_name=stored["filename"], sha256=stored["sha256"]
    )
    try:
        artifact = artifact_ingest(
            actor=actor,
            path=upload_path(upload),
            declaration=declaration,
            declared_size=upload.length,
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


def upload_terminate(*, actor: Actor, upload: Upload) -> None:
    """Delete an upload and its partial bytes (tus termination). A finished upload's artifact stays.

    A PATCH writing to the upload meanwhile holds its file: it finds the row gone at its next checkpoint (at
    most CHECKPOINT_SECONDS later) or at its end, answers 404, makes no artifact and removes the file."""
    with transaction.atomic():
        locked = lock_rows(Upload.objects).get(pk=upload.pk)
        audit_record(
            actor=actor, action="upload.terminate", obj=locked, after={"offset": locked.offset, **locked.metadata}
        )
        locked.delete()
    path = upload_path(upload)
    try:
        with _exclusive(path):
            path.unlink()
    except (UploadBusyError, UploadExpiredError):  # being written (its writer removes it), or already gone
        pass


def upload_expire_stale(*, now: datetime.datetime | None = None) -> int:
    """Delete unfinished uploads past their expiry, with their bytes; returns how many."""
    now = now or timezone.now()
    count = 0
    for upload in Upload.objects.filter(artifact__isnull=True, expires_at__lte=now).iterator():
        with transaction.atomic():  # the row first, the audit head last (the lock order)
            Upload.objects.filter(pk=upload.pk).delete()
            audit_record(actor=SYSTEM, action="upload.expire", obj=upload, after={"offset": upload.offset})
        upload_path(upload).unlink(missing_ok=True)
        count += 1
    return count
