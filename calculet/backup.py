"""Backup and restore of the database and the artifact store together.

A backup is a directory holding `database.dump` (pg_dump's custom format on PostgreSQL, an SQLite copy
otherwise), `artifacts/` (the content-addressed store as files) and `manifest.json` (when, what engine,
row counts). The counts come from the very snapshot the dump is taken from, so they agree with it on a
live system. Restoring replaces both, checks the restored rows against those counts, then re-verifies
every stored artifact's digest.
"""

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from vendor.models import Blob
from vendor.storage import artifact_storage, file_sha256

COUNTED_MODELS = [
    "vendor.Question",
    "vendor.Answer",
    "vendor.Artifact",
    "vendor.Blob",
    "evidence.EvidenceItem",
    "evidence.Capability",
    "acceptance.Run",
    "acceptance.PromotionAttempt",
    "calculet.AuditEntry",
]


class BackupError(Exception):
    pass


def _pg_args() -> tuple[list[str], dict]:
    db = settings.DATABASES["default"]
    args = ["--host", db.get("HOST") or "127.0.0.1", "--port", str(db.get("PORT") or 5432)]
    if db.get("USER"):
        args += ["--username", db["USER"]]
    env = {"PGPASSWORD": db.get("PASSWORD") or ""}
    return args, env


def _is_postgres() -> bool:
    return connection.vendor == "postgresql"


def _artifact_root() -> Path:
    try:
        return Path(artifact_storage().path(""))
    except NotImplementedError as exc:
        raise BackupError("the artifact store is not on the filesystem: back it up with the store's own tools") from exc


def row_counts() -> dict[str, int]:
    return {label: apps.get_model(label).objects.count() for label in COUNTED_MODELS}


def _sqlite_row_counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as database:
        return {
            label: database.execute(f'SELECT COUNT(*) FROM "{apps.get_model(label)._meta.db_table}"').fetchone()[0]
            for label in COUNTED_MODELS
        }


def _dump(dump: Path) -> dict[str, int]:
    """Write the database to `dump`; return the row counts of exactly what was written."""
    name = settings.DATABASES["default"]["NAME"]
    if not _is_postgres():
        with sqlite3.connect(name) as source, sqlite3.connect(dump) as target:
            source.backup(target)
        return _sqlite_row_counts(dump)
    # pg_dump reads the snapshot this transaction exports, so the counts taken in it describe the dump.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cursor.execute("SELECT pg_export_snapshot()")
        snapshot = cursor.fetchone()[0]
        counts = row_counts()
        args, env = _pg_args()
        subprocess.run(
            ["pg_dump", "--format=custom", f"--snapshot={snapshot}", "--file", str(dump), *args, name],
            check=True,
            env=env,
        )
    return counts


def backup_create(out_dir: Path) -> dict:
    """Write a backup into `out_dir` (which must not exist yet); return its manifest."""
    if out_dir.exists():
        raise BackupError(f"{out_dir} exists already; a backup never overwrites")
    out_dir.mkdir(parents=True)
    dump = out_dir / "database.dump"
    counts = _dump(dump)
    shutil.copytree(_artifact_root(), out_dir / "artifacts", dirs_exist_ok=False)
    manifest = {
        "created_at": timezone.now().isoformat(),
        "engine": connection.vendor,
        "database_sha256": file_sha256(dump)[0],
        "counts": counts,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def backup_restore(backup_dir: Path) -> list[str]:
    """Replace the database and the artifact store with a backup's; return the problems found (empty when
    the restored rows match the manifest's counts and every artifact's bytes match their SHA-256)."""
    manifest = json.loads((backup_dir / "manifest.json").read_text())
    dump = backup_dir / "database.dump"
    if file_sha256(dump)[0] != manifest["database_sha256"]:
        raise BackupError("database.dump does not match the digest in manifest.json")
    if manifest["engine"] != connection.vendor:
        raise BackupError(f"backup is of {manifest['engine']}, this database is {connection.vendor}")
    name = settings.DATABASES["default"]["NAME"]
    connection.close()
    if _is_postgres():
        args, env = _pg_args()
        subprocess.run(
            [
                "pg_restore",
                "--clean",
                "--if-exists",
                "--no-owner",
                "--single-transaction",
                *args,
                "--dbname",
                name,
                str(dump),
            ],
            check=True,
            env=env,
        )
    else:
        with sqlite3.connect(dump) as source, sqlite3.connect(name) as target:
            source.backup(target)
    root = _artifact_root()
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(backup_dir / "artifacts", root)
    restored = row_counts()
    problems = [
        f"{label}: {restored.get(label)} rows restored, the backup recorded {count}"
        for label, count in manifest["counts"].items()
        if restored.get(label) != count
    ]
    return problems + artifacts_verify()


def artifacts_verify() -> list[str]:
    """Re-hash every stored blob; return one line per blob whose bytes are missing or changed."""
    problems = []
    storage = artifact_storage()
    for blob in Blob.objects.order_by("id").iterator():
        path = Path(storage.path(blob.storage_name))
        if not path.exists():
            problems.append(f"blob {blob.sha256}: file missing")
            continue
        digest, size = file_sha256(path)
        if digest != blob.sha256 or size != blob.size:
            problems.append(f"blob {blob.sha256}: bytes changed (now {digest}, {size} B)")
    return problems
