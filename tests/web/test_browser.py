"""The pages in a real Chromium, against a live server."""

import datetime
import re

import pytest
from playwright.sync_api import expect

from acceptance import stages
from acceptance.models import PromotionAttempt
from acceptance.services import answer_submit
from calculet.actors import SYSTEM
from evidence.models import Capability
from tests.factories import answer_draft, make_chain, make_run, put_to
from tests.web.conftest import htmx_wired, log_in
from vendor.models import Comment, DocumentReview, NotificationPreference, Question
from vendor.services.deliverables import deliverable_accept

pytestmark = pytest.mark.django_db(transaction=True)


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

    # A cell shows its value; clicking it fetches its control in place.
    row = page.locator("#question-V59")
    expect(row.locator("select")).to_have_count(0)
    row.get_by_label("Priority V59").click()
    htmx_wired(page, '#question-V59 select[name="priority"]')
    row.locator('select[name="priority"]').select_option("p0")
    expect(page.locator("#question-V59").get_by_role("status")).to_have_text("Saved", timeout=15_000)
    expect(page.locator("#question-V59").get_by_label("Priority V59")).to_contain_text("P0")
    assert Question.objects.get(code="V59").priority == "p0"

    page.locator("#question-V59").get_by_label("State V59").click()
    htmx_wired(page, '#question-V59 select[name="state"]')
    page.locator('#question-V59 select[name="state"]').select_option("closed")
    expect(page.locator("#question-V59").get_by_role("alert")).to_contain_text("cannot move from New to Closed")
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
    page.get_by_label("Move to", exact=True).select_option("C0")
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


# The PM's day in both languages: what each page must say, by language.
WORDS = {
    "en": {
        "switch": None,
        "confirm_heading": "Change 2 questions?",
        "changed": "Changed 2 questions.",
        "overdue": "Overdue",
        "due_soon": "Due soon",
        "edited": "edited",
        "history": "History: 2 versions",
        "saved": "Your notification preferences are saved.",
        "comment_label": "A comment on a question I follow",
    },
    "zh-hans": {
        "switch": "简体中文",
        "confirm_heading": "确认修改 2 个问题？",
        "changed": "已修改 2 个问题。",
        "overdue": "已逾期",
        "due_soon": "即将到期",
        "edited": "已编辑",
        "history": "历史：2 个版本",
        "saved": "你的通知设置已保存。",
        "comment_label": "我关注的问题有新评论时",
    },
}


def in_language(page, language):
    """Switch the interface when the language is not the default one."""
    if WORDS[language]["switch"]:
        page.get_by_role("button", name=WORDS[language]["switch"]).click()
        expect(page.locator("html")).to_have_attribute("lang", language)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_bulk_edit_asks_once_then_changes_every_ticked_question(page, pm, checklist, language):
    log_in(page, "ada")
    page.goto("/questions/?section=12.5")
    in_language(page, language)
    mark_document(page)
    for code in ("V37", "V38"):
        page.locator(f'input[name="code"][value="{code}"]').check()
    due = (datetime.date.today() + datetime.timedelta(days=14)).isoformat()
    page.locator("#bulk-priority").select_option("p0")
    page.locator("#bulk-due").fill(due)
    page.locator("#bulk-edit button[type=submit]").click()

    confirm = page.locator("#bulk-confirm")
    expect(confirm.get_by_role("heading")).to_have_text(WORDS[language]["confirm_heading"])
    expect(confirm.locator("tbody tr")).to_have_count(2)
    assert not Question.objects.filter(priority="p0").exists()  # nothing changes before the confirmation
    confirm.locator("button[type=submit]").click()

    expect(page.locator("#bulk-edit").get_by_role("status")).to_have_text(WORDS[language]["changed"])
    changed = Question.objects.filter(priority="p0", due_date=datetime.date.fromisoformat(due))
    assert sorted(changed.values_list("code", flat=True)) == ["V37", "V38"]
    assert still_same_document(page)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_overdue_and_due_soon_questions_stand_out_and_are_counted(page, pm, acme, checklist, language):
    put_to(pm, acme, "V01", "V02", ask=True)
    Question.objects.filter(code="V01").update(due_date=datetime.date.today() - datetime.timedelta(days=2))
    Question.objects.filter(code="V02").update(due_date=datetime.date.today() + datetime.timedelta(days=1))
    log_in(page, "ada")
    in_language(page, language)
    expect(page.locator("#due-count-overdue .figure")).to_have_text("1")
    expect(page.locator("#due-count-due_soon .figure")).to_have_text("1")
    page.locator("#due-count-overdue").click()
    expect(page).to_have_url(re.compile(r"/questions/\?due=overdue"))
    expect(page.locator("#question-table tbody tr")).to_have_count(1)
    overdue = page.locator("#question-V01")
    expect(overdue).to_have_class(re.compile(r"row-overdue"))
    expect(overdue.locator(".badge.due")).to_have_text(WORDS[language]["overdue"])
    border = overdue.locator("td").first.evaluate("cell => getComputedStyle(cell).boxShadow")
    assert "180, 35, 24" in border  # the red mark beside the row (var(--danger))
    page.goto("/questions/?section=12.1")
    expect(page.locator("#question-V02 .badge.due")).to_have_text(WORDS[language]["due_soon"])


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_discussion_mentions_edits_and_keeps_history(
    browser, live_server, page, pm, acme, acme_engineer, checklist, language
):
    put_to(pm, acme, "V18", ask=True)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    mark_document(page)
    text = "Is **batch 16** coming, @ann? <script>window.__hacked = 1</script>"
    page.locator("#comment-new-body").fill(text)
    expect(page.locator("#comment-new-body-count")).to_have_text(f"{len(text)}/10000")
    page.locator("#comment-thread form.comment-form button[type=submit]").click()

    comment = page.locator("#comment-thread article.comment").first
    expect(comment.locator(".comment-body strong")).to_have_text("batch 16")
    expect(comment.locator(".mention")).to_have_text("@ann")
    expect(comment.locator(".comment-body")).to_contain_text("<script>window.__hacked = 1</script>")
    assert page.evaluate("window.__hacked === undefined")
    saved = Comment.objects.get()
    assert list(saved.mentions.values_list("username", flat=True)) == ["ann"]

    comment.locator(".comment-edit-link").click()
    page.locator("#comment-edit-body").fill("Is batch 16 coming this week, @ann?")
    page.locator("#comment-thread article.comment form button[type=submit]").click()
    edited = page.locator(f"#comment-{saved.pk}")
    expect(edited.locator(".badge")).to_have_text(WORDS[language]["edited"])
    history = edited.locator("details.comment-history")
    expect(history.locator("summary")).to_have_text(WORDS[language]["history"])
    history.locator("summary").click()
    expect(history.locator("pre").first).to_have_text(text)
    assert still_same_document(page)

    vendor = browser.new_context(base_url=live_server.url).new_page()
    log_in(vendor, "ann")
    vendor.goto("/questions/V18/")
    expect(vendor.locator(f"#comment-{saved.pk} .comment-body")).to_contain_text("this week")
    vendor.context.close()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_notification_preferences_are_chosen_and_kept(page, pm, checklist, language):
    log_in(page, "ada")
    page.goto("/notifications/")
    in_language(page, language)
    page.locator("#notify-email").fill("ada@example.org")
    expect(page.locator("#notify-email-count")).to_have_text("15/254")
    page.get_by_label(WORDS[language]["comment_label"]).uncheck()
    page.locator("#notify-language").select_option("zh-hans")
    page.locator("#notification-preferences button[type=submit]").click()
    expect(page.locator(".messages")).to_contain_text(WORDS[language]["saved"])
    expect(page.get_by_label(WORDS[language]["comment_label"])).not_to_be_checked()
    expect(page.locator("#notify-language")).to_have_value("zh-hans")
    preference = NotificationPreference.objects.get(user=pm)
    assert (preference.muted, preference.language) == (["comment"], "zh-hans")
    pm.refresh_from_db()
    assert pm.email == "ada@example.org"


# What a question owes, and a PM's document review, in both languages.
DELIVERABLE_WORDS = {
    "en": {
        "owed": "Owed",
        "accepted": "Accepted",
        "closed": "Closed",
        "review": "Review the document",
        "record": "Record the review",
        "reason": "Reason",
        "still_owe": "What you still owe",
        "simulator_none": "Simulator: not run",
        "complete": "complete",
    },
    "zh-hans": {
        "owed": "待交付",
        "accepted": "已验收",
        "closed": "已关闭",
        "review": "审阅文档",
        "record": "记录审阅",
        "reason": "理由",
        "still_owe": "仍需交付",
        "simulator_none": "模拟器: 未运行",
        "complete": "完整",
    },
}


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_pm_reviews_a_document_item_by_item_and_the_question_closes(
    page, pm, acme, acme_engineer, checklist, language
):
    put_to(pm, acme, "V09", ask=True)
    answer_submit(
        actor=acme_engineer,
        question=Question.objects.get(code="V09"),
        draft=answer_draft({"summary": "letter attached"}),
    )
    log_in(page, "ada")
    in_language(page, language)
    words = DELIVERABLE_WORDS[language]
    page.goto("/questions/V09/")
    row = page.locator("#deliverable-ci-licence")
    expect(row.locator(".deliverable-state")).to_have_text(words["owed"])
    row.get_by_role("link", name=words["review"]).click()
    expect(page).to_have_url(re.compile(r"/questions/V09/deliverables/ci-licence/review$"))
    boxes = page.locator("input[type=checkbox]")
    expect(boxes).to_have_count(3)
    for index in range(3):
        boxes.nth(index).check()
    # The answer holds none of section 13's elements; none applies to a signed letter, each for a reason.
    not_applicable = page.locator("input[type=radio][value=not_applicable]")
    expect(not_applicable).to_have_count(6)
    for index in range(6):
        not_applicable.nth(index).check()
        page.locator("input[name$='-reason']").nth(index).fill("a signed letter")
    page.get_by_label(words["reason"], exact=True).fill("Signed by the vendor's counsel on 1 December.")
    page.get_by_role("button", name=words["record"]).click()
    expect(page).to_have_url(re.compile(r"/questions/V09/#deliverables$"))
    expect(page.locator("#deliverable-ci-licence .deliverable-state")).to_have_text(words["accepted"])
    expect(page.locator("h1 .badge.state")).to_have_text(words["closed"])
    # The closed question's accepted answer is shown complete, not lacking what did not apply.
    expect(page.locator("article.answer h3 .badge")).to_have_text(words["complete"])
    review = DocumentReview.objects.get()
    assert review.accepted and review.reviewer.username == "ada" and all(entry["ticked"] for entry in review.items)
    assert {verdict["verdict"] for verdict in review.elements.values()} == {"not_applicable"}


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_vendor_sees_what_it_still_owes_per_deliverable_and_target_kind(
    page,
    pm,
    acme,
    acme_engineer,
    checklist,
    language,
):
    put_to(pm, acme, "V18", ask=True)
    v18 = Question.objects.get(code="V18")
    deliverable_accept(v18.deliverables.get(key="package-batch-8"), actor=SYSTEM, reason="every stage passed")
    log_in(page, "ann")
    in_language(page, language)
    words = DELIVERABLE_WORDS[language]
    page.goto("/vendor/")
    owed = page.locator("#owed")
    expect(owed.get_by_role("heading")).to_have_text(words["still_owe"])
    expect(owed.locator("#owed-V18-package-batch-4")).to_contain_text(words["simulator_none"])
    expect(owed.locator("#owed-V18-package-batch-16")).to_be_visible()
    expect(owed.locator("#owed-V18-package-batch-8")).to_have_count(0)
    page.goto("/questions/V18/")
    expect(page.locator("#deliverable-package-batch-8 .deliverable-state")).to_have_text(words["accepted"])
    expect(page.locator("#deliverable-package-batch-4 .deliverable-state")).to_have_text(words["owed"])
