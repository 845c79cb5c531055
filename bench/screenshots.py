"""Screenshots of the main pages for docs/screenshots/, taken in Chromium from a generated dataset.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/screenshots.py

Runs on a throw-away database (screens_<name>) created and dropped here, serves it from a live server
thread, and writes docs/screenshots/*.png. Chinese text needs a CJK font (Debian: fonts-noto-cjk).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")
# Playwright's sync API runs an event loop in this thread; the dataset is written before it starts.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import StaticFilesHandler  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.testcases import LiveServerThread  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from acceptance import stages  # noqa: E402
from acceptance.models import Chain, Run  # noqa: E402
from bench import web_dataset  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _question_with_soak() -> str:
    """A question whose chain's soak run has finished, so its page shows every plot."""
    run = Run.objects.filter(stage=stages.SOAK, state__in=[stages.PASSED, stages.FAILED]).exclude(metrics={}).last()
    return Chain.objects.get(pk=run.chain_id).question.code


def _log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", web_dataset.PASSWORD)
    page.locator("main").get_by_role("button", name="Log in").click()
    page.wait_for_load_state("networkidle")


def _shoot(page, base: str, path: str, name: str, *, full_page: bool = False) -> None:
    page.goto(f"{base}{path}")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=full_page)
    print(f"docs/screenshots/{name}.png  {path}")


def take(base: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    code = _question_with_soak()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        _log_in(page, base, "ada")
        _shoot(page, base, "/", "dashboard", full_page=True)
        _shoot(page, base, "/questions/?organisation=acme&sort=due", "question-list")
        _shoot(page, base, f"/questions/{code}/", "question-page", full_page=True)
        _shoot(page, base, "/evidence/?table=R", "evidence-register")
        _shoot(page, base, "/capabilities/", "capability-matrix")
        page.goto(f"{base}/capabilities/kv-manager-api/")
        page.select_option("#promotion-to", "C0")
        page.get_by_role("button", name="Ask the gate").click()
        page.wait_for_selector("#promotion-blocked")
        page.screenshot(path=str(OUT / "capability-blocked.png"), full_page=True)
        print("docs/screenshots/capability-blocked.png  /capabilities/kv-manager-api/ (after asking the gate)")
        _shoot(page, base, f"/audit/?question={code}", "audit-log")
        page.goto(f"{base}/questions/")
        page.get_by_role("button", name="简体中文").click()
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(OUT / "question-list-zh.png"))
        print("docs/screenshots/question-list-zh.png  /questions/ in Chinese")
        _shoot(page, base, f"/questions/{code}/", "question-page-zh", full_page=True)
        page.get_by_role("button", name="English").click()
        page.context.clear_cookies()
        _log_in(page, base, "ann")
        _shoot(page, base, "/vendor/", "vendor-view")
        browser.close()


def main() -> None:
    settings.DATABASES["default"]["TEST"]["NAME"] = "screens_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = None
    try:
        counts = web_dataset.build(artifacts=400, runs=4_000, audit_rows=5_000)
        print("dataset:", counts)
        connection.close()
        server = LiveServerThread("localhost", StaticFilesHandler, connections_override={})
        server.daemon = True
        server.start()
        server.is_ready.wait()
        if server.error:
            raise server.error
        take(f"http://localhost:{server.port}")
    finally:
        if server is not None:
            server.terminate()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
