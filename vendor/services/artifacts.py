"""Artifacts: versioned vendor deliverables whose bytes are verified before anyone may use them.

Every way bytes arrive (a single-request upload, the last chunk of a tus upload) ends in
`artifact_ingest`, which checks size and digest against what was declared, inspects archives without
unpacking them, and stores the bytes once per content digest.
"""

import hashlib
import os
import re
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from calculet.audit import audit_record
from calculet.errors import ConflictError, DomainError, ForbiddenError, PayloadTooLargeError
from vendor.access import user_membership
from vendor.models import Artifact, Membership, Organisation
from vendor.storage import CHUNK_BYTES, blob_store_file, file_sha256

ARCHIVE_KINDS = {Artifact.CALBIN, Artifact.RUNNER_BUNDLE, Artifact.CONTAINER_IMAGE}
KIND_CODES = [code for code, _ in Artifact.KINDS]
SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
VERSION_PATTERN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+\-]{0,99}$")
FILE_NAME_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


class ArtifactRejectedError(DomainError):
    """The bytes arrived but failed verification; `artifact` is the rejected record (no bytes kept)."""

    def __init__(self, message: str, *, artifact: Artifact, field: str, code: str):
        super().__init__(message, field=field, code=code)
        self.artifact = artifact


class UnsafeArchiveError(Exception):
    pass


def artifact_uploader_organisation(actor) -> Organisation:
    """The organisation an upload belongs to. Vendor engineers upload; nobody else does."""
    membership = user_membership(actor)
    if membership is None or membership.role != Membership.VENDOR:
        raise ForbiddenError("Only a vendor engineer uploads artifacts.")
    return membership.organisation


def artifact_metadata_clean(*, kind, version, file_name, sha256, size, field_names: dict | None = None) -> dict:
    """Validate what an uploader declares about the bytes to come. Raises DomainError naming the field
    (`field_names` maps kind/version/filename/sha256/size to the names the caller's clients use)."""
    names = {"kind": "kind", "version": "version", "filename": "file_name", "sha256": "sha256", "size": "size"}
    names.update(field_names or {})
    if kind not in KIND_CODES:
        raise DomainError(f"Unknown artifact kind {kind!r}; one of: {', '.join(KIND_CODES)}.", field=names["kind"])
    if not isinstance(version, str) or not VERSION_PATTERN.match(version):
        raise DomainError(
            "A version is 1–100 letters, digits, '.', '_', '+' or '-', starting with a letter or digit.",
            field=names["version"],
        )
    if not isinstance(file_name, str) or not file_name.strip():
        raise DomainError("Give the file name.", field=names["filename"])
    if (
        len(file_name) > 255
        or FILE_NAME_FORBIDDEN.search(file_name)
        or file_name in {".", ".."}
        or file_name != file_name.strip()
    ):
        raise DomainError(
            "A file name is a plain name of at most 255 characters: no path, no '..', no control characters.",
            field=names["filename"],
        )
    if not isinstance(sha256, str) or not SHA256_PATTERN.match(sha256):
        raise DomainError("The SHA-256 is 64 lowercase hexadecimal digits.", field=names["sha256"])
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise DomainError("The size is a whole number of bytes.", field=names["size"])
    if size > settings.UPLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"At most {settings.UPLOAD_MAX_BYTES} bytes may be uploaded; {size} declared.", field=names["size"]
        )
    return {"kind": kind, "version": version, "filename": file_name, "sha256": sha256, "size": size}


def artifact_version_check(organisation: Organisation, metadata: dict, *, field: str = "version") -> Artifact | None:
    """The verified artifact the declared bytes would duplicate (same name, version and digest), or None.

    A verified version names one content: the same name and version with another digest is a ConflictError.
    """
    existing = Artifact.objects.filter(
        organisation=organisation,
        kind=metadata["kind"],
        file_name=metadata["filename"],
        version=metadata["version"],
        state=Artifact.VERIFIED,
    ).first()
    if existing is None:
        return None
    if existing.declared_sha256 != metadata["sha256"]:
        raise ConflictError(
            f"{metadata['filename']} version {metadata['version']} already exists with other content; "
            "give the new bytes a new version.",
            field=field,
        )
    return existing


def archive_check(path: Path) -> None:
    """Refuse a tar archive that could write outside its directory or blow up when unpacked.

    Reads member headers only, so nothing is unpacked: absolute names, '..', links that leave the archive,
    device files and FIFOs are refused, as are more members or more unpacked bytes than the configured
    limits. Python's tarfile `data` filter is applied to every member as the floor.
    """
    if not tarfile.is_tarfile(path):
        raise UnsafeArchiveError("The file is not a tar archive.")
    max_members = settings.ARCHIVE_MAX_MEMBERS
    max_bytes = settings.ARCHIVE_MAX_UNPACKED_BYTES
    destination = str(Path(tempfile.gettempdir()) / "calculet-archive-check")
    members = 0
    unpacked = 0
    try:
        with tarfile.open(path, mode="r:*") as archive:
            for member in archive:
                members += 1
                if members > max_members:
                    raise UnsafeArchiveError(f"The archive holds more than {max_members} members.")
                unpacked += member.size
                if unpacked > max_bytes:
                    raise UnsafeArchiveError(f"The archive unpacks to more than {max_bytes} bytes.")
                _member_check(member)
                try:
                    tarfile.data_filter(member, destination)
                except tarfile.FilterError as error:
                    raise UnsafeArchiveError(f"Member {member.name!r} refused: {error}.") from error
    except (tarfile.TarError, EOFError, OSError) as error:
        raise UnsafeArchiveError(f"The archive cannot be read: {error}.") from error


def _leaves(path: PurePosixPath) -> bool:
    depth = 0
    for part in path.parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            return True
    return False


def _member_check(member: tarfile.TarInfo) -> None:
    name = PurePosixPath(member.name)
    if member.name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", member.name):
        raise UnsafeArchiveError(f"Member {member.name!r} has an absolute path.")
    if ".." in name.parts:
        raise UnsafeArchiveError(f"Member {member.name!r} contains '..'.")
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeArchiveError(f"Member {member.name!r} is a device file or FIFO.")
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/"):
            raise UnsafeArchiveError(f"Link {member.name!r} points to the absolute path {target!r}.")
        base = name.parent if member.issym() else PurePosixPath()
        if _leaves(base / target):
            raise UnsafeArchiveError(f"Link {member.name!r} points outside the archive ({target!r}).")


def _reject(*, actor, organisation, metadata: dict, message: str, field: str, code: str) -> ArtifactRejectedError:
    with transaction.atomic():
        artifact = Artifact.objects.create(
            organisation=organisation,
            kind=metadata["kind"],
            version=metadata["version"],
            file_name=metadata["filename"],
            declared_size=metadata["size"],
            declared_sha256=metadata["sha256"],
            state=Artifact.REJECTED,
            rejection_reason=message,
            uploaded_by=actor,
        )
        audit_record(actor=actor, action="artifact.reject", obj=artifact, after={"reason": message, **metadata})
    return ArtifactRejectedError(message, artifact=artifact, field=field, code=code)


def artifact_ingest(
    *, actor, path: Path, metadata: dict, sha256: str | None = None, size: int | None = None, field_names=None
) -> Artifact:
    """Turn the received bytes at `path` into a verified artifact of the actor's organisation.

    Preconditions: `metadata` comes from `artifact_metadata_clean`; `sha256`/`size`, when given, were
    computed over the bytes as they arrived (otherwise they are computed here). The file at `path` is
    consumed. Bytes whose size or digest differ from the declared ones, and archives that fail
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
        if size != metadata["size"]:
            raise _reject(
                actor=actor,
                organisation=organisation,
                metadata=metadata,
                message=f"Received {size} bytes; {metadata['size']} were declared.",
                field=names["size"],
                code="size_mismatch",
            )
        if sha256 != metadata["sha256"]:
            raise _reject(
                actor=actor,
                organisation=organisation,
                metadata=metadata,
                message=f"The received bytes have SHA-256 {sha256}; {metadata['sha256']} was declared.",
                field=names["sha256"],
                code="digest_mismatch",
            )
        if metadata["kind"] in ARCHIVE_KINDS:
            try:
                archive_check(path)
            except UnsafeArchiveError as error:
                raise _reject(
                    actor=actor,
                    organisation=organisation,
                    metadata=metadata,
                    message=str(error),
                    field=names["file"],
                    code="unsafe_archive",
                ) from error
        existing = artifact_version_check(organisation, metadata, field=names["version"])
        if existing is not None:
            return existing
        blob = blob_store_file(path, sha256=sha256, size=size, move=True)
        try:
            with transaction.atomic():
                artifact = Artifact.objects.create(
                    organisation=organisation,
                    kind=metadata["kind"],
                    version=metadata["version"],
                    file_name=metadata["filename"],
                    declared_size=metadata["size"],
                    declared_sha256=metadata["sha256"],
                    blob=blob,
                    state=Artifact.VERIFIED,
                    uploaded_by=actor,
                    verified_at=timezone.now(),
                )
                audit_record(actor=actor, action="artifact.verify", obj=artifact, after=metadata)
        except IntegrityError:
            # Another request verified the same name and version first.
            existing = artifact_version_check(organisation, metadata, field=names["version"])
            if existing is None:
                raise
            return existing
        return artifact
    finally:
        path.unlink(missing_ok=True)


def upload_temp_dir() -> Path:
    directory = Path(settings.UPLOAD_TEMP_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def artifact_upload(*, actor, stream, kind, version, file_name, sha256) -> Artifact:
    """A single-request upload: copy `stream` (a file-like object) to a temporary file, digesting on the
    way, then ingest it. For files up to UPLOAD_PLAIN_MAX_BYTES; larger ones go through tus."""
    organisation = artifact_uploader_organisation(actor)
    metadata = artifact_metadata_clean(kind=kind, version=version, file_name=file_name, sha256=sha256, size=0)
    artifact_version_check(organisation, metadata)
    digest = hashlib.sha256()
    size = 0
    handle, name = tempfile.mkstemp(prefix="plain-", dir=upload_temp_dir())
    try:
        with os.fdopen(handle, "wb") as target:
            while chunk := stream.read(CHUNK_BYTES):
                size += len(chunk)
                if size > settings.UPLOAD_PLAIN_MAX_BYTES:
                    raise PayloadTooLargeError(
                        f"At most {settings.UPLOAD_PLAIN_MAX_BYTES} bytes in one request; use the tus endpoint "
                        "/api/v1/uploads/ for larger files.",
                        field="file",
                    )
                digest.update(chunk)
                target.write(chunk)
            target.flush()
            os.fsync(target.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    metadata["size"] = size
    return artifact_ingest(actor=actor, path=Path(name), metadata=metadata, sha256=digest.hexdigest(), size=size)
