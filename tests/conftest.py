import os

import pytest


def pytest_configure(config):
    # On CI the suite must run on the real services: refuse to fall back to SQLite.
    if not config.pluginmanager.hasplugin("django"):
        return
    from django.conf import settings

    if os.environ.get("CI") and not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.exit("CI runs the tests on PostgreSQL: set DATABASE_URL", returncode=3)
    # Test users' passwords need no resistance to guessing; the production hasher costs ~0.3 s a user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _artifact_storage(request, tmp_path):
    """Each test writes artifacts and uploads under its own temporary directory."""
    if not request.config.pluginmanager.hasplugin("django"):
        return
    settings = request.getfixturevalue("settings")
    settings.STORAGE_ROOT = tmp_path / "storage"
    settings.UPLOAD_TEMP_DIR = tmp_path / "storage" / "uploads"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "storage" / "artifacts")},
        },
    }


@pytest.fixture(autouse=True)
def _empty_cache(request):
    """Rate counts (per token, failed authentications per address) start at zero in every test."""
    if not request.config.pluginmanager.hasplugin("django"):
        return
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def chain_in_process(settings, db):
    """Tasks run in this process as they are sent, and a chain runs to its end: this process stands for a
    worker serving the default and simulator queues, and reports itself like one."""
    from acceptance.services.targets import target_ensure_simulator, target_heartbeat
    from calculet.celery import app as celery_app

    # Read before changing the Django setting: Celery's configuration reads through to it.
    previous = celery_app.conf.task_always_eager
    settings.CELERY_TASK_ALWAYS_EAGER = True
    celery_app.conf.task_always_eager = True
    target_heartbeat(queues=["default", target_ensure_simulator().queue], worker="in-process@pytest")
    yield "in process"
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def workers(transactional_db, tmp_path):
    """Start real worker processes (tests/acceptance/workers.py); every one is killed, with its process group,
    at the end of the test."""
    from calculet.celery import app
    from tests.acceptance.workers import Worker

    with app.connection_for_write() as conn:
        conn.default_channel.client.flushdb()
    log_dir = tmp_path / "worker-logs"
    log_dir.mkdir()
    started: list = []

    class Starter:
        def celery(self, queue: str, name: str, **env):
            started.append(Worker.celery(queue, name, log_dir, **env))
            return started[-1]

        def serve_target(self, slug: str, options: list[str], **env):
            started.append(Worker.serve_target(slug, options, log_dir, **env))
            return started[-1]

    yield Starter()
    for worker in started:
        worker.stop()
