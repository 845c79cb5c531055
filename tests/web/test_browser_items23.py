"""What issue 23's fixes show a user in a real Chromium, in both languages: a comment and a promotion without
JavaScript, a service's refusal in the reader's language, and the evidence register's inline code drawn as
code rather than backticks."""

import re

import pytest
from playwright.sync_api import expect

from acceptance.models import PromotionAttempt
from acceptance.recipes import KV_MANAGER_CALLS
from acceptance.services import answer_submit
from acceptance.services.deliverable_checks import deliverable_check_answer
from evidence.models import Capability, EvidenceItem
from tests.acceptance.test_deliverable_checks import answer_with, sdk_archive
from tests.factories import answer_draft, make_artifact, put_to
from tests.web.conftest import htmx_wired, log_in
from vendor.models import Comment, Question

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = {
    "en": {
        "switch": None,
        "move_to": "Move to",
        "ask": "Ask the gate",
        "nothing_changed": "Nothing changed.",
        "already": "The capability is already {status}.",
        "past": "is in the past",
    },
    "zh-hans": {
        "switch": "简体中文",
        "move_to": "变更为",
        "ask": "提交门禁",
        "nothing_changed": "没有任何改变。",
        "already": "该能力已经是 {status}。",
        "past": "已经过去",
    },
}
LANGUAGES = list(WORDS)


def in_language(page, language):
    if WORDS[language]["switch"]:
        page.get_by_role("button", name=WORDS[language]["switch"]).click()
        expect(page.locator("html")).to_have_attribute("lang", language)


@pytest.fixture
def page_without_javascript(browser, live_server):
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    yield context.new_page()
    context.close()


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_comment_without_javascript_lands_on_the_comment_in_either_language(
    page_without_javascript, pm, acme, checklist, language
):
    page = page_without_javascript
    put_to(pm, acme, "V18", ask=True)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    page.locator("#comment-new-body").fill("没有脚本的表单。Plain form.")
    page.locator("#comment-thread form.comment-form button[type=submit]").click()
    comment = Comment.objects.get()
    expect(page).to_have_url(re.compile(rf"/questions/V18/#comment-{comment.pk}$"))
    expect(page.locator("html")).to_have_attribute("lang", language)
    expect(page.locator(f"#comment-{comment.pk} .comment-body")).to_have_text("没有脚本的表单。Plain form.")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_promotion_without_javascript_reads_blocked_in_either_language_and_a_reload_asks_nothing(
    page_without_javascript, pm, checklist, language
):
    page = page_without_javascript
    log_in(page, "ada")
    page.goto("/capabilities/multi-board/")
    in_language(page, language)
    page.get_by_label(WORDS[language]["move_to"], exact=True).select_option("C0")
    page.get_by_role("button", name=WORDS[language]["ask"]).click()
    attempt = PromotionAttempt.objects.get()
    expect(page).to_have_url(re.compile(rf"/capabilities/multi-board/\?attempt={attempt.pk}#capability-promotion$"))
    expect(page.locator("#promotion-blocked")).to_contain_text(WORDS[language]["nothing_changed"])
    page.reload()
    expect(page.locator("#promotion-blocked")).to_contain_text(WORDS[language]["nothing_changed"])
    assert PromotionAttempt.objects.count() == 1


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_refused_promotion_says_why_in_the_readers_language(page, pm, checklist, language):
    """The service's refusal (a ConflictError carrying its template) is said beside the field it is about."""
    status = Capability.objects.get(slug="multi-board").status
    log_in(page, "ada")
    page.goto("/capabilities/multi-board/")
    in_language(page, language)
    page.get_by_label(WORDS[language]["move_to"], exact=True).select_option(status)
    page.get_by_role("button", name=WORDS[language]["ask"]).click()
    expect(page.locator("#capability-promotion .field-error[role=alert]")).to_have_text(
        WORDS[language]["already"].format(status=status)
    )
    assert Capability.objects.get(slug="multi-board").status == status
    assert PromotionAttempt.objects.count() == 0


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_evidence_register_draws_the_checklists_inline_code_as_code(page, pm, checklist, language):
    item = next(
        item
        for item in EvidenceItem.objects.filter(origin=EvidenceItem.SEED).order_by("code")
        if "`" in item.conclusion or "`" in item.explanation
    )
    spans = re.findall(r"`([^`]+)`", item.conclusion + item.explanation)
    log_in(page, "ada")
    page.goto(f"/evidence/?table={item.code[0]}")
    in_language(page, language)
    row = page.locator(f"#evidence-{item.code}")
    expect(row).to_be_visible()
    assert "`" not in row.inner_text()
    for span in spans:
        expect(row.locator("code", has_text=span).first).to_be_visible()


@pytest.mark.parametrize("language", LANGUAGES)
def test_back_after_an_in_place_demotion_shows_the_new_status(page, pm, checklist, language):
    """The page's own response must not be kept (`Cache-Control: no-store`): Back would otherwise draw the
    status from before the change made in place on it."""
    capability = Capability.objects.filter(status__in=["C0", "C1", "C2"]).order_by("slug").first()
    demoted = f"C{int(capability.status[1]) + 1}"
    log_in(page, "ada")
    page.goto(f"/capabilities/{capability.slug}/")
    in_language(page, language)
    page.goto(f"/capabilities/{capability.slug}/")
    page.get_by_label(WORDS[language]["move_to"], exact=True).select_option(demoted)
    page.locator("#promotion-reason").fill("回归 regression")
    page.get_by_role("button", name=WORDS[language]["ask"]).click()
    expect(page.locator("#capability-status")).to_have_text(demoted)
    page.goto("/evidence/")
    page.go_back()
    expect(page).to_have_url(re.compile(rf"/capabilities/{capability.slug}/$"))
    expect(page.locator("#capability-status")).to_have_text(demoted)
    assert Capability.objects.get(pk=capability.pk).status == demoted


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_webhook_form_starts_on_the_pms_own_team(page, pm, acme, other_engineer, checklist, language):
    """Vendors' organisations sort before the team ("Acme NPU", "Bolt Silicon"): the first of the list is not
    whose hook a PM most likely makes."""
    log_in(page, "ada")
    page.goto("/webhooks/")
    in_language(page, language)
    chosen = page.locator("#hook-organisation option:checked")
    expect(chosen).to_have_text(re.compile(r"^Integration team \("))
    expect(page.locator("#hook-organisation option")).to_have_count(3)


EXPORT_WORDS = {
    "en": {"csv_heading": "code,section,question,", "markdown_state": "| New |"},
    "zh-hans": {"csv_heading": "编号,小节,问题,", "markdown_state": "| 新建 |"},
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_exports_downloaded_from_the_reports_page_speak_the_readers_language(page, pm, checklist, language):
    """The CSV's headings and the Markdown's states in the language the page was read in; the CSV's cells stay
    codes (V01's state `new`), for a spreadsheet's filters in either language."""
    log_in(page, "ada")
    page.goto("/reports/")
    in_language(page, language)
    with page.expect_download() as download:
        page.locator("a[href$='checklist.csv']").click()
    rows = download.value.path().read_bytes().decode("utf-8-sig").splitlines()
    assert rows[0].startswith(EXPORT_WORDS[language]["csv_heading"]), rows[0]
    assert next(row for row in rows if row.startswith("V01,")).count(",new,") == 1
    with page.expect_download() as download:
        page.locator("a[href$='checklist.md']").click()
    markdown = download.value.path().read_text(encoding="utf-8")
    v01 = next(line for line in markdown.splitlines() if line.startswith("| V01 "))
    assert EXPORT_WORDS[language]["markdown_state"] in v01, v01


COLUMN_EDGES = (
    "() => [...document.querySelectorAll('#question-table thead th')].map(th => th.getBoundingClientRect().left)"
)


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_refused_cell_edit_says_why_in_the_cell_without_moving_the_columns(page, pm, checklist, language):
    log_in(page, "ada")
    page.goto("/questions/?section=12.1")
    in_language(page, language)
    row = page.locator("#question-V01")
    row.locator("#cell-V01-due_date a.cell-value").click()
    htmx_wired(page, '#question-V01 input[name="due_date"]')
    before = page.evaluate(COLUMN_EDGES)
    row.locator('input[name="due_date"]').fill("2020-01-01")
    row.locator('input[name="due_date"]').dispatch_event("change")
    alert = row.locator("#cell-V01-due_date .field-error[role=alert]")
    expect(alert).to_contain_text("2020-01-01")
    expect(alert).to_contain_text(WORDS[language]["past"])
    # The sentence wraps inside the column the date's control already made, under the control.
    assert page.evaluate(COLUMN_EDGES) == before
    assert Question.objects.get(code="V01").due_date is None


ANSWER_WORDS = {
    "en": {4: "Model package at decode batch 4", 8: "Model package at decode batch 8"},
    "zh-hans": {4: "decode batch 4 的模型包", 8: "decode batch 8 的模型包"},
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_answer_on_the_question_page_names_its_deliverable(page, pm, acme, acme_engineer, checklist, language):
    """V18 owes a package per decode batch: two revisions look alike unless each says which one it is for."""
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    answers = {
        batch: answer_submit(
            actor=acme_engineer,
            question=question,
            draft=answer_draft({"deliverable": f"package-batch-{batch}", "summary": f"batch {batch}"}),
        )
        for batch in (8, 4)
    }
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    for batch, answer in answers.items():
        deliverable = page.locator(f"#answer-{answer.pk} .answer-deliverable")
        expect(deliverable).to_have_text(f"{ANSWER_WORDS[language][batch]} package-batch-{batch}")


FOUND_WORDS = {
    "en": {"found": "Calls found in the headers and the library", "missing": "Calls missing"},
    "zh-hans": {"found": "在头文件和库中找到的调用", "missing": "缺少的调用"},
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_static_checks_panel_lists_the_sdk_calls_it_found(pm, acme, acme_engineer, page, tmp_path, language):
    """A passed SDK check says which calls it found where: "nothing found" alone read as no entry points."""
    golden = make_artifact(acme_engineer, b"golden", kind="golden", version="1.0", file_name="golden.npz")
    answer, _deliverable, _capability = answer_with(
        acme_engineer,
        acme,
        golden,
        tmp_path,
        code="V26",
        kind="sdk",
        artifact_kind="sdk",
        data=sdk_archive(tmp_path),
        capability_slug="kv-manager-api",
    )
    deliverable_check_answer(answer.pk)
    log_in(page, "ada")
    page.goto("/questions/V26/")
    in_language(page, language)
    found = page.locator("#deliverables .check-found")
    expect(found.locator("dt")).to_have_text([FOUND_WORDS[language]["found"], FOUND_WORDS[language]["missing"]])
    calls = found.locator("dd").first
    for call in KV_MANAGER_CALLS:
        expect(calls).to_contain_text(call)
    expect(found.locator("dd").last).to_have_text("—")
