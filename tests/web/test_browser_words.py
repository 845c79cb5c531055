"""In a real Chromium, in both languages, the words a PM reads: the audit log names a question edited through the
page and its fields by their labels, a failed run's judged reason reads in the page's language, and the golden and
soak charts are drawn as SVG images named by their titles."""

import pytest
from playwright.sync_api import expect

from acceptance import stages
from tests.acceptance.test_judged_sentences import SOAK_PARAMS, soak_failed
from tests.factories import make_chain, make_run, put_to
from tests.web.conftest import htmx_wired, log_in
from tests.web.test_browser_details import in_language
from tests.web.test_plots import charted_chain
from vendor.models import Question

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = {
    "en": {
        "saved": "Saved",
        "question": "Question",
        "state_change": "State: New → Asked",
        "reason_head": "the runner claims a pass its measurements do not support — 3 requests measured; ",
        "charts": [
            "Absolute error of decode_logits against the golden",
            "Top-k agreement of decode_logits with the golden",
            "Time to first token",
            "Decode rate per request against context length (timing model)",
        ],
        "required": "required 60 token/s",
    },
    "zh-hans": {
        "saved": "已保存",
        "question": "问题",
        "state_change": "状态: 新建 → 已提问",
        "reason_head": "运行器声称通过，但其测量不支持 — 测得 3 个请求；压测须服务 10 个; ",
        "charts": [
            "decode_logits 相对 golden 的绝对误差",
            "decode_logits 与 golden 的 top-k 一致率",
            "首 token 时间 (TTFT)",
            "单请求 decode 速率随上下文长度变化（时序模型）",
        ],
        "required": "要求 60 token/s",
    },
}
LANGUAGES = list(WORDS)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_audit_log_names_a_state_edit_made_on_the_page_by_its_labels(page, pm, acme, checklist, language):
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    log_in(page, "ada")
    page.goto("/questions/?text=V18")
    in_language(page, language)
    page.locator("#cell-V18-state a.cell-value").click()
    htmx_wired(page, '#question-V18 select[name="state"]')
    page.locator('#question-V18 select[name="state"]').select_option("asked")
    expect(page.locator("#question-V18").get_by_role("status")).to_have_text(WORDS[language]["saved"])

    page.goto("/audit/?question=V18")
    row = page.locator("#audit-table tbody tr").filter(has=page.locator('span[title="state"]'))
    expect(row).to_have_count(1)
    expect(row.locator(".audit-changes > div")).to_have_text([WORDS[language]["state_change"]])
    expect(row.locator("td:nth-child(5) a")).to_have_text(f"{WORDS[language]['question']} {question.pk}")
    expect(row).not_to_contain_text("vendor.question")  # the object's code stays in the link's title


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_failed_runs_judged_reason_reads_in_the_pages_language(
    page, pm, acme, acme_engineer, checklist, tmp_path, language
):
    judged = soak_failed(tmp_path)
    put_to(pm, acme, "V18", ask=True)
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for stage in stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(stages.SOAK)]:
        make_run(chain, stage, stages.PASSED)
    make_run(chain, stages.SOAK, stages.FAILED, reason=judged.reason, findings=judged.findings, params=SOAK_PARAMS)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    soak = page.locator(f"#chain-{chain.pk}-{stages.SOAK}")
    reason = soak.locator(":scope > .field-error")
    expect(reason).to_contain_text(WORDS[language]["reason_head"])
    if language == "en":
        expect(reason).to_have_text(judged.reason)  # as the run stores it
    else:
        expect(reason).not_to_contain_text("requests measured")
    expect(soak.locator(".judged-findings")).to_have_count(0)  # the reason says them all: no list repeats them


@pytest.mark.parametrize("language", LANGUAGES)
def test_golden_and_soak_charts_are_svg_images_named_by_their_titles(
    page, pm, acme, acme_engineer, checklist, language
):
    chain = charted_chain(pm, acme, acme_engineer)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    for title in WORDS[language]["charts"]:
        chart = page.get_by_role("img", name=title, exact=True)
        expect(chart).to_be_visible()
        assert chart.evaluate("element => element.tagName") == "svg", title
        expect(chart.locator(":scope > title")).to_have_text(title)
    soak_charts = page.locator(f"#chain-{chain.pk}-{stages.SOAK} svg.plot")
    expect(soak_charts.locator("text", has_text=WORDS[language]["required"]).first).to_be_visible()
