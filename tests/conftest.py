import hashlib
import io
import os
from pathlib import Path

import pytest

from npu_sim.kernels import pinned_kernels
from tests import tiers

# Set in each process of a parallel run (pytest-xdist): gw0, gw1, ...
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def pytest_addoption(parser):
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier: leave out the tests that start real processes, serve the app or drive a browser",
    )
    parser.addoption("--slow", action="store_true", help="the slow tiers only: the tests --fast leaves out")
    parser.addoption(
        "--fuzz-examples",
        type=int,
        default=8,
        help="requests the API fuzz generates per operation, mode and kind of path parameter (dev.py test --fast: 2)",
    )


def pytest_configure(config):
    # On CI the suite must run on the real services: refuse to fall back to SQLite.
    if not config.pluginmanager.hasplugin("django"):
        return
    from django.conf import settings

    if os.environ.get("CI") and not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.exit("CI runs the tests on PostgreSQL: set DATABASE_URL", returncode=3)
    # The figures the tests pin are those of OpenBLAS's AVX2 kernels (npu_sim/kernels.py); numpy is loaded by now.
    missing = {name: value for name, value in pinned_kernels().items() if os.environ.get(name) != value}
    if missing:
        pinned = " ".join(f"{name}={value}" for name, value in missing.items())
        pytest.exit(f"the simulator's numerics are pinned: run with {pinned} (dev.py test sets it)", returncode=3)
    # Test users' passwords need no resistance to guessing; the production hasher costs ~0.3 s a user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    if XDIST_WORKER:
        # Parallel test processes share one Redis database: each keeps its broker's keys (queues, bindings)
        # under a prefix of its own, so one's messages never count in another's queue lengths.
        from calculet.celery import app

        options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": f"{XDIST_WORKER}:"}
        settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
        app.conf.broker_transport_options = options


def pytest_collection_modifyitems(config, items):
    """Mark each test by the slow fixtures it uses (tests/tiers.py); with --fast, leave the marked ones out."""
    for item in items:
        for fixture, mark in tiers.SLOW_FIXTURES.items():
            if fixture in item.fixturenames:
                item.add_marker(mark)
    slow = [item for item in items if any(item.get_closest_marker(mark) for mark in tiers.SLOW_MARKS)]
    if config.getoption("--fast") and config.getoption("--slow"):
        raise pytest.UsageError("--fast and --slow leave nothing between them: give one")
    if config.getoption("--fast"):
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item not in slow]
    elif config.getoption("--slow"):
        fast = [item for item in items if item not in slow]
        config.hook.pytest_deselected(items=fast)
        items[:] = slow
    elif XDIST_WORKER and slow:
        # Their worker processes know no broker prefix, and they empty the broker's database.
        raise pytest.UsageError("the slow tiers run in one process: run them without -n (or add --fast)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    tiers.running_test_marks = frozenset(mark.name for mark in item.iter_markers())


def _migrations_digest() -> str:
    """What the migrated schema depends on: Django's version and every installed app's migration files."""
    import django
    from django.apps import apps

    digest = hashlib.sha256(django.__version__.encode())
    for app_config in sorted(apps.get_app_configs(), key=lambda config: config.label):
        for path in sorted((Path(app_config.path) / "migrations").glob("*.py")):
            digest.update(f"{app_config.label}/{path.name}".encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def _clone_schema_template(connection, test_name: str) -> None:
    """Create the test database `test_name` as a copy of a template holding the migrated schema, building the
    template first when no run has yet migrated these migrations. Migrating costs far more than copying, so
    the processes of a parallel run, and every later run, copy what one migration built (as Zulip's
    tools/test-backend shares a template database)."""
    from django.core.management import call_command

    quote = connection.ops.quote_name
    base = connection.settings_dict["NAME"]
    prefix = f"test_{base}_schema_"
    template = prefix + _migrations_digest()
    lock_key = int.from_bytes(hashlib.sha256(base.encode()).digest()[:8], "big", signed=True)
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [lock_key])  # one builder per database name
        try:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
            if cursor.fetchone() is None:
                # Built under another name and renamed when done: an interrupted build leaves no template.
                building = f"{template}_building"
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(building)}")
                cursor.execute(f"CREATE DATABASE {quote(building)}")
                connection.close()
                connection.settings_dict["NAME"] = building
                call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)
                connection.close()
                cursor.execute(f"ALTER DATABASE {quote(building)} RENAME TO {quote(template)}")
                cursor.execute(
                    "SELECT datname FROM pg_database WHERE starts_with(datname, %s) AND datname <> %s",
                    [prefix, template],
                )
                for (outdated,) in cursor.fetchall():
                    cursor.execute(f"DROP DATABASE IF EXISTS {quote(outdated)}")
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(test_name)}")
            cursor.execute(f"CREATE DATABASE {quote(test_name)} TEMPLATE {quote(template)}")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_key])


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_modify_db_settings):
    """The test database (one per process of a parallel run: pytest-django names them _gw0, _gw1, ...), on
    PostgreSQL a copy of the migrated schema's template; dropped at the end of the session."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    verbosity = request.config.option.verbose
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            databases = setup_databases(verbosity=verbosity, interactive=False)
            yield
            teardown_databases(databases, verbosity=verbosity)
            return
        original_name = connection.settings_dict["NAME"]
        test_name = connection.creation._get_test_db_name()
        _clone_schema_template(connection, test_name)
        connection.close()
        settings.DATABASES[connection.alias]["NAME"] = connection.settings_dict["NAME"] = test_name
    yield
    with django_db_blocker.unblock():
        connection.creation.destroy_test_db(original_name, verbosity=verbosity)


@pytest.fixture(autouse=True)
def _artifact_storage(request, tmp_path):
    """Each test writes artifacts and uploads under its own temporary directory."""
    if not request.config.pluginmanager.hasplugin("django"):
        return
    settings = request.getfixturevalue("settings")
    settings.STORAGE_ROOT = tmp_path / "storage"
    settings.UPLOAD_TEMP_DIR = tmp_path / "storage" / "uploads"
    settings.FILE_UPLOAD_TEMP_DIR = tmp_path  # on the uploads' volume, as /readyz wants
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "storage" / "artifacts")},
        },
    }


@pytest.fixture(autouse=True)
def _default_language(request):
    """Each test starts in the default language: a page asked for in Chinese leaves its language active in the
    thread, and a service's refusal reads in the active language."""
    yield
    if request.config.pluginmanager.hasplugin("django"):
        from django.utils import translation

        translation.deactivate()


@pytest.fixture(autouse=True)
def _empty_cache(request):
    """Rate counts (per token, failed authentications per address) start at zero in every test."""
    if not request.config.pluginmanager.hasplugin("django"):
        return
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def tasks_in_process(settings):
    """Tasks run in this process as they are sent."""
    from calculet.celery import app as celery_app

    # Read before changing the Django setting: Celery's configuration reads through to it.
    previous = celery_app.conf.task_always_eager
    settings.CELERY_TASK_ALWAYS_EAGER = True
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def chain_in_process(tasks_in_process, db, settings):
    """Tasks run in this process as they are sent, and a chain runs to its end: this process stands for a
    worker serving the default and simulator queues, and reports itself like one. A worker reports every few
    seconds from a thread of its own; this process reports once, so its report counts for as long as the
    test takes on a loaded machine."""
    from acceptance.services.targets import target_ensure_simulator, target_heartbeat

    settings.ACCEPTANCE_TARGET_OFFLINE_AFTER = 3600
    target_heartbeat(queues=["default", target_ensure_simulator().queue], worker="in-process@pytest")
    return "in process"


CHECKLIST_COPY = "checklist_copy_"


@pytest.fixture(scope="session")
def checklist_tables(django_db_setup, django_db_blocker) -> tuple[list[str], list[dict]]:
    """The bundled checklist imported once a session into the empty test database, then its rows moved aside
    into copies of their tables (`checklist_copy_<table>`, which Django neither knows nor flushes), leaving
    the database empty again. Returns the tables copied and the import's audit rows, for `checklist`."""
    from django.apps import apps
    from django.core.management import call_command
    from django.db import connection, transaction

    from calculet.models import AuditEntry, AuditHead

    quote = connection.ops.quote_name
    models = [
        model
        for model in apps.get_models(include_auto_created=True)
        if model._meta.managed and not model._meta.proxy and model not in (AuditEntry, AuditHead)
    ]
    with django_db_blocker.unblock():
        empty = [model for model in models if not model._base_manager.exists()]
        call_command("import_checklist", stdout=io.StringIO())
        audit_rows = list(AuditEntry.objects.order_by("id").values())
        tables = [model._meta.db_table for model in empty if model._base_manager.exists()]
        with transaction.atomic(), connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"DROP TABLE IF EXISTS {quote(CHECKLIST_COPY + table)}")
                cursor.execute(f"CREATE TABLE {quote(CHECKLIST_COPY + table)} AS SELECT * FROM {quote(table)}")
            # Raw deletes: the audit log refuses them through the ORM, as it should everywhere else.
            for table in [*tables, AuditEntry._meta.db_table, AuditHead._meta.db_table]:
                cursor.execute(f"DELETE FROM {quote(table)}")
    return tables, audit_rows


@pytest.fixture
def checklist(db, checklist_tables):
    """The bundled checklist imported: 8 sections, 60 questions, 91 evidence items, the starting capabilities.

    The session's one import is copied in, a statement a table, keys and all (they stay free: the sequences
    moved past them during the import). Its audit rows are appended to the test's own chain, each hashed over
    the row before, so the log verifies as after a real import. In a transactional test the rows are committed,
    so a live server and real workers see them too; the flush after the test removes them."""
    from django.db import connection, transaction

    from calculet.audit import _entry_hash, _lock_head
    from calculet.models import AuditEntry, AuditHead

    tables, audit_rows = checklist_tables
    quote = connection.ops.quote_name
    with transaction.atomic():
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"INSERT INTO {quote(table)} SELECT * FROM {quote(CHECKLIST_COPY + table)}")
        prev_hash = _lock_head().last_hash
        entries = []
        for row in audit_rows:
            entry = AuditEntry(**{**row, "id": None, "prev_hash": prev_hash})
            entry.hash = prev_hash = _entry_hash(entry)
            entries.append(entry)
        AuditEntry.objects.bulk_create(entries)
        AuditHead.objects.filter(pk=1).update(last_hash=prev_hash)


@pytest.fixture
def gunicorn_server(transactional_db):
    """`tests.servers.gunicorn`: calculet served as deployed. A test that uses it is of the live-server tier."""
    from tests import servers

    return servers.gunicorn


@pytest.fixture
def workers(transactional_db, tmp_path):
    """Start real worker processes (tests/acceptance/workers.py); every one is killed, with its process group,
    at the end of the test."""
    from tests.acceptance.workers import Worker, broker_flush

    broker_flush()
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

        def agent(self, server: str, token: str, name: str = "agent", runner: str = "", options: tuple = ()):
            started.append(Worker.agent(server, token, tmp_path / f"{name}-state", log_dir, name, runner, options))
            return started[-1]

    yield Starter()
    for worker in started:
        worker.stop()
