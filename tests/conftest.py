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
