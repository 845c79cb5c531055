"""Liveness and readiness for load balancers and operators."""

import contextlib
import logging
import os
import shutil
from pathlib import Path

import kombu.exceptions
from django import db
from django.conf import settings
from django.core.files.storage import storages
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse, JsonResponse

from acceptance.services.sweeper import SWEEPER
from calculet.jobs import job_staleness

logger = logging.getLogger(__name__)

# A request that found the database or the broker away: the client may try again after this many seconds.
RETRY_AFTER_SECONDS = 30
OUTAGES = (db.OperationalError, db.InterfaceError, kombu.exceptions.OperationalError)


def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_migrations():
    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        raise RuntimeError("unapplied migrations")


def _check_broker():
    if not settings.REDIS_URL:
        return
    from calculet.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def _made(path: Path) -> Path:
    """`path`, or its nearest parent that exists: the disk a directory not made yet will be on."""
    while not path.exists():
        path = path.parent
    return path


def _check_storage():
    """The artifact store answers; Django can spool a plain upload to FILE_UPLOAD_TEMP_DIR (a directory it
    does not make) on the volume of UPLOAD_TEMP_DIR, where partial uploads can be written (made on the first
    upload); and the
    local disks of artifacts and uploads have at least STORAGE_MIN_FREE_BYTES free (a full disk fails every
    upload with 507)."""
    storage = storages["artifacts"]
    storage.exists("readyz-probe")
    spool = Path(settings.FILE_UPLOAD_TEMP_DIR)
    if not (spool.is_dir() and os.access(spool, os.W_OK | os.X_OK)):
        raise RuntimeError(f"FILE_UPLOAD_TEMP_DIR {spool} is not a directory calculet can write to")
    uploads = Path(settings.UPLOAD_TEMP_DIR)
    if uploads.exists() and not os.access(uploads, os.W_OK | os.X_OK):
        raise RuntimeError(f"UPLOAD_TEMP_DIR {uploads} cannot be written")
    # A spool elsewhere (the system's /tmp, often a small tmpfs) would need room on a second disk for every
    # plain upload, and copy the file across instead of renaming it.
    if _made(spool).stat().st_dev != _made(uploads).stat().st_dev:
        raise RuntimeError(f"FILE_UPLOAD_TEMP_DIR {spool} is not on the volume of UPLOAD_TEMP_DIR {uploads}")
    local = [uploads, spool]
    with contextlib.suppress(NotImplementedError):  # a remote store (S3) has no local path
        local.append(Path(storage.path("")))
    for path in local:
        path = _made(path)
        free = shutil.disk_usage(path).free
        if free < settings.STORAGE_MIN_FREE_BYTES:
            raise RuntimeError(f"{free} bytes free under {path}, below STORAGE_MIN_FREE_BYTES")


def _check_sweeper():
    """The sweeper ran within ACCEPTANCE_SWEEP_STALE_AFTER: beat and the default worker are up."""
    reason = job_staleness(SWEEPER, stale_after=settings.ACCEPTANCE_SWEEP_STALE_AFTER)
    if reason is not None:
        raise RuntimeError(reason)


# What /readyz says of a failed check. It is public, so it names the check and nothing else: an exception's
# text can carry host names, user names or paths, and goes to the log only.
FAILED = {
    "database": "error: the database did not answer",
    "migrations": "error: the migrations could not be read or are not all applied",
    "broker": "error: the broker did not accept a connection",
    "storage": "error: the artifact store or an upload directory is unavailable, or short of free space",
    "sweeper": "error: the sweeper has not finished a sweep within ACCEPTANCE_SWEEP_STALE_AFTER",
}


def readyz(request):
    checks = {
        "database": _check_database,
        "migrations": _check_migrations,
        "broker": _check_broker,
        "storage": _check_storage,
        "sweeper": _check_sweeper,
    }
    results = {}
    for name, check in checks.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # every failure counts as not ready, whatever raised it
            logger.error("readyz: the %s check failed: %s: %s", name, type(exc).__name__, exc)
            results[name] = FAILED[name]
    ready = all(value == "ok" for value in results.values())
    return JsonResponse({"status": "ready" if ready else "not ready", "checks": results}, status=200 if ready else 503)


class ServiceUnavailableMiddleware:
    """The database or the broker away answers 503 with Retry-After, in the API's error format under
    /api/, rather than a 500: nothing was changed, and the same request can be sent again."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OUTAGES):
            return None
        logger.error("service unavailable: %s", exception)
        message = "A service calculet depends on is unavailable; try again shortly."
        if request.path.startswith("/api/"):
            body = {"errors": [{"field": None, "code": "unavailable", "message": message}]}
            response = JsonResponse(body, status=503)
        else:
            response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
