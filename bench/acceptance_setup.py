"""Shared by the acceptance benchmarks: a throw-away database (bench_<name>_<bench>, created and dropped
here), an empty Redis database, temporary artifact storage, and answers built the way the tests build them."""

import os
import shutil
import sys
import tempfile
import uuid
from contextlib import contextmanager
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
    """A vendor organisation with a question, a capability and a tiny decode-batch-8 calbin."""

    def __init__(self):
        from tests.factories import make_artifact, make_capability, make_user, tiny_calbin_bytes

        self.tmp = BENCH_TMP / f"vendor-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self.user = make_user(f"bench-{uuid.uuid4().hex[:8]}", "bench-vendor", "vendor")
        organisation = self.user.membership.organisation
        self.capability = make_capability(f"bench-{uuid.uuid4().hex[:8]}")
        self.calbin = make_artifact(
            organisation,
            tiny_calbin_bytes(self.tmp),
            kind="calbin",
            version="1.0.0",
            file_name="tiny-b8.tar",
            tmp_dir=self.tmp,
        )
        self.golden = make_artifact(
            organisation, b"golden", kind="golden", version="1.0.0", file_name="golden.npz", tmp_dir=self.tmp
        )
        self.next_question = 1

    def answer(self, **overrides):
        """A complete answer to a new question linked to the capability; its chain starts on commit."""
        from acceptance.services import answer_submit
        from tests.factories import complete_answer_data, make_question

        question = make_question(f"V{self.next_question:02d}", organisation=self.user.membership.organisation)
        self.next_question += 1
        self.capability.questions.add(question)
        data = complete_answer_data(capability=self.capability, calbin=self.calbin, golden=self.golden)
        data.update(overrides)
        return answer_submit(actor=self.user, question=question, data=data)
