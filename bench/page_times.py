"""How long each page of the demo takes to serve, and how many queries it makes, on PostgreSQL.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/page_times.py [--repeat 20]

Creates a throw-away database (benchpages_<name>), builds the demo as `dev.py run` does (`seed_demo`, its
chains run in this process), then requests every page the laptop tier opens (tests/laptop/test_pages.py:
`pages`) as the demo's PM and as its vendor engineer, through Django's test client in this process: two
warm-up requests, then --repeat requests each, timed on the wall clock and in CPU time (`time.process_time`),
each one's queries counted. Prints one line per page and role, slowest first, and the pages whose median is
over the 100 ms goal. Pages a role may not see (403/404 by the access rules) are listed as such, not timed.
The database is dropped at the end.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import os  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from acceptance.services.targets import target_ensure_simulator, target_heartbeat  # noqa: E402
from calculet import demo  # noqa: E402
from calculet.celery import app as celery_app  # noqa: E402
from tests.laptop.test_pages import pages  # noqa: E402
from vendor.inputs import WebhookDraft  # noqa: E402
from vendor.models import Comment, Organisation, Question  # noqa: E402
from vendor.services.webhooks import webhook_create  # noqa: E402

GOAL_MS = 100.0


def build_demo() -> dict:
    """The demo, with its chains run in this process, and the ids its detail pages need."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    celery_app.conf.task_always_eager = True
    settings.ACCEPTANCE_TARGET_OFFLINE_AFTER = 3600
    call_command("import_checklist", verbosity=0)
    target_heartbeat(queues=["default", target_ensure_simulator().queue], worker="in-process@bench")
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115 (closed with the process)
    pm = get_user_model().objects.get(username=demo.PM_USERNAME)
    hook = webhook_create(
        actor=pm,
        draft=WebhookDraft(
            organisation=Organisation.objects.get(slug=demo.INTEGRATOR_SLUG),
            name="tracker",
            url="https://example.org/hook",
        ),
    )
    return {
        "webhook": hook.pk,
        "pm_comment": Comment.objects.filter(question__code="V18", author=pm).values_list("pk", flat=True)[0],
        "document": Question.objects.get(code="V60").deliverables.values_list("key", flat=True)[0],
    }


def measure(client: Client, path: str, repeat: int) -> tuple[int, list[float], list[float], list[int]]:
    """The status, wall and CPU milliseconds and query count of each of `repeat` requests after a warm-up."""
    status = client.get(path).status_code
    client.get(path)
    walls, cpus, queries = [], [], []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            wall, cpu = time.perf_counter(), time.process_time()
            response = client.get(path)
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
        queries.append(len(captured))
        status = response.status_code
    return status, walls, cpus, queries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per page and role")
    args = parser.parse_args()

    settings.DATABASES["default"]["TEST"]["NAME"] = "benchpages_" + settings.DATABASES["default"]["NAME"]
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        started = time.perf_counter()
        ids = build_demo()
        print(f"demo built in {time.perf_counter() - started:.0f} s; {args.repeat} requests per page after 2 warm-ups")
        rows = []
        for username in (demo.PM_USERNAME, demo.VENDOR_USERNAME):
            client = Client()
            client.force_login(get_user_model().objects.get(username=username))
            for name, path in pages(ids):
                if name == "login":
                    continue  # a logged-in client is sent on from it
                status, walls, cpus, queries = measure(client, path, args.repeat)
                rows.append((username, name, path, status, walls, cpus, queries))
        rows.sort(key=lambda row: -statistics.median(row[4]))
        print(f"{'role':8} {'page':58} {'status':>6} {'median ms':>9} {'max ms':>8} {'CPU ms':>7} {'queries':>9}")
        for username, _name, path, status, walls, cpus, queries in rows:
            counts = f"{min(queries)}" if min(queries) == max(queries) else f"{min(queries)}-{max(queries)}"
            print(
                f"{username:8} {path[:58]:58} {status:>6} {statistics.median(walls):>9.1f} {max(walls):>8.1f} "
                f"{statistics.median(cpus):>7.1f} {counts:>9}"
            )
        slow = [row for row in rows if row[3] == 200 and statistics.median(row[4]) > GOAL_MS]
        print(f"pages answering 200 with a median over {GOAL_MS:.0f} ms: {len(slow)} of {len(rows)}")
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
