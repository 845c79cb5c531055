"""The pages in a real Chromium, against a live server."""

import re

import pytest
from playwright.sync_api import expect, sync_playwright

from acceptance import stages
from acceptance.models import PromotionAttempt
from evidence.models import Capability
from tests.web.conftest import PASSWORD, make_chain, make_run, put_to
from vendor.models import Question

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

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
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


def log_in(page, username):
    page.goto("/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.locator("main").get_by_role("button", name="Log in").click()


def mark_document(page):
    """A flag that survives htmx swaps but not a page load."""
    page.evaluate("window.__noReload = true")


def still_same_document(page) -> bool:
    return page.evaluate("window.__noReload === true")


def test_log_in_and_out(page, pm):
    log_in(page, "ada")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    page.goto("/questions/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/questions/$"))


def test_filter_and_edit_a_question_in_place(page, pm, checklist):
    log_in(page, "ada")
    page.goto("/questions/")
    mark_document(page)
    page.get_by_label("Text (Chinese or English)").fill("回滚")
    expect(page.locator("#question-table tbody tr")).to_have_count(1)
    expect(page.locator("#question-V59")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/questions/\?.*q=%E5%9B%9E%E6%BB%9A"))

    row = page.locator("#question-V59")
    row.get_by_label("Priority V59").select_option("p0")
    expect(page.locator("#question-V59").get_by_role("status")).to_have_text("Saved")
    assert Question.objects.get(code="V59").priority == "p0"

    page.locator("#question-V59").get_by_label("State V59").select_option("closed")
    expect(page.locator("#question-V59").get_by_role("alert")).to_contain_text("cannot move from new to closed")
    assert Question.objects.get(code="V59").state == "new"
    assert still_same_document(page)


def test_run_progress_updates_without_a_reload(page, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18")
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    make_run(chain, stages.CLAIM, stages.PASSED)
    run = make_run(chain, stages.ARTIFACT, stages.RUNNING, progress=10, progress_text="checking digests")
    log_in(page, "ada")
    page.goto("/questions/V18/")
    mark_document(page)
    stage = page.locator(f"#chain-{chain.pk}-artifact")
    expect(stage.locator(".run-progress-text")).to_have_text("10% — checking digests")

    run.progress = 60
    run.progress_text = "verifying the manifest"
    run.log_tail = "manifest ok\n"
    run.save(update_fields=["progress", "progress_text", "log_tail"])
    expect(stage.locator(".run-progress-text")).to_have_text("60% — verifying the manifest", timeout=8_000)
    expect(stage.locator(".log-tail")).to_have_text("manifest ok")

    run.state = stages.PASSED
    run.verdict = stages.PASS
    run.progress = 100
    run.reason = "all checks passed"
    run.save(update_fields=["state", "verdict", "progress", "reason"])
    expect(stage).to_contain_text("all checks passed", timeout=8_000)
    expect(page.locator("#question-chain")).not_to_have_attribute("hx-trigger", "every 2s")
    assert still_same_document(page)


def test_switch_language(page, pm, checklist):
    log_in(page, "ada")
    page.goto("/questions/?section=12.2")
    page.get_by_role("button", name="简体中文").click()
    expect(page.get_by_role("heading", name="厂商问题")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/questions/\?section=12\.2$"))
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    page.get_by_role("button", name="English").click()
    expect(page.get_by_role("heading", name="Vendor questions")).to_be_visible()


def test_a_vendor_cannot_open_another_vendors_question(page, pm, acme, other_engineer, checklist):
    bolt = other_engineer.membership.organisation
    put_to(pm, acme, "V01")
    put_to(pm, bolt, "V02")
    log_in(page, "bob")
    expect(page).to_have_url(re.compile(r"/vendor/$"))
    expect(page.locator("main")).to_contain_text("V02")
    expect(page.locator("main")).not_to_contain_text("V01")

    response = page.goto("/questions/V01/")
    assert response.status == 404
    response = page.goto("/questions/V02/")
    assert response.status == 200
    expect(page.locator("#question-ticket form")).to_have_count(0)
    assert page.goto("/audit/").status == 404


def test_a_blocked_promotion_shows_its_reasons_and_changes_nothing(page, pm, checklist):
    log_in(page, "ada")
    page.goto("/capabilities/multi-board/")
    mark_document(page)
    page.get_by_label("Move to").select_option("C0")
    page.get_by_role("button", name="Ask the gate").click()
    blocked = page.locator("#promotion-blocked")
    expect(blocked).to_contain_text("Nothing changed.")
    attempt = PromotionAttempt.objects.get()
    assert not attempt.allowed
    expect(blocked.locator(".reasons li")).to_have_count(len(attempt.reasons))
    expect(blocked).to_contain_text(attempt.reasons[0]["message"])
    expect(page.locator("#capability-status")).to_have_text("C3")
    assert Capability.objects.get(slug="multi-board").status == "C3"
    assert still_same_document(page)
