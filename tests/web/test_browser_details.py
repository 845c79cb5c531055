"""The details of a PM's day in a real Chromium, in both languages where there is text: tolerances and soak
charts as the checks read them, the audit log reached from every object and filtered by name, blocked
promotions, the evidence register, the CSV export, the list's cells that fetch
their control, and Chinese pages drawn with a CJK font rather than empty boxes."""

import re

import pytest
from playwright.sync_api import expect

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.services import answer_submit, capability_promote
from evidence.models import Capability, EvidenceItem
from npu_sim.timing import TimingModel, context_rows
from tests.factories import answer_draft, make_chain, make_run, put_to
from tests.web.conftest import htmx_wired, log_in
from vendor.models import Question

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = {
    "en": {
        "switch": None,
        "history": "History",
        "passed": "all checks passed",
        "simulator": "Bundled NPU simulator",
        "blocked": "asked C0, stayed C3",
        "action": "promotion blocked",
        "state_new": "New",
        "batch": "decode batch 4",
        "run_items": "2 run items",
    },
    "zh-hans": {
        "switch": "简体中文",
        "history": "历史",
        "passed": "全部检查通过",
        "simulator": "内置 NPU 模拟器",
        "blocked": "请求 C0，仍为 C3",
        "action": "升级被阻止",
        "state_new": "新建",
        "batch": "decode 批大小 4",
        "run_items": "2 条运行证据",
    },
}
LANGUAGES = list(WORDS)


def in_language(page, language):
    if WORDS[language]["switch"]:
        page.get_by_role("button", name=WORDS[language]["switch"]).click()
        expect(page.locator("html")).to_have_attribute("lang", language)


def v18_with_proof(pm, acme, acme_engineer):
    """V18 put to acme, answered with tolerances, and a chain whose golden passed and whose soak ran at batch 4."""
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    answer_submit(
        actor=acme_engineer,
        question=question,
        draft=answer_draft(
            {"deliverable": "package-batch-8", "golden": {"tolerances": {"cosine_min": 0.9999, "max_rel": 0.005}}}
        ),
    )
    chain = make_chain(question, acme_engineer)
    for stage in stages.CHAIN_STAGES[:-1]:
        make_run(chain, stage, stages.PASSED, reason="all checks passed")
    soak = {
        "prompt_tokens": 128,
        "timing_scale": "qwen3-30b-a3b",
        "ttft_ms": {"p50": 80.0, "p95": 150.0, "p99": 180.0},
        "decode_tokens_per_s": {"p50": 19.5, "p95": 21.0, "p99": 22.0},
        "context_rows": context_rows(TimingModel(), [512, 4096, 32768], 4),
    }
    make_run(chain, stages.SOAK, stages.PASSED, reason="all checks passed", metrics=soak, params={})
    return chain


@pytest.mark.parametrize("language", LANGUAGES)
def test_tolerances_soak_charts_summaries_and_target_read_as_the_checks_apply_them(
    page, pm, acme, acme_engineer, checklist, language
):
    v18_with_proof(pm, acme, acme_engineer)
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    tolerances = page.locator(".answer .tolerance")
    expect(tolerances).to_have_count(2)
    assert sorted(tolerances.all_inner_texts()) == ["cosine ≥ 0.9999", "max_rel ≤ 0.005"]
    chain = page.locator("#question-chain")
    expect(chain).to_contain_text(WORDS[language]["simulator"])
    expect(chain.locator(".stage-passed").first).to_contain_text(WORDS[language]["passed"])
    # The soak: three charts, each labelled with the batch and the scale, ticks at least 11 px tall on screen.
    soak = page.locator(f"[id$='-{stages.SOAK}'] .plot-figure")
    expect(soak).to_have_count(3)
    for index in range(3):
        expect(soak.nth(index).locator(".plot-note")).to_contain_text(WORDS[language]["batch"])
    heights = soak.locator("svg text").evaluate_all("texts => texts.map(t => t.getBoundingClientRect().height)")
    assert heights and min(heights) >= 11, heights


@pytest.mark.parametrize("language", LANGUAGES)
def test_history_is_one_click_from_an_object_and_a_blocked_promotion_reads_asked_and_stayed(
    page, pm, acme, acme_engineer, checklist, language
):
    chain = v18_with_proof(pm, acme, acme_engineer)
    capability_promote(
        actor=pm, capability=Capability.objects.get(slug="multi-board"), request=PromotionRequest(to="C0")
    )
    log_in(page, "ada")
    page.goto("/questions/V18/")
    in_language(page, language)
    page.locator(".page-head .history-link").click()
    expect(page).to_have_url(re.compile(r"/audit/\?question=V18$"))
    expect(page.locator("#id_question")).to_have_value("V18")
    objects = [link.get_attribute("title") for link in page.locator("#audit-table tbody td:nth-child(5) a").all()]
    assert objects and all(re.match(r"(vendor\.(question|answer)|acceptance\.(chain|run)):\d+$", o) for o in objects)
    # A run's history from its number in the chain.
    page.goto("/questions/V18/")
    run_link = page.locator(f"#chain-{chain.pk}-{stages.SOAK} a.history-link")
    run_link.click()
    expect(page).to_have_url(re.compile(r"/audit/\?object_type=acceptance\.run&object_id=\d+$"))
    # The capability's history, and the action chosen by its name from the list.
    page.goto("/capabilities/multi-board/")
    expect(page.locator("#capability-history")).to_contain_text(WORDS[language]["blocked"])
    page.locator(".page-head .history-link").click()
    expect(page).to_have_url(re.compile(r"/audit/\?capability=multi-board$"))
    page.locator("#id_action").select_option(label=WORDS[language]["action"])
    expect(page).to_have_url(re.compile(r"action=capability\.promotion_blocked"))
    expect(page.locator("#audit-table tbody tr")).to_have_count(1)
    expect(page.locator("#audit-table .outcome")).to_have_text(WORDS[language]["blocked"])
    # The dashboard: the target's history, and the blocked promotion in the same words.
    page.goto("/")
    expect(page.locator(".blocked .outcome")).to_have_text(WORDS[language]["blocked"])
    page.locator("table a.history-link").first.click()
    expect(page).to_have_url(re.compile(r"/audit/\?object_type=acceptance\.target&object_id=\d+$"))


def test_an_unknown_question_code_is_an_error_on_the_audit_page(page, pm, checklist):
    log_in(page, "ada")
    page.goto("/audit/")
    page.locator("#id_question").fill("V99")
    page.locator("form.filters button[type=submit]").click()
    expect(page.locator("#filter-errors")).to_contain_text("No question has the code V99.")


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_evidence_register_lists_seed_items_with_run_evidence_grouped_under_them(page, pm, checklist, language):
    capability = Capability.objects.get(slug="kv-manager-api")
    seed_item = capability.evidence.order_by("code").first()
    for n in (1, 2):
        capability.evidence.add(
            EvidenceItem.objects.create(code=f"RUN-{n}", origin=EvidenceItem.RUN, conclusion="run", grade_text="E4")
        )
    log_in(page, "ada")
    page.goto(f"/evidence/?table={seed_item.code[0]}")
    in_language(page, language)
    expect(page.locator("#evidence-RUN-1")).to_have_count(0)
    cell = page.locator(f"#evidence-{seed_item.code} .run-evidence")
    expect(cell).to_contain_text(WORDS[language]["run_items"])
    expect(cell.locator("code")).to_have_text("RUN-2")


def test_the_csv_export_starts_with_a_byte_order_mark(page, pm, checklist):
    log_in(page, "ada")
    page.goto("/reports/")
    with page.expect_download() as download:
        page.locator("a[href$='checklist.csv']").click()
    data = download.value.path().read_bytes()
    assert data.startswith(b"\xef\xbb\xbfcode,")
    assert "能否交付 decode batch 4/8/16 calbin" in data.decode("utf-8-sig")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_list_cell_fetches_its_control_when_clicked(page, pm, checklist, language):
    log_in(page, "ada")
    page.goto("/questions/?section=12.1")
    in_language(page, language)
    row = page.locator("#question-V01")
    expect(page.locator("#question-table table select")).to_have_count(0)
    expect(row.locator("#cell-V01-state a.cell-value")).to_have_text(WORDS[language]["state_new"])
    row.locator("#cell-V01-priority a.cell-value").click()
    htmx_wired(page, '#question-V01 select[name="priority"]')
    row.locator('select[name="priority"]').select_option("p0")
    expect(row.get_by_role("status")).to_be_visible()
    expect(page.locator("#question-table table select")).to_have_count(0)
    expect(row.locator("#cell-V01-priority a.cell-value")).to_contain_text("P0")
    assert Question.objects.get(code="V01").priority == "p0"


# Pages whose Chinese is ours (labels, summaries, the simulator's name) and the seed's.
CHINESE_PAGES = ["/", "/questions/", "/questions/V18/", "/evidence/", "/capabilities/multi-board/", "/audit/"]

# Marks the elements whose own text holds CJK characters (at most 60 per page), with the count of them.
MARK_CJK = """() => {
  const cjk = /[\\u3000-\\u303f\\u4e00-\\u9fff\\uff00-\\uffef]/g;
  let marked = 0;
  for (const element of document.querySelectorAll("main *, header *, nav *")) {
    if (marked >= 60 || element.closest("script, style, svg")) continue;
    let own = "";
    for (const node of element.childNodes) if (node.nodeType === Node.TEXT_NODE) own += node.textContent;
    const count = (own.match(cjk) || []).length;
    const box = element.getBoundingClientRect();
    if (count && box.width && box.height) { element.dataset.cjkProbe = count; marked++; }
  }
  return marked;
}"""


def test_chinese_pages_are_drawn_with_a_cjk_font_not_empty_boxes(page, pm, acme, acme_engineer, checklist):
    """Chromium reports, per element, the font each glyph was drawn with: every CJK character must come from a
    CJK font. A machine without one (no fonts-noto-cjk) draws them with a Latin font's empty box and fails."""
    v18_with_proof(pm, acme, acme_engineer)
    log_in(page, "ada")
    in_language(page, "zh-hans")
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    assert page.evaluate("""() => document.fonts.check('16px "Noto Sans CJK SC"', '厂商问题')""")
    for path in CHINESE_PAGES:
        page.goto(path)
        assert page.evaluate(MARK_CJK) > 0, path
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        probes = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": "[data-cjk-probe]"})["nodeIds"]
        for node_id in probes:
            attributes = cdp.send("DOM.getAttributes", {"nodeId": node_id})["attributes"]
            wanted = int(attributes[attributes.index("data-cjk-probe") + 1])
            fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node_id})["fonts"]
            cjk_glyphs = sum(font["glyphCount"] for font in fonts if "CJK" in font["familyName"])
            assert cjk_glyphs >= wanted, (path, fonts, wanted)
        # The same in pixels: six CJK characters against six characters no font has, drawn as empty boxes.
        cjk_width, box_width = page.evaluate(
            """() => ['厂商问题证据', '\\u{10FFFD}'.repeat(6)].map(text => {
                 const span = document.createElement('span');
                 span.textContent = text; span.style.fontSize = '20px'; document.body.append(span);
                 const width = span.getBoundingClientRect().width; span.remove(); return width; })"""
        )
        assert abs(cjk_width - box_width) > 2, (path, cjk_width, box_width)
