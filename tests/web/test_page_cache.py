"""The dashboard's and the question list's cached parts (calculet.pagecache): served again only while nothing has
been committed since, and kept apart by language, role, filters and date. Committed rows, as in production."""

import datetime
import re
import threading
import time

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from calculet import pagecache
from calculet.pagecache import data_version
from tests.factories import make_user
from vendor.models import Question

pytestmark = pytest.mark.django_db(transaction=True)

CSRF_TOKEN = re.compile(r'(csrfmiddlewaretoken" value=|"X-CSRFToken": )"[^"]+"')
# Tables the cached parts read from; an unchanged page reads none of them (the live runs only join some).
PART_TABLES = tuple(
    f'FROM "{table}"' for table in ("vendor_question", "vendor_deliverable", "evidence_capability", "acceptance_chain")
)


def due_count(body: str, status: str) -> int:
    return int(re.search(rf'id="due-count-{status}">\s*<span class="figure[^"]*">(\d+)</span>', body).group(1))


def committed_elsewhere(change) -> None:
    """Run `change` on another thread's own database connection and commit it there."""

    def run():
        try:
            change()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def part_queries(queries) -> list[str]:
    return [query["sql"] for query in queries if any(table in query["sql"] for table in PART_TABLES)]


def test_an_unchanged_snapshot_serves_the_dashboard_from_the_cache(pm_client, checklist, monkeypatch):
    # The snapshot is held here: other databases of the same server commit at any time, each commit a new
    # snapshot, and between two requests of the test nothing else would be certain to keep it.
    snapshot = data_version()
    monkeypatch.setattr(pagecache, "data_version", lambda: snapshot)
    first = pm_client.get(reverse("dashboard")).content.decode()
    with CaptureQueriesContext(connection) as queries:
        second = pm_client.get(reverse("dashboard")).content.decode()
    assert part_queries(queries) == []
    assert CSRF_TOKEN.sub("", second) == CSRF_TOKEN.sub("", first)
    assert 'id="due-count-none"' in second and "Questions by section" in second

    # Another snapshot (a commit anywhere since) renders the parts again.
    monkeypatch.setattr(pagecache, "data_version", lambda: snapshot + "-later")
    with CaptureQueriesContext(connection) as queries:
        pm_client.get(reverse("dashboard"))
    assert part_queries(queries) != []


def test_a_commit_from_another_connection_shows_on_the_next_dashboard(pm_client, checklist):
    assert due_count(pm_client.get(reverse("dashboard")).content.decode(), "due_soon") == 0
    tomorrow = timezone.localdate() + datetime.timedelta(days=1)
    committed_elsewhere(lambda: Question.objects.filter(code="V18").update(due_date=tomorrow))
    assert due_count(pm_client.get(reverse("dashboard")).content.decode(), "due_soon") == 1


def test_the_due_dates_follow_the_day_without_any_write(pm_client, checklist, monkeypatch):
    today = timezone.localdate()
    Question.objects.filter(code="V18").update(due_date=today + datetime.timedelta(days=1))
    body = pm_client.get(reverse("dashboard")).content.decode()
    assert (due_count(body, "due_soon"), due_count(body, "overdue")) == (1, 0)
    monkeypatch.setattr(timezone, "localdate", lambda *args, **kwargs: today + datetime.timedelta(days=2))
    body = pm_client.get(reverse("dashboard")).content.decode()
    assert (due_count(body, "due_soon"), due_count(body, "overdue")) == (0, 1)


def test_each_language_has_its_own_parts(pm_client, checklist):
    english = pm_client.get(reverse("dashboard"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    chinese = pm_client.get(reverse("dashboard"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "Questions by section" in english and "仍待交付" not in english
    assert "各小节的问题" in chinese and "仍待交付" in chinese and "Questions by section" not in chinese


def test_an_edit_shows_on_the_next_question_list(pm_client, checklist):
    list_url = reverse("question-list") + "?q=V18"
    row = re.compile(r'<tr id="question-V18".*?</tr>', re.DOTALL)
    assert "P1 — high" not in row.search(pm_client.get(list_url).content.decode()).group()
    response = pm_client.post(reverse("question-edit", args=["V18"]), {"priority": "p1", "next": list_url})
    assert response.status_code == 302
    with CaptureQueriesContext(connection) as queries:
        body = pm_client.get(list_url).content.decode()
    assert any('FROM "vendor_question"' in query["sql"] for query in queries)  # rendered afresh
    assert "P1 — high" in row.search(body).group()


def test_filters_and_roles_get_their_own_rows(pm_client, checklist):
    # Logged in before the PM's rows are cached: logging in writes (last_login) and would start afresh.
    viewer_client = Client()
    viewer_client.force_login(make_user("victor", "team", "viewer"))
    url = reverse("question-list")
    pm_rows = pm_client.get(url).content.decode()
    assert 'id="question-V01"' in pm_rows and 'class="cell-edit"' in pm_rows
    filtered = pm_client.get(url + "?section=12.2").content.decode()
    assert 'id="question-V01"' not in filtered and "cell-edit" in filtered

    viewer_rows = viewer_client.get(url).content.decode()
    assert 'id="question-V01"' in viewer_rows and "cell-edit" not in viewer_rows


def test_threads_asking_for_the_same_new_part_render_it_once(monkeypatch):
    renders, seen_gets = [], []
    started, release = threading.Event(), threading.Event()

    class CountingCache:
        """The cache, counting the parts asked for (each thread has its own cache object)."""

        def get(self, key):
            seen_gets.append(key)
            return cache.get(key)

        def set(self, key, value, timeout):
            cache.set(key, value, timeout)

    def render():
        renders.append(threading.current_thread().name)
        if len(renders) == 1:
            started.set()
            release.wait(10)
        return "<p>part</p>"

    monkeypatch.setattr(pagecache, "cache", CountingCache())
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(pagecache.cached_part("p", "v1", [], render)), name=name)
        for name in ("first", "second")
    ]
    threads[0].start()
    assert started.wait(10)
    threads[1].start()
    # The first thread's miss and its look again before rendering, then the second's miss; without the
    # wait for the first render, the second renders at once.
    deadline = time.monotonic() + 10
    while len(seen_gets) < 3 and len(renders) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(10)
    assert results == ["<p>part</p>", "<p>part</p>"] and renders == ["first"]


def test_no_version_inside_a_transaction():
    version = data_version()
    assert version is not None and version.startswith(connection.settings_dict["NAME"] + "@")
    with transaction.atomic():
        assert data_version() is None
