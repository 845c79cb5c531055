import os

import pytest
from playwright.sync_api import sync_playwright

from tests.factories import PASSWORD, make_user
from vendor.models import Organisation

# Playwright's sync API runs an event loop in the test's thread; Django's async-safety check would then
# refuse every ORM call the test makes (creating users, moving a run along).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def pm(db):
    return make_user("ada", "team", "pm", organisation_name="Integration team")


@pytest.fixture
def viewer(pm):
    return make_user("victor", "team", "viewer")


@pytest.fixture
def acme_engineer(db):
    return make_user("ann", "acme", "vendor", organisation_name="Acme NPU")


@pytest.fixture
def other_engineer(db):
    return make_user("bob", "bolt", "vendor", organisation_name="Bolt Silicon")


@pytest.fixture
def acme(acme_engineer):
    return Organisation.objects.get(slug="acme")


@pytest.fixture
def pm_client(client, pm):
    client.force_login(pm)
    return client


# The browser tests' Chromium (Debian's: Playwright's own download does not work here), one per test module.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1366, "height": 900})
    # Playwright's own default: at load 14 on two cores a page's first load took over 10 s.
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    context.close()


def log_in(page, username):
    page.goto("/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.locator("main").get_by_role("button", name="Log in").click()


def htmx_wired(page, selector: str) -> None:
    """Wait until htmx has processed the element a swap brought in (its listeners attached): a change made
    before then is never sent."""
    page.wait_for_function(
        "s => { const e = document.querySelector(s); return !!(e && e['htmx-internal-data'] && "
        "e['htmx-internal-data'].initHash); }",
        arg=selector,
    )
