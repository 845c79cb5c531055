"""In a real Chromium, in both languages: the question list's Chain column shows a question's worst chain first,
and a question's golden and soak charts are drawn from what the runs measured, legibly."""

import numpy as np
import pytest
from playwright.sync_api import expect

from acceptance import stages
from npu_sim.golden import compare, row_figures
from tests.factories import make_chain, make_run, put_to
from tests.web.conftest import log_in
from tests.web.test_browser_details import in_language
from tests.web.test_chain_standing import v18_one_chain_done_one_failed_at_soak
from vendor.models import Question

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = {
    "en": {
        "failed": "Load, soak and performance: failed",
        "charts": [
            "Cosine against the golden, step by step",
            "Top-5 agreement with the golden, step by step",
            "Each request: decode rate against latency",
            "Cosine of each sampled response against the golden",
        ],
        "required": "required 10 token/s",
        "limit": "limit 0.9999",
    },
    "zh-hans": {
        "failed": "负载、浸泡与性能：失败",
        "charts": [
            "与 golden 的余弦相似度（逐步）",
            "与 golden 的 top-5 一致率（逐步）",
            "每个请求：decode 速率与延迟",
            "每个抽样响应与 golden 的余弦相似度",
        ],
        "required": "要求 10 token/s",
        "limit": "限值 0.9999",
    },
}
LANGUAGES = list(WORDS)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_list_shows_the_failed_chain_before_the_finished_one(page, pm, acme, acme_engineer, checklist, language):
    v18_one_chain_done_one_failed_at_soak(pm, acme, acme_engineer)
    log_in(page, "ada")
    page.goto("/questions/?text=V18")
    in_language(page, language)
    expect(page.locator("tr", has_text="V18").locator("td.chain-standing")).to_have_text(WORDS[language]["failed"])


def measured_reports(rng, bad_step=None):
    """calculet's comparison of logits measured against a golden, one step off it when `bad_step` is given."""
    expected = rng.normal(size=(8, 512)).astype(np.float32)
    actual = expected.copy()
    if bad_step is not None:
        actual[bad_step] += rng.normal(scale=0.05, size=512).astype(np.float32)
    return compare(expected, actual) | {"rows": row_figures(expected, actual, 5)}


@pytest.mark.parametrize("language", LANGUAGES)
def test_golden_and_soak_charts_read_what_was_measured(page, pm, acme, acme_engineer, checklist, language):
    put_to(pm, acme, "V18")
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for stage in stages.CHAIN_STAGES[:3]:
        make_run(chain, stage, stages.PASSED)
    rng = np.random.default_rng(5)
    make_run(chain, stages.GOLDEN, stages.FAILED, metrics={"tensors": {"decode_logits": measured_reports(rng, 3)}})
    for stage in (stages.FAILURE, stages.INTEGRATION):
        make_run(chain, stage, stages.PASSED)
    soak = {
        "per_request": [
            {"request": n, "latency_ms": 700.0 + 40 * n, "decode_tokens_per_s": 8.0 + n} for n in range(1, 7)
        ],
        "golden_under_load": {f"response_{n}.decode_logits": measured_reports(rng) for n in (1, 2)},
    }
    make_run(chain, stages.SOAK, stages.PASSED, metrics=soak, params={"min_decode_tokens_per_s": 10})
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    captions = page.locator(".plot-figure figcaption").all_inner_texts()
    for title in WORDS[language]["charts"]:
        assert any(caption.startswith(title) for caption in captions), (title, captions)
    golden = page.locator(f"#chain-{chain.pk}-{stages.GOLDEN} .plot-figure").first
    expect(golden.locator(".threshold-label")).to_have_text(WORDS[language]["limit"])
    soak_figures = page.locator(f"#chain-{chain.pk}-{stages.SOAK} .plot-figure")
    requests = soak_figures.filter(has_text=WORDS[language]["charts"][2])
    expect(requests.locator("circle.dot")).to_have_count(6)
    expect(requests.locator(".threshold-label")).to_have_text(WORDS[language]["required"])
    # Legible: every label at least 11 px tall on screen, and each chart at least 300 px wide.
    heights = page.locator(".plot-figure svg text").evaluate_all(
        "texts => texts.map(t => t.getBoundingClientRect().height)"
    )
    assert heights and min(heights) >= 11, min(heights)
    widths = page.locator(".plot-figure svg").evaluate_all("svgs => svgs.map(s => s.getBoundingClientRect().width)")
    assert min(widths) >= 300, widths
