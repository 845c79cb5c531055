import gzip
import io
import tarfile
from pathlib import Path

import pytest
from django.core.files.storage import storages

from calculet.errors import ConflictError, DomainError, ForbiddenError
from tests.vendor.fixtures import make_artifact, sha256, tar_bytes
from vendor.models import Artifact, Blob
from vendor.services.artifacts import (
    ArtifactRejectedError,
    UnsafeArchiveError,
    archive_check,
    artifact_ingest,
    artifact_metadata_clean,
    upload_temp_dir,
)


def received(data: bytes) -> Path:
    path = upload_temp_dir() / f"received-{sha256(data)[:12]}"
    path.write_bytes(data)
    return path


def metadata(data: bytes, *, kind="calbin", version="1.0", file_name="a.calbin", declared=None):
    return artifact_metadata_clean(
        kind=kind, version=version, file_name=file_name, sha256=declared or sha256(data), size=len(data)
    )


def stored_files() -> list[str]:
    root = Path(storages["artifacts"].location)
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()) if root.exists() else []


def test_verified_bytes_are_stored_once_per_digest(vendor_a, vendor_b):
    data = tar_bytes({"manifest.json": b"{}", "weights.bin": b"\0" * 1000})
    first = artifact_ingest(actor=vendor_a.user, path=received(data), metadata=metadata(data))
    second = artifact_ingest(actor=vendor_b.user, path=received(data), metadata=metadata(data, file_name="b.calbin"))
    assert first.state == second.state == Artifact.VERIFIED
    assert first.blob == second.blob
    assert Blob.objects.count() == 1
    assert stored_files() == [f"sha256/{sha256(data)[:2]}/{sha256(data)}"]
    assert not list(upload_temp_dir().iterdir())  # the received files were consumed


def test_a_digest_mismatch_keeps_nothing_as_a_valid_artifact(vendor_a):
    data = b"calbin bytes"
    path = received(data)
    with pytest.raises(ArtifactRejectedError) as error:
        artifact_ingest(
            actor=vendor_a.user, path=path, metadata=metadata(data, kind="golden", declared=sha256(b"other"))
        )
    assert (error.value.field, error.value.code) == ("sha256", "digest_mismatch")
    rejected = error.value.artifact
    assert rejected.state == Artifact.REJECTED
    assert rejected.blob is None
    assert sha256(data) in rejected.rejection_reason
    assert not Artifact.objects.filter(state=Artifact.VERIFIED).exists()
    assert not Blob.objects.exists()
    assert stored_files() == []
    assert not path.exists()


def test_a_version_names_one_content(vendor_a):
    first = make_artifact(vendor_a, kind="golden", version="1.0", file_name="g.npz", data=b"one")
    again = make_artifact(vendor_a, kind="golden", version="1.0", file_name="g.npz", data=b"one")
    assert again == first
    with pytest.raises(ConflictError) as error:
        make_artifact(vendor_a, kind="golden", version="1.0", file_name="g.npz", data=b"two")
    assert error.value.field == "version"
    assert Artifact.objects.count() == 1


def test_only_vendor_engineers_upload(pm):
    with pytest.raises(ForbiddenError):
        make_artifact(pm, kind="golden")


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("../../etc/passwd", "file_name"),
        ("/etc/passwd", "file_name"),
        ("..", "file_name"),
        ("a\\b.calbin", "file_name"),
        ("bad\nname", "file_name"),
        ("x" * 256, "file_name"),
    ],
)
def test_file_names_are_plain_names(name, field):
    with pytest.raises(DomainError) as error:
        artifact_metadata_clean(kind="calbin", version="1.0", file_name=name, sha256="0" * 64, size=1)
    assert error.value.field == field


def tar_with(configure) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        ok = tarfile.TarInfo("manifest.json")
        ok.size = 2
        archive.addfile(ok, io.BytesIO(b"{}"))
        info = tarfile.TarInfo("member")
        configure(info)
        archive.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return buffer.getvalue()


def _named(name):
    def configure(info):
        info.name = name
        info.size = 1

    return configure


def _link(kind, target, name="link"):
    def configure(info):
        info.name = name
        info.type = kind
        info.linkname = target

    return configure


def _special(kind):
    def configure(info):
        info.type = kind

    return configure


UNSAFE_ARCHIVES = {
    "absolute path": tar_with(_named("/etc/cron.d/evil")),
    "dot-dot": tar_with(_named("model/../../evil")),
    "symlink out": tar_with(_link(tarfile.SYMTYPE, "../../etc/passwd", name="model/link")),
    "absolute symlink": tar_with(_link(tarfile.SYMTYPE, "/etc/passwd")),
    "hard link out": tar_with(_link(tarfile.LNKTYPE, "../outside")),
    "character device": tar_with(_special(tarfile.CHRTYPE)),
    "block device": tar_with(_special(tarfile.BLKTYPE)),
    "fifo": tar_with(_special(tarfile.FIFOTYPE)),
    "not a tar": b"just some bytes, not an archive" * 40,
}


@pytest.mark.parametrize("case", sorted(UNSAFE_ARCHIVES))
def test_unsafe_archives_are_refused_without_unpacking(vendor_a, case):
    data = UNSAFE_ARCHIVES[case]
    with pytest.raises(ArtifactRejectedError) as error:
        artifact_ingest(actor=vendor_a.user, path=received(data), metadata=metadata(data, kind="runner_bundle"))
    assert (error.value.field, error.value.code) == ("file", "unsafe_archive")
    assert not Blob.objects.exists()
    assert stored_files() == []


def test_links_that_stay_inside_are_accepted(vendor_a):
    data = tar_with(_link(tarfile.SYMTYPE, "../manifest.json", name="model/link"))
    artifact = artifact_ingest(actor=vendor_a.user, path=received(data), metadata=metadata(data, kind="calbin"))
    assert artifact.state == Artifact.VERIFIED


def test_member_and_size_limits_apply_before_unpacking(vendor_a, settings, tmp_path):
    settings.ARCHIVE_MAX_MEMBERS = 3
    many = tar_bytes({f"f{n}": b"x" for n in range(4)})
    (tmp_path / "many.tar").write_bytes(many)
    with pytest.raises(UnsafeArchiveError, match="more than 3 members"):
        archive_check(tmp_path / "many.tar")

    settings.ARCHIVE_MAX_MEMBERS = 100
    settings.ARCHIVE_MAX_UNPACKED_BYTES = 1000
    # A gzip bomb in small: 2 MB of zeros compress to a few KiB; the header says how big it would be.
    bomb = gzip.compress(tar_bytes({"zeros": b"\0" * 2_000_000}))
    assert len(bomb) < 10_000
    (tmp_path / "bomb.tar.gz").write_bytes(bomb)
    with pytest.raises(UnsafeArchiveError, match="more than 1000 bytes"):
        archive_check(tmp_path / "bomb.tar.gz")


def test_a_compressed_image_tarball_is_accepted(vendor_a):
    data = gzip.compress(tar_bytes({"manifest.json": b"[]", "blobs/sha256/ab": b"layer"}))
    artifact = artifact_ingest(
        actor=vendor_a.user,
        path=received(data),
        metadata=metadata(data, kind="container_image", file_name="image.tar.gz"),
    )
    assert artifact.state == Artifact.VERIFIED
