import bz2
import gzip
import io
import stat
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.storage import storages
from django.utils import timezone

from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.models import AuditEntry
from tests.factories import make_artifact, sha256, tar_bytes, zero_bomb
from vendor.inputs import ArtifactDeclaration, artifact_declaration
from vendor.models import Artifact, Blob
from vendor.services.artifacts import (
    ArtifactRejectedError,
    UnsafeArchiveError,
    archive_check,
    archive_extract,
    artifact_check,
    artifact_ingest,
    artifacts_check_resend,
    upload_temp_dir,
)


def received(data: bytes) -> Path:
    path = upload_temp_dir() / f"received-{sha256(data)[:12]}"
    path.write_bytes(data)
    return path


def declared(data: bytes, *, kind="calbin", version="1.0", file_name="a.calbin", digest=None) -> dict:
    """What an uploader of `data` declares, as `artifact_ingest` takes it."""
    declaration = ArtifactDeclaration(kind=kind, version=version, file_name=file_name, sha256=digest or sha256(data))
    return {"declaration": declaration, "declared_size": len(data)}


def stored_files() -> list[str]:
    root = Path(storages["artifacts"].location)
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()) if root.exists() else []


def test_verified_bytes_are_stored_once_per_digest(vendor_a, vendor_b):
    data = tar_bytes({"manifest.json": b"{}", "weights.bin": b"\0" * 1000})
    first = artifact_ingest(actor=vendor_a.user, path=received(data), **declared(data))
    second = artifact_ingest(actor=vendor_b.user, path=received(data), **declared(data, file_name="b.calbin"))
    assert first.state == second.state == Artifact.VERIFIED
    assert first.blob == second.blob
    assert Blob.objects.count() == 1
    assert stored_files() == [f"sha256/{sha256(data)[:2]}/{sha256(data)}"]
    assert not list(upload_temp_dir().iterdir())  # the received files were consumed


def test_a_digest_mismatch_keeps_nothing_as_a_valid_artifact(vendor_a):
    data = b"calbin bytes"
    path = received(data)
    with pytest.raises(ArtifactRejectedError) as error:
        artifact_ingest(actor=vendor_a.user, path=path, **declared(data, kind="golden", digest=sha256(b"other")))
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
    first = make_artifact(vendor_a.user, kind="golden", version="1.0", file_name="g.npz", data=b"one")
    again = make_artifact(vendor_a.user, kind="golden", version="1.0", file_name="g.npz", data=b"one")
    assert again == first
    with pytest.raises(ConflictError) as error:
        make_artifact(vendor_a.user, kind="golden", version="1.0", file_name="g.npz", data=b"two")
    assert error.value.field == "version"
    assert Artifact.objects.count() == 1


def test_only_vendor_engineers_upload(pm):
    with pytest.raises(ForbiddenError):
        make_artifact(pm.user, kind="golden")


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
        artifact_declaration(kind="calbin", version="1.0", file_name=name, sha256="0" * 64)
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


def _mode(bits):
    def configure(info):
        info.size = 1
        info.mode = 0o755 | bits

    return configure


def tar_members(*members: tuple[str, bytes, str]) -> bytes:
    """A tar of (type, name, link target or content) in order: "file", "dir", "symlink" or "hardlink"."""
    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            info.type = kinds[kind]
            content = value.encode() if kind == "file" else b""
            if kind in ("symlink", "hardlink"):
                info.linkname = value
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


# Each link stays inside on its own; through the ones before it, the last leads out.
SYMLINK_CHAIN = tar_members(
    ("symlink", "a", "."), ("symlink", "a/b", ".."), ("symlink", "a/b/c", ".."), ("file", "a/b/c/escaped", "x")
)

UNSAFE_ARCHIVES = {
    "absolute path": tar_with(_named("/etc/cron.d/evil")),
    "dot-dot": tar_with(_named("model/../../evil")),
    "backslash dot-dot": tar_with(_named("..\\..\\evil.bat")),
    "backslash inside a name": tar_with(_named("model\\..\\..\\evil.bat")),
    "drive letter": tar_with(_named("C:/Windows/evil.bat")),
    "drive letter, relative": tar_with(_named("c:evil.bat")),
    "backslash in a link target": tar_with(_link(tarfile.SYMTYPE, "..\\..\\etc", name="model/link")),
    "symlink out": tar_with(_link(tarfile.SYMTYPE, "../../etc/passwd", name="model/link")),
    "absolute symlink": tar_with(_link(tarfile.SYMTYPE, "/etc/passwd")),
    "hard link out": tar_with(_link(tarfile.LNKTYPE, "../outside")),
    "character device": tar_with(_special(tarfile.CHRTYPE)),
    "block device": tar_with(_special(tarfile.BLKTYPE)),
    "fifo": tar_with(_special(tarfile.FIFOTYPE)),
    "setuid": tar_with(_mode(stat.S_ISUID)),
    "setgid": tar_with(_mode(stat.S_ISGID)),
    "sticky": tar_with(_mode(stat.S_ISVTX)),
    "symlink chain": SYMLINK_CHAIN,
    "directory link then a link out": tar_members(
        ("dir", "d", ""), ("symlink", "d/up", ".."), ("symlink", "d/up/out", "..")
    ),
    "hard link through a link": tar_members(("symlink", "a", "."), ("symlink", "b", "a/.."), ("hardlink", "h", "b/x")),
    "not a tar": b"just some bytes, not an archive" * 40,
}


@pytest.mark.parametrize("case", sorted(UNSAFE_ARCHIVES))
def test_unsafe_archives_are_refused_without_unpacking(vendor_a, case):
    data = UNSAFE_ARCHIVES[case]
    with pytest.raises(ArtifactRejectedError) as error:
        artifact_ingest(actor=vendor_a.user, path=received(data), **declared(data, kind="runner_bundle"))
    assert (error.value.field, error.value.code) == ("file", "unsafe_archive")
    assert not Blob.objects.exists()
    assert stored_files() == []


def test_links_that_stay_inside_are_accepted(vendor_a):
    data = tar_with(_link(tarfile.SYMTYPE, "../manifest.json", name="model/link"))
    artifact = artifact_ingest(actor=vendor_a.user, path=received(data), **declared(data, kind="calbin"))
    assert artifact.state == Artifact.VERIFIED


def test_member_and_size_limits_apply_before_unpacking(vendor_a, settings, tmp_path):
    settings.ARCHIVE_MAX_MEMBERS = 3
    many = tar_bytes({f"f{n}": b"x" for n in range(4)})
    (tmp_path / "many.tar").write_bytes(many)
    with pytest.raises(UnsafeArchiveError, match=r"more than ARCHIVE_MAX_MEMBERS \(3\) members"):
        archive_check(tmp_path / "many.tar")

    settings.ARCHIVE_MAX_MEMBERS = 100
    settings.ARCHIVE_MAX_UNPACKED_BYTES = 1000
    (tmp_path / "big.tar").write_bytes(tar_bytes({"data": b"x" * 2000}))
    with pytest.raises(UnsafeArchiveError, match=r"unpacks to more than ARCHIVE_MAX_UNPACKED_BYTES \(1000\) bytes"):
        archive_check(tmp_path / "big.tar")
    # Compressed, the budget counts what is decompressed, before any header is believed.
    (tmp_path / "big.tar.gz").write_bytes(gzip.compress(tar_bytes({"data": b"x" * 2000})))
    with pytest.raises(UnsafeArchiveError, match=r"decompresses to more than ARCHIVE_MAX_UNPACKED_BYTES \(1000\)"):
        archive_check(tmp_path / "big.tar.gz")


# gzip compresses at most about 1000:1, so its bomb is larger and the budget it gets is larger too.
@pytest.mark.parametrize(("compression", "unpacked"), [("bz2", 8 * 1024**3), ("gz", 1024**3)])
def test_a_decompression_bomb_is_refused_within_its_ratio_budget(tmp_path, compression, unpacked):
    bomb = tmp_path / f"bomb.tar.{compression}"
    bomb.write_bytes(zero_bomb(compression, unpacked))
    with pytest.raises(UnsafeArchiveError) as error:
        archive_check(bomb)
    budget = 100 * bomb.stat().st_size + 1024 * 1024
    assert budget < unpacked / 10
    assert str(error.value) == (
        f"The archive decompresses to more than {budget} bytes: ARCHIVE_MAX_RATIO allows 100 times its "
        f"{bomb.stat().st_size} compressed bytes (plus 1048576)."
    )


def test_a_compressed_archive_is_verifying_until_its_check_decides(vendor_a):
    data = gzip.compress(tar_bytes({"manifest.json": b"[]", "blobs/sha256/ab": b"layer"}))
    artifact = artifact_ingest(
        actor=vendor_a.user,
        path=received(data),
        **declared(data, kind="container_image", file_name="image.tar.gz"),
    )
    # Tests run with a broker and no worker here: the check waits for one; this is what the worker calls.
    assert (artifact.state, artifact.verified_at) == (Artifact.VERIFYING, None)
    assert artifact_check(artifact.pk).state == Artifact.VERIFIED
    artifact.refresh_from_db()
    assert artifact.state == Artifact.VERIFIED and artifact.verified_at is not None
    assert artifact_check(artifact.pk).state == Artifact.VERIFIED  # a repeated message changes nothing
    assert list(
        AuditEntry.objects.filter(object_id=str(artifact.pk)).order_by("id").values_list("action", flat=True)
    ) == [
        "artifact.receive",
        "artifact.verify",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_compressed_archive_is_decided_in_process_on_the_laptop_default(vendor_a, chain_in_process):
    data = bz2.compress(tar_bytes({"runner.json": b"{}"}))
    artifact = artifact_ingest(
        actor=vendor_a.user, path=received(data), **declared(data, kind="runner_bundle", file_name="r.tar.bz2")
    )
    assert artifact.state == Artifact.VERIFIED


@pytest.mark.django_db(transaction=True)  # the bytes go once the rejection commits
def test_a_compressed_archive_that_fails_its_check_is_rejected_and_its_bytes_dropped(vendor_a):
    data = gzip.compress(SYMLINK_CHAIN)
    artifact = artifact_ingest(
        actor=vendor_a.user, path=received(data), **declared(data, kind="runner_bundle", file_name="r.tgz")
    )
    assert artifact.state == Artifact.VERIFYING and stored_files() != []
    rejected = artifact_check(artifact.pk)
    assert (rejected.state, rejected.blob) == (Artifact.REJECTED, None)
    assert rejected.rejection_reason == "Link 'a/b' points outside the archive ('..')."
    assert not Blob.objects.exists()
    assert stored_files() == []


def test_a_version_being_verified_names_one_content(vendor_a):
    data = gzip.compress(tar_bytes({"manifest.json": b"{}"}))
    first = artifact_ingest(actor=vendor_a.user, path=received(data), **declared(data, file_name="c.tgz"))
    again = artifact_ingest(actor=vendor_a.user, path=received(data), **declared(data, file_name="c.tgz"))
    assert again == first and first.state == Artifact.VERIFYING
    other = gzip.compress(tar_bytes({"manifest.json": b"[]"}))
    with pytest.raises(ConflictError):
        artifact_ingest(actor=vendor_a.user, path=received(other), **declared(other, file_name="c.tgz"))


def test_a_check_whose_message_was_lost_is_sent_again(vendor_a, request):
    data = gzip.compress(tar_bytes({"manifest.json": b"{}"}))
    # Sent to the broker, where no worker of this test listens: as good as lost.
    artifact = artifact_ingest(actor=vendor_a.user, path=received(data), **declared(data, file_name="c.tgz"))
    assert artifact.state == Artifact.VERIFYING
    request.getfixturevalue("chain_in_process")  # from here on, tasks run in this process
    assert artifacts_check_resend() == 0  # not overdue yet
    assert artifacts_check_resend(now=timezone.now() + timedelta(minutes=11)) == 1
    artifact.refresh_from_db()
    assert artifact.state == Artifact.VERIFIED


def test_extraction_applies_the_same_rule_as_the_check(tmp_path):
    safe = tmp_path / "safe.tar.gz"
    safe.write_bytes(
        gzip.compress(
            tar_members(("dir", "model", ""), ("file", "model/w.bin", "weights"), ("symlink", "w", "model/w.bin"))
        )
    )
    archive_extract(safe, tmp_path / "safe")
    assert (tmp_path / "safe" / "w").read_text() == "weights"

    chain = tmp_path / "chain.tar"
    chain.write_bytes(SYMLINK_CHAIN)
    (tmp_path / "chain").mkdir()
    with pytest.raises(UnsafeArchiveError, match=r"Link 'a/b' points outside the archive"):
        archive_extract(chain, tmp_path / "chain")
    assert list((tmp_path / "chain").iterdir()) == []
    assert not (tmp_path / "escaped").exists()
