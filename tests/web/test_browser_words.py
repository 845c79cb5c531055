"""In a real Chromium, in both languages, the words a PM reads: the audit log names a question edited through the
page and its fields by their labels, says why a reassignment reset a deliverable and lists a promotion's gate
reasons by their labels; a failed run's judged reason reads in the page's language, with a runner's own failure
before it and a golden stage's sampling after it; and the golden and soak charts are drawn as SVG images named by
their titles."""

import pytest
from calculet_agent import sandbox
from django.db import transaction
from playwright.sync_api import expect

from acceptance import judging, stages
from acceptance.protocol import StageOutcome
from acceptance.services.runs.running import _with_minimal_example
from calculet.audit import audit_record
from evidence.models import Capability
from tests.acceptance.test_feature_judging import sampling_package  # noqa: F401 (a fixture)
from tests.acceptance.test_judged_reasons import runner_failed_soak, tampered_golden_stage
from tests.acceptance.test_judged_reasons_said import LIMITS, failed_example
from tests.acceptance.test_judged_sentences import SOAK_PARAMS, soak_failed
from tests.factories import make_chain, make_run, put_to
from tests.web.conftest import htmx_wired, log_in
from tests.web.test_audit_words import reset_entry  # noqa: F401 (a fixture)
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
        "runner_failed": "1 check failed — decode_rate: 3.1 token/s below 5 token/s; 3 requests measured; ",
        "sampling": "; sampling: drawn, ",
        "reset": "the question was reassigned from acme to bolt: the decision was about acme's answers",
        "gate_reasons": "Gate reasons: — → no complete answer, no current E2 evidence",
        "not_npz": "runner-actual.npz is not an .npz file: ",
        "example_failed": "; the minimal example (make run) ended with runner exited with status 2",
        "wall_time": "wall-time limit of 30 s exceeded; the runner was killed",
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
        "runner_failed": "1 项检查未通过 — decode_rate: 3.1 token/s below 5 token/s; 测得 3 个请求；压测须服务 10 个; ",
        "sampling": "; 采样：首次抽样中 50000 个 token 有 ",
        "reset": "问题已从 acme 改派给 bolt：此前的决定针对的是 acme 的回答",
        "gate_reasons": "门禁原因: — → 没有完整的回答、没有当前的 E2 证据",
        "not_npz": "runner-actual.npz 不是 .npz 文件：",
        "example_failed": "; 最小示例（make run）结束于：运行器以状态 2 退出",
        "wall_time": "超出 30 秒的墙钟时间限制；运行器已被终止",
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


def _failed_stage_page(page, pm, acme, acme_engineer, stage: str, judged, language: str):
    """V18's chain failed at `stage` with `judged`'s reason and findings, its question page open in `language`."""
    put_to(pm, acme, "V18", ask=True)
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for earlier in stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(stage)]:
        make_run(chain, earlier, stages.PASSED)
    make_run(chain, stage, stages.FAILED, reason=judged.reason, findings=judged.findings, params=SOAK_PARAMS)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    return page.locator(f"#chain-{chain.pk}-{stage}")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_runners_own_failure_and_calculets_judgement_read_in_the_pages_language(
    page, pm, acme, acme_engineer, checklist, tmp_path, language
):
    judged = runner_failed_soak(tmp_path)
    soak = _failed_stage_page(page, pm, acme, acme_engineer, stages.SOAK, judged, language)
    reason = soak.locator(":scope > .field-error")
    expect(reason).to_contain_text(WORDS[language]["runner_failed"])
    if language != "en":
        expect(reason).not_to_contain_text("the soak must")
    expect(soak.locator(".judged-findings")).to_have_count(0)


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_golden_stage_failing_with_its_sampling_reads_in_the_pages_language(
    page,
    pm,
    acme,
    acme_engineer,
    checklist,
    sampling_package,  # noqa: F811
    tmp_path,
    language,
):
    judged = tampered_golden_stage(sampling_package, tmp_path / "run")
    golden = _failed_stage_page(page, pm, acme, acme_engineer, stages.GOLDEN, judged, language)
    reason = golden.locator(":scope > .field-error")
    expect(reason).to_contain_text(WORDS[language]["reason_head"].split(" — ")[0])
    expect(reason).to_contain_text(WORDS[language]["sampling"])
    if language == "en":
        expect(reason).to_have_text(judged.reason)  # as the run stores it
    else:
        expect(reason).not_to_contain_text("drawn")
    expect(golden.locator(".judged-findings")).to_have_count(0)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_audit_log_says_why_a_reassignment_reset_a_deliverable_and_labels_gate_reasons(
    page,
    pm,
    reset_entry,  # noqa: F811
    language,
):
    capability = Capability.objects.order_by("slug").first()
    after = {"status": "C1", "reasons": ["no_answer", "no_sdk_evidence"]}
    with transaction.atomic():  # as every change writes its audit row
        audit_record(actor=pm, action="capability.promote", obj=capability, before={"status": "C0"}, after=after)
    log_in(page, "ada")
    page.goto("/audit/?action=deliverable.reset")
    in_language(page, language)
    reset = page.locator("#audit-table tbody tr").filter(has=page.locator('span[title="reason"]')).first
    expect(reset.locator(".audit-changes")).to_contain_text(WORDS[language]["reset"])
    expect(reset).not_to_contain_text("reason_sentence")
    page.goto("/audit/?action=capability.promote")
    promoted = page.locator("#audit-table tbody tr").filter(has=page.locator('span[title="reasons"]'))
    reasons = promoted.locator(".audit-changes > div").filter(has=page.locator('span[title="reasons"]'))
    expect(reasons).to_have_text(WORDS[language]["gate_reasons"])


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


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_measurement_calculet_cannot_read_and_a_failed_minimal_example_read_in_the_pages_language(
    page, pm, acme, acme_engineer, checklist, tmp_path, language
):
    (tmp_path / judging.MEASURED_RUN).write_bytes(b"logits")
    judged = judging.runner_judgement({"verdict": "pass"}, tmp_path, tmp_path / "x", {}, "package", None)
    example = failed_example() | {"detail": "runner exited with status 2"}
    outcome = _with_minimal_example(StageOutcome(stages.FAIL, judged.reason, judged.findings), example)
    runner = _failed_stage_page(page, pm, acme, acme_engineer, stages.RUNNER, outcome, language)
    reason = runner.locator(":scope > .field-error")
    expect(reason).to_contain_text(WORDS[language]["not_npz"])
    expect(reason).to_contain_text(WORDS[language]["example_failed"])
    if language == "en":
        expect(reason).to_have_text(outcome.reason)  # as the run stores it
    expect(runner.locator(".judged-findings")).to_have_count(0)


@pytest.mark.parametrize("language", LANGUAGES)
def test_why_the_sandbox_ended_a_runner_reads_in_the_pages_language(page, pm, acme, acme_engineer, checklist, language):
    _limit, why = sandbox._explain(sandbox.WALL_TIME, None, None, LIMITS, 0, "")
    put_to(pm, acme, "V18", ask=True)
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    make_run(chain, stages.RUNNER, stages.ERROR, reason=why)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    expect(page.locator(f"#chain-{chain.pk}-{stages.RUNNER}")).to_contain_text(WORDS[language]["wall_time"])
