"""Artifacts: versioned vendor deliverables whose bytes are verified before anyone may use them.

Every way bytes arrive (a single-request upload, the last chunk of a tus upload) ends in
`artifact_ingest`, which checks size and digest against what was declared, inspects archives without
unpacking them, and stores the bytes once per content digest. A compressed archive costs work in proportion
to what it decompresses to, so it is inspected off the request path: the artifact stays `verifying` until
the `vendor.artifact_check` task decides (`artifact_check`).
"""

import bz2
import gzip
import hashlib
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import IO, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from calculet.actors import SYSTEM, Actor, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import (
    NO_SPACE,
    ConflictError,
    DomainError,
    ForbiddenError,
    PayloadTooLargeError,
    StorageFullError,
)
from calculet.sentences import english, sentence
from vendor.access import user_membership
from vendor.inputs import ArtifactDeclaration
from vendor.models import Artifact, Blob, Membership, Organisation
from vendor.services.dispatch import artifact_check_queue
from vendor.storage import CHUNK_BYTES, artifact_storage, blob_local_path, blob_store_file, file_sha256

ARCHIVE_KINDS = {Artifact.CALBIN, Artifact.RUNNER_BUNDLE, Artifact.CONTAINER_IMAGE}
# The compressions tarfile reads, by their magic bytes.
DECOMPRESSORS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
# A tiny archive is mostly tar padding, which compresses far beyond any sensible ratio.
RATIO_HEADROOM_BYTES = 1024 * 1024
SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
MAX_LINK_HOPS = 40
# A `verifying` artifact whose check message was lost (a broker restart) is sent again after this.
CHECK_RESEND_AFTER = timedelta(minutes=10)


class ArtifactRejectedError(DomainError):
    """The bytes arrived but failed verification; `artifact` is the rejected record (no bytes kept)."""

    def __init__(self, message: str, *, artifact: Artifact, field: str, code: str, params: dict):
        super().__init__(message, field=field, code=code, params=params)
        self.artifact = artifact


class UnsafeArchiveError(Exception):
    """An archive refused: its English sentence, and `sentence` to show it in the reader's language."""

    def __init__(self, template: str, *, params: dict | None = None):
        self.sentence = sentence(template, **(params or {}))
        super().__init__(english(self.sentence))


def artifact_uploader_organisation(actor: Actor) -> Organisation:
    """The organisation an upload belongs to. Vendor engineers upload; nobody else does."""
    membership = user_membership(actor)
    if membership is None or membership.role != Membership.VENDOR:
        raise ForbiddenError(gettext_noop("Only a vendor engineer uploads artifacts."))
    return membership.organisation


def artifact_version_check(
    organisation: Organisation, declaration: ArtifactDeclaration, *, field: str = "version"
) -> Artifact | None:
    """The verified (or verifying) artifact the declared bytes would duplicate (same name, version and digest),
    or None.

    A version names one content once verified, and while being verified: the same name and version with
    another digest is a ConflictError.
    """
    existing = Artifact.objects.filter(
        organisation=organisation,
        kind=declaration.kind,
        file_name=declaration.file_name,
        version=declaration.version,
        state__in=[Artifact.VERIFIED, Artifact.VERIFYING],
    ).first()
    if existing is None:
        return None
    if existing.declared_sha256 != declaration.sha256:
        raise ConflictError(
            gettext_noop(
                "%(filename)s version %(version)s already exists with other content; give the new bytes a new version."
            ),
            field=field,
            params={"filename": declaration.file_name, "version": declaration.version},
        )
    return existing


def _decompressor(path: Path):
    """The opener of the compression the file starts with (gzip, bzip2 or xz), or None."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    return next((opener for magic, opener in DECOMPRESSORS.items() if head.startswith(magic)), None)


def archive_compressed(path: Path) -> bool:
    return _decompressor(path) is not None


class _Budgeted:
    """A decompressed stream that refuses to give more than `limit` bytes."""

    def __init__(self, stream, limit: int, refusal: "UnsafeArchiveError"):
        self.stream, self.limit, self.refusal, self.given = stream, limit, refusal, 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.given += len(data)
        if self.given > self.limit:
            raise self.refusal
        return data


@contextmanager
def _archive_open(path: Path) -> Iterator[tarfile.TarFile]:
    """The archive, for reading its members in order. An uncompressed tar is read header by header, its
    data skipped by seeking. A compressed one can only be read through, so it is decompressed as a stream
    that stops past ARCHIVE_MAX_RATIO times its compressed size (plus RATIO_HEADROOM_BYTES) or
    ARCHIVE_MAX_UNPACKED_BYTES, whichever is less: a bomb costs a few megabytes of work, not gigabytes."""
    decompress = _decompressor(path)
    if decompress is None:
        with tarfile.open(path, "r:") as archive:
            yield archive
        return
    size = path.stat().st_size
    ratio, total = settings.ARCHIVE_MAX_RATIO, settings.ARCHIVE_MAX_UNPACKED_BYTES
    by_ratio = ratio * size + RATIO_HEADROOM_BYTES
    if by_ratio < total:
        limit = by_ratio
        message = (
            f"The archive decompresses to more than {by_ratio} bytes: ARCHIVE_MAX_RATIO allows {ratio} times its "
            f"{size} compressed bytes (plus {RATIO_HEADROOM_BYTES})."
        )
    else:
        limit = total
        message = gettext_noop("The archive decompresses to more than ARCHIVE_MAX_UNPACKED_BYTES (%(total)s) bytes.")
    with (
        decompress(path, "rb") as stream,
        tarfile.open(
            fileobj=cast(IO[bytes], _Budgeted(stream, limit, UnsafeArchiveError(message, params={"total": total}))),
            mode="r|",
        ) as archive,
    ):
        yield archive


def archive_check(path: Path) -> None:
    """Refuse a tar archive that could write outside its directory, or cost unbounded work to inspect.

    Nothing is unpacked: every member is judged by `archive_member_check` (the rule `archive_extract` applies
    while unpacking), and more than ARCHIVE_MAX_MEMBERS members, more than ARCHIVE_MAX_UNPACKED_BYTES in
    their sizes, or a compressed archive past its decompression budget (`_archive_open`) is refused.
    """
    max_members = settings.ARCHIVE_MAX_MEMBERS
    max_bytes = settings.ARCHIVE_MAX_UNPACKED_BYTES
    # A stand-in: nothing is written there; Python's data filter resolves names against a directory.
    destination = Path(tempfile.gettempdir()) / "calculet-archive-check"
    members = 0
    unpacked = 0
    tree = ArchiveTree()
    try:
        with _archive_open(path) as archive:
            for member in archive:
                members += 1
                if members > max_members:
                    raise UnsafeArchiveError(
                        gettext_noop("The archive holds more than ARCHIVE_MAX_MEMBERS (%(max_members)s) members."),
                        params={"max_members": max_members},
                    )
                unpacked += member.size
                if unpacked > max_bytes:
                    raise UnsafeArchiveError(
                        gettext_noop(
                            "The archive unpacks to more than ARCHIVE_MAX_UNPACKED_BYTES (%(max_bytes)s) bytes."
                        ),
                        params={"max_bytes": max_bytes},
                    )
                archive_member_check(member, tree, str(destination))
    except tarfile.ReadError as error:
        raise UnsafeArchiveError(
            gettext_noop("The file is not a tar archive (optionally gzip, bzip2 or xz compressed): %(error)s."),
            params={"error": str(error)},
        ) from error
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as error:
        raise UnsafeArchiveError(
            gettext_noop("The archive cannot be read: %(error)s."), params={"error": str(error)}
        ) from error


def archive_extract(path: Path, destination: Path) -> None:
    """Unpack an archive into `destination` after `archive_check`, each member through `archive_member_check`
    against what is already unpacked: the same rule the check applied."""
    archive_check(path)
    tree = ArchiveTree()
    with _archive_open(path) as archive:
        archive.extractall(destination, filter=lambda member, dest: archive_member_check(member, tree, dest))


def example_unpack(artifact: Artifact, destination: Path) -> None:
    """An answer's minimal example into `destination`: a tar unpacked (`archive_extract`, which raises
    UnsafeArchiveError for a member it refuses), any other file copied under its own name."""
    with blob_local_path(artifact.stored_blob) as source:
        if tarfile.is_tarfile(source):
            archive_extract(source, destination)
        else:
            shutil.copyfile(source, destination / Path(artifact.file_name).name)


class ArchiveTree:
    """Where each symbolic link met so far in an archive points, so that a later member's name is resolved
    through them as the filesystem will resolve it once they are unpacked."""

    def __init__(self):
        self.links: dict[PurePosixPath, str] = {}

    def resolve(self, name: str, *, follow_last: bool) -> PurePosixPath | None:
        """The place under the destination that `name` reaches through the links met so far (the last part
        too with `follow_last`), or None when it leaves the destination or loops."""
        pending = list(PurePosixPath(name).parts)
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "/":
                return None
            if part == ".":
                continue
            if part == "..":
                if not resolved:
                    return None
                resolved.pop()
                continue
            target = self.links.get(PurePosixPath(*resolved, part))
            if target is not None and (pending or follow_last):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return None
                pending = list(PurePosixPath(target).parts) + pending
                continue
            resolved.append(part)
        return PurePosixPath(*resolved)


def archive_member_check(member: tarfile.TarInfo, tree: ArchiveTree, destination: str) -> tarfile.TarInfo:
    """Judge one member after the members before it (recorded in `tree`); returns it as it may be unpacked.

    Refused: an absolute name, a drive letter, a backslash or '..' in the name; a member written through the
    links before it to a place outside the destination (`a -> .`, then `a/b -> ..`); a symbolic link whose target, from
    where it is, leaves the destination; a hard link to a name outside it; a device file or FIFO; the setuid,
    setgid or sticky bit. Python's `data` filter is applied last, as the floor (it also drops group and other
    write permission). Raises UnsafeArchiveError naming the member.
    """
    name = member.name
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise UnsafeArchiveError(gettext_noop("Member %(name)r has an absolute path."), params={"name": name})
    # A Windows tool unpacks `..\x` as `../x`: a backslash is never a safe part of a name.
    if "\\" in name or "\\" in member.linkname:
        raise UnsafeArchiveError(
            gettext_noop("Member %(name)r has a backslash in its name or link target."), params={"name": name}
        )
    if ".." in PurePosixPath(name).parts:
        raise UnsafeArchiveError(gettext_noop("Member %(name)r contains '..'."), params={"name": name})
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeArchiveError(gettext_noop("Member %(name)r is a device file or FIFO."), params={"name": name})
    if member.mode & SPECIAL_BITS:
        raise UnsafeArchiveError(
            gettext_noop("Member %(name)r has the setuid, setgid or sticky bit (mode %(mode)s)."),
            params={"name": name, "mode": f"{member.mode:o}"},
        )
    place = tree.resolve(name, follow_last=False)
    if place is None:
        raise UnsafeArchiveError(
            gettext_noop("Member %(name)r would be written outside the archive through a link before it."),
            params={"name": name},
        )
    tree.links.pop(place, None)
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/"):
            raise UnsafeArchiveError(
                gettext_noop("Link %(name)r points to the absolute path %(target)r."),
                params={"name": name, "target": target},
            )
        # A symbolic link is resolved from its own directory; a hard link names a member from the top.
        reached = tree.resolve(str(place.parent / target) if member.issym() else target, follow_last=True)
        if reached is None:
            raise UnsafeArchiveError(
                gettext_noop("Link %(name)r points outside the archive (%(target)r)."),
                params={"name": name, "target": target},
            )
        if member.issym():
            tree.links[place] = target
    try:
        return tarfile.data_filter(member, destination)
    except tarfile.FilterError as error:
        raise UnsafeArchiveError(
            gettext_noop("Member %(name)r refused: %(error)s."), params={"name": name, "error": str(error)}
        ) from error


def _declared(declaration: ArtifactDeclaration, declared_size: int) -> dict:
    """What the uploader declared, as the audit log records it."""
    return {**declaration.stored(), "size": declared_size}


def _reject(
    *,
    actor: Actor,
    organisation,
    declaration: ArtifactDeclaration,
    declared_size: int,
    refusal: dict,
    field: str,
    code: str,
) -> ArtifactRejectedError:
    """The artifact stored as rejected with the English reason, and the refusal in the reader's language."""
    message = english(refusal)
    with transaction.atomic():
        artifact = Artifact.objects.create(
            organisation=organisation,
            kind=declaration.kind,
            version=declaration.version,
            file_name=declaration.file_name,
            declared_size=declared_size,
            declared_sha256=declaration.sha256,
            state=Artifact.REJECTED,
            rejection_reason=message,
            uploaded_by=actor_user(actor),
        )
        after = {"reason": message, **_declared(declaration, declared_size)}
        audit_record(actor=actor, action="artifact.reject", obj=artifact, after=after)
    return ArtifactRejectedError(
        refusal["template"], artifact=artifact, field=field, code=code, params=refusal["params"]
    )


def artifact_ingest(
    *,
    actor: Actor,
    path: Path,
    declaration: ArtifactDeclaration,
    declared_size: int,
    sha256: str | None = None,
    size: int | None = None,
    field_names=None,
) -> Artifact:
    """Turn the received bytes at `path` into an artifact of the actor's organisation: verified, or
    `verifying` when it is a compressed archive, which the `vendor.artifact_check` task then decides
    (`artifact_check`).

    Preconditions: `declared_size` is at most UPLOAD_MAX_BYTES; `sha256`/`size`, when given, were
    computed over the bytes as they arrived (otherwise they are computed here). The file at `path` is
    consumed. Bytes whose size or digest differ from the declared ones, and uncompressed archives that fail
    `archive_check`, become a rejected artifact with the reason and no stored bytes, and
    ArtifactRejectedError is raised. The same name and version with the same bytes returns the existing
    artifact; with other bytes, ConflictError.
    """
    names = {"sha256": "sha256", "size": "size", "file": "file", "version": "version"}
    names.update(field_names or {})
    path = Path(path)
    try:
        organisation = artifact_uploader_organisation(actor)
        if sha256 is None or size is None:
            sha256, size = file_sha256(path)
        if size != declared_size:
            raise _reject(
                actor=actor,
                organisation=organisation,
                declaration=declaration,
                declared_size=declared_size,
                refusal=sentence(
                    gettext_noop("Received %(size)s bytes; %(declared)s were declared."),
                    size=size,
                    declared=declared_size,
                ),
                field=names["size"],
                code="size_mismatch",
            )
        if sha256 != declaration.sha256:
            raise _reject(
                actor=actor,
                organisation=organisation,
                declaration=declaration,
                declared_size=declared_size,
                refusal=sentence(
                    gettext_noop("The received bytes have SHA-256 %(sha256)s; %(declared)s was declared."),
                    sha256=sha256,
                    declared=declaration.sha256,
                ),
                field=names["sha256"],
                code="digest_mismatch",
            )
        deferred = declaration.kind in ARCHIVE_KINDS and archive_compressed(path)
        if declaration.kind in ARCHIVE_KINDS and not deferred:
            try:
                archive_check(path)
            except UnsafeArchiveError as error:
                raise _reject(
                    actor=actor,
                    organisation=organisation,
                    declaration=declaration,
                    declared_size=declared_size,
                    refusal=error.sentence,
                    field=names["file"],
                    code="unsafe_archive",
                ) from error
        existing = artifact_version_check(organisation, declaration, field=names["version"])
        if existing is not None:
            return existing
        blob = blob_store_file(path, sha256=sha256, size=size, move=True)
        try:
            with transaction.atomic():
                artifact = Artifact.objects.create(
                    organisation=organisation,
                    kind=declaration.kind,
                    version=declaration.version,
                    file_name=declaration.file_name,
                    declared_size=declared_size,
                    declared_sha256=declaration.sha256,
                    blob=blob,
                    state=Artifact.VERIFYING if deferred else Artifact.VERIFIED,
                    uploaded_by=actor_user(actor),
                    verified_at=None if deferred else timezone.now(),
                )
                action = "artifact.receive" if deferred else "artifact.verify"
                audit_record(actor=actor, action=action, obj=artifact, after=_declared(declaration, declared_size))
                if deferred:
                    artifact_id = artifact.pk
                    transaction.on_commit(lambda: artifact_check_queue(artifact_id))
        except IntegrityError:
            # Another request stored the same name and version first.
            existing = artifact_version_check(organisation, declaration, field=names["version"])
            if existing is None:
                raise
            return existing
        if deferred:
            artifact.refresh_from_db()  # tasks run in-process on the laptop default: it may be decided already
        return artifact
    finally:
        path.unlink(missing_ok=True)


def artifact_check(artifact_id: int) -> Artifact:
    """Decide a `verifying` artifact: its archive passes `archive_check` (within its decompression budget)
    and it becomes verified, or it becomes rejected with the reason and its bytes are dropped (unless the
    same bytes belong to another artifact). An artifact no longer `verifying` is returned unchanged, so a
    repeated message does nothing."""
    artifact = Artifact.objects.select_related("blob").get(pk=artifact_id)
    if artifact.state != Artifact.VERIFYING:
        return artifact
    try:
        with blob_local_path(artifact.stored_blob) as path:
            archive_check(path)
        problem = ""
    except UnsafeArchiveError as error:
        problem = str(error)
    with transaction.atomic():
        locked = lock_rows(Artifact.objects).get(pk=artifact_id)
        if locked.state != Artifact.VERIFYING:
            return locked
        blob_id = locked.blob_id
        if problem:
            locked.state, locked.rejection_reason, locked.blob = Artifact.REJECTED, problem, None
            locked.save(update_fields=["state", "rejection_reason", "blob"])
            _blob_drop_unused(blob_id)
            audit_record(actor=SYSTEM, action="artifact.reject", obj=locked, after={"reason": problem})
        else:
            locked.state, locked.verified_at = Artifact.VERIFIED, timezone.now()
            locked.save(update_fields=["state", "verified_at"])
            audit_record(actor=SYSTEM, action="artifact.verify", obj=locked, after={"sha256": locked.declared_sha256})
    return locked


def _blob_drop_unused(blob_id: int) -> None:
    """Delete rejected bytes, unless another artifact holds the same ones. Inside the caller's transaction."""
    blob = lock_rows(Blob.objects).get(pk=blob_id)
    if blob.artifacts.exists():
        return
    name = blob.storage_name
    blob.delete()
    transaction.on_commit(lambda: artifact_storage().delete(name))


def artifacts_check_resend(*, now=None) -> int:
    """Send again the check of every artifact `verifying` for longer than CHECK_RESEND_AFTER (its message
    was lost); returns how many. A check still running meanwhile is harmless: one decides, the other finds
    it decided."""
    cutoff = (now or timezone.now()) - CHECK_RESEND_AFTER
    stale = list(Artifact.objects.filter(state=Artifact.VERIFYING, created_at__lte=cutoff).values_list("pk", flat=True))
    for artifact_id in stale:
        artifact_check_queue(artifact_id)
    return len(stale)


def upload_temp_dir() -> Path:
    directory = Path(settings.UPLOAD_TEMP_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def artifact_upload(*, actor: Actor, stream, declaration: ArtifactDeclaration) -> Artifact:
    """A single-request upload: copy `stream` (a file-like object) to a temporary file, digesting on the
    way, then ingest it. For files up to UPLOAD_PLAIN_MAX_BYTES; larger ones go through tus."""
    organisation = artifact_uploader_organisation(actor)
    artifact_version_check(organisation, declaration)
    digest = hashlib.sha256()
    size = 0
    handle, name = tempfile.mkstemp(prefix="plain-", dir=upload_temp_dir())
    try:
        with os.fdopen(handle, "wb") as target:
            while chunk := stream.read(CHUNK_BYTES):
                size += len(chunk)
                if size > settings.UPLOAD_PLAIN_MAX_BYTES:
                    raise PayloadTooLargeError(
                        gettext_noop(
                            "At most %(limit)s bytes in one request; use the tus endpoint /api/v1/uploads/ for larger "
                            "files."
                        ),
                        field="file",
                        params={"limit": settings.UPLOAD_PLAIN_MAX_BYTES},
                    )
                digest.update(chunk)
                target.write(chunk)
            target.flush()
            os.fsync(target.fileno())
    except BaseException as error:
        Path(name).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            raise StorageFullError(gettext_noop("The artifact store is full; nothing of the file was kept.")) from error
        raise
    # Nothing but the bytes declares a single request's size.
    return artifact_ingest(
        actor=actor, path=Path(name), declaration=declaration, declared_size=size, sha256=digest.hexdigest(), size=size
    )
