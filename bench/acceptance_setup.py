"""Shared by the acceptance benchmarks: a throw-away database (bench_<name>_<bench>, created and dropped
here), an empty Redis database, temporary artifact storage, answers built the way the tests build them, and
the kill benchmarks' worker with production timings, sweeper thread and kill -9."""

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")
BENCH_TMP = Path(tempfile.mkdtemp(prefix="calculet-bench-"))
os.environ["STORAGE_ROOT"] = str(BENCH_TMP / "storage")
# This process's sweeper removes run directories of finished runs under the data folder: keep it off the
# checkout's, where the tests' in-process runs work.
os.environ["CALCULET_DATA_DIR"] = str(BENCH_TMP / "data")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from acceptance import stages  # noqa: E402
from acceptance.models import Run  # noqa: E402
from acceptance.services import runs_sweep  # noqa: E402
from tests.acceptance.workers import Worker  # noqa: E402

# A 15 s lease renewed every 2 s, as in production.
PRODUCTION = {"ACCEPTANCE_RUN_LEASE_SECONDS": 15, "ACCEPTANCE_RUN_HEARTBEAT_SECONDS": 2}


@contextmanager
def bench_database(bench: str, *, flush_redis: bool = True):
    settings.DATABASES["default"]["TEST"]["NAME"] = f"bench_{settings.DATABASES['default']['NAME']}_{bench}"
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    if flush_redis:
        from calculet.celery import app

        with app.connection_for_write() as conn:
            conn.default_channel.client.flushdb()
    try:
        yield
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        shutil.rmtree(BENCH_TMP, ignore_errors=True)


class Vendor:
    """A vendor organisation with the decode-batch-8 capability, the simulator's tiny decode-batch-8 package and
    the golden file delivered with it."""

    def __init__(self):
        from tests.factories import make_artifact, make_capability, make_user, tiny_package_bytes

        self.tmp = BENCH_TMP / f"vendor-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self.user = make_user(f"bench-{uuid.uuid4().hex[:8]}", "bench-vendor", "vendor")
        self.capability = make_capability("decode-batch-8")
        calbin_bytes, golden_bytes = tiny_package_bytes(self.tmp)
        self.calbin = make_artifact(self.user, calbin_bytes, kind="calbin", version="1.0.0", file_name="tiny-b8.tar")
        self.golden = make_artifact(self.user, golden_bytes, kind="golden", version="1.0.0", file_name="golden.npz")
        self.next_question = 1

    def answer(self, **overrides):
        """A complete answer to a new question linked to the capability; its chain starts on commit."""
        from acceptance.services import answer_submit
        from tests.factories import answer_draft, complete_answer_data, make_question

        question = make_question(
            f"V{self.next_question:02d}", organisation=self.user.membership.organisation, state="asked"
        )
        self.next_question += 1
        self.capability.questions.add(question)
        data = complete_answer_data(capability=self.capability, calbin=self.calbin, golden=self.golden)
        data.update(overrides)
        return answer_submit(actor=self.user, question=question, draft=answer_draft(data))


def simulator_worker(name: str, log_dir: Path) -> Worker:
    """A worker on the simulator's queue with the production timings."""
    return Worker.celery("simulator", name, log_dir, **PRODUCTION)


def kill_mid_run(worker: Worker, *, whole_worker: bool, replacement: str) -> Worker:
    """kill -9 the worker's pool child (its main process survives and forks a new one) or, with `whole_worker`,
    its whole process group, and then start `replacement` at once, as a supervisor would, logging beside it.
    Returns the worker that serves the simulator's queue from now on."""
    if not whole_worker:
        os.kill(worker.wait_for_pool_child(), signal.SIGKILL)
        return worker
    worker.kill()
    worker.stop()
    return simulator_worker(replacement, worker.log_path.parent)


@contextmanager
def sweeping(interval: float):
    """Sweep every `interval` seconds from a thread, standing in for Celery beat, while the block runs."""
    stop = threading.Event()

    def sweep() -> None:
        try:
            while not stop.wait(interval):
                runs_sweep()
        finally:
            connection.close()

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def wait_for(predicate, timeout: float):
    """Poll until `predicate()` is truthy and return its value, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return None


def soak_running(answer, timeout: float) -> Run | None:
    """The answer's soak run once its runner has run for 1.5 s, or None if that takes over `timeout` seconds."""
    return wait_for(
        lambda: Run.objects.filter(
            answer=answer,
            stage=stages.SOAK,
            state=stages.RUNNING,
            started_at__lte=timezone.now() - timedelta(seconds=1.5),
        ).first(),
        timeout,
    )


def run_ended(run: Run, timeout: float) -> Run | None:
    """The run as it ended, or None if it is still active after `timeout` seconds."""
    return wait_for(lambda: Run.objects.filter(pk=run.pk).exclude(state__in=stages.ACTIVE_STATES).first(), timeout)
