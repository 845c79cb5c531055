import csv
import datetime
import io
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.models import PromotionAttempt, Run
from acceptance.services import capability_promote, run_rerun
from calculet.audit import audit_record
from calculet.models import AuditEntry
from evidence.models import Capability
from tests.factories import make_chain, make_run, make_user, put_to
from vendor.inputs import QuestionChanges
from vendor.models import Question
from vendor.services.questions import question_update

HTMX = {"HTTP_HX_REQUEST": "true"}


def count_queries(client, url, **headers) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, **headers).status_code == 200
    return len(captured.captured_queries)


@pytest.mark.django_db
def test_dashboard_counts_questions_by_state_and_chain_stage(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18", "V19", ask=True)
    for code, passed in (("V18", 3), ("V19", 1)):
        chain = make_chain(Question.objects.get(code=code), acme_engineer)
        for stage in stages.CHAIN_STAGES[:passed]:
            make_run(chain, stage, stages.PASSED)
    response = pm_client.get(reverse("dashboard"))
    section = next(s for s in response.context["sections"] if s.section.code == "12.3")
    positions = dict(zip(response.context["positions"], section.position_counts, strict=True))
    assert positions[stages.GOLDEN] == 1 and positions[stages.ARTIFACT] == 1 and sum(positions.values()) == 2
    states = dict(zip([s for s, _ in response.context["state_choices"]], section.state_counts, strict=True))
    assert states == {"new": 8, "asked": 0, "answered": 2, "verifying": 0, "closed": 0, "deferred": 0, "wont_fix": 0}


@pytest.mark.django_db
def test_dashboard_counts_failed_and_stale_chains_and_the_list_filters_on_them(
    pm_client, pm, acme, acme_engineer, checklist
):
    put_to(pm, acme, "V18", "V19", "V20", ask=True)
    failed = make_chain(Question.objects.get(code="V18"), acme_engineer)
    make_run(failed, stages.CLAIM, stages.PASSED)
    make_run(failed, stages.ARTIFACT, stages.FAILED)
    stale = make_chain(Question.objects.get(code="V19"), acme_engineer)
    make_run(stale, stages.CLAIM, stages.PASSED)
    stale.stage_digests = {**stale.stage_digests, stages.CLAIM: "f" * 64}  # its inputs changed since
    stale.save(update_fields=["stage_digests"])
    waiting = make_chain(Question.objects.get(code="V20"), acme_engineer)
    make_run(waiting, stages.CLAIM, stages.QUEUED)

    response = pm_client.get(reverse("dashboard"))
    counts = {kind: count for kind, _label, count in response.context["attention_counts"]}
    assert (counts["chain_failed"], counts["chain_stale"]) == (1, 1)
    for kind, code in (("chain_failed", "V18"), ("chain_stale", "V19")):
        listed = pm_client.get(reverse("question-list") + f"?attention={kind}")
        assert [question.code for question in listed.context["page"]] == [code]


@pytest.mark.django_db
def test_dashboard_polls_runs_in_progress_and_stops_when_none_are(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18")
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    run = make_run(chain, stages.CLAIM, stages.RUNNING, progress=42, progress_text="reading the answer")
    body = pm_client.get(reverse("dashboard")).content.decode()
    assert 'hx-trigger="every 2s"' in body and "42% — reading the answer" in body

    run.state, run.verdict, run.progress = stages.PASSED, stages.PASS, 100
    run.save(update_fields=["state", "verdict", "progress"])
    partial = pm_client.get(reverse("dashboard"), **HTMX).content.decode()
    assert partial.lstrip().startswith('<section class="panel" id="live-runs"')
    assert "hx-trigger" not in partial


@pytest.mark.django_db
def test_dashboard_lists_recent_blocked_promotions_with_reasons(pm_client, pm, checklist):
    capability = Capability.objects.get(slug="expert-parallel")
    attempt = capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C1"))
    assert not attempt.allowed
    old = capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C2"))
    PromotionAttempt.objects.filter(pk=old.pk).update(created_at=timezone.now() - timezone.timedelta(days=8))
    blocked = list(pm_client.get(reverse("dashboard")).context["blocked"])
    assert blocked == [attempt]
    body = pm_client.get(reverse("dashboard")).content.decode()
    assert escape(attempt.reasons[0]["message"]) in body


@pytest.mark.django_db
def test_dashboard_shows_the_latest_blocked_attempt_per_capability_not_every_click(pm_client, pm, checklist):
    expert = Capability.objects.get(slug="expert-parallel")
    sampling = Capability.objects.get(slug="npu-sampling")
    capability_promote(actor=pm, capability=expert, request=PromotionRequest(to="C1"))
    capability_promote(actor=pm, capability=expert, request=PromotionRequest(to="C2"))
    latest_expert = capability_promote(actor=pm, capability=expert, request=PromotionRequest(to="C0"))
    latest_sampling = capability_promote(actor=pm, capability=sampling, request=PromotionRequest(to="C0"))
    assert list(pm_client.get(reverse("dashboard")).context["blocked"]) == [latest_sampling, latest_expert]


@pytest.mark.django_db
def test_dashboard_query_count_does_not_grow_with_rows(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18", "V19", "V20")
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    make_run(chain, stages.CLAIM, stages.RUNNING)
    capability_promote(
        actor=pm, capability=Capability.objects.get(slug="expert-parallel"), request=PromotionRequest(to="C1")
    )
    few = count_queries(pm_client, reverse("dashboard"))
    for code in ("V19", "V20"):
        other = make_chain(Question.objects.get(code=code), acme_engineer)
        for stage in stages.CHAIN_STAGES[:4]:
            make_run(other, stage, stages.PASSED)
        make_run(other, stages.FAILURE, stages.QUEUED)
    for capability in Capability.objects.all()[:10]:
        capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C0"))
    assert count_queries(pm_client, reverse("dashboard")) == few


@pytest.mark.django_db
def test_question_page_shows_seed_text_answers_and_the_chain(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V42")
    question = Question.objects.get(code="V42")
    chain = make_chain(question, acme_engineer)
    make_run(chain, stages.CLAIM, stages.FAILED, reason="the answer lacks: version, golden")
    body = pm_client.get(reverse("question-detail", args=["V42"])).content.decode()
    assert "golden input/output 在当前产物中是否完整有效" in body and "实际 runner 通过结果" in body
    assert 'class="missing"' in body and "see the attached bundle" in body
    assert "the answer lacks: version, golden" in body
    assert body.count('<li class="stage-') == 7
    assert "Re-run" in body


@pytest.mark.django_db
def test_rerun_from_the_question_page(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V42")
    chain = make_chain(Question.objects.get(code="V42"), acme_engineer)
    failed = make_run(chain, stages.CLAIM, stages.FAILED, reason="incomplete")
    response = pm_client.post(reverse("run-rerun", args=[failed.pk]), **HTMX)
    assert response.status_code == 200
    new = Run.objects.get(rerun_of=failed)
    assert new.stage == stages.CLAIM and new.requested_by == pm
    body = response.content.decode()
    assert body.lstrip().startswith('<section class="panel" id="question-chain"')
    assert 'hx-trigger="every 2s"' in body

    again = pm_client.post(reverse("run-rerun", args=[failed.pk]), **HTMX).content.decode()
    assert f"Run {new.pk} of this stage is already" in again
    assert Run.objects.filter(rerun_of=failed).count() == 1


@pytest.mark.django_db
def test_rerun_without_javascript_reports_the_refusal_on_the_page(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V42")
    chain = make_chain(Question.objects.get(code="V42"), acme_engineer)
    running = make_run(chain, stages.CLAIM, stages.RUNNING)
    response = pm_client.post(reverse("run-rerun", args=[running.pk]), follow=True)
    assert f"Run {running.pk} is still running." in response.content.decode()


@pytest.mark.django_db
def test_question_page_query_count_does_not_grow_with_runs(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V42")
    question = Question.objects.get(code="V42")
    chain = make_chain(question, acme_engineer)
    make_run(chain, stages.CLAIM, stages.PASSED)
    url = reverse("question-detail", args=["V42"])
    few, few_live = count_queries(pm_client, url), count_queries(pm_client, url, **HTMX)
    for _ in range(3):
        run_rerun(actor=pm, run=Run.objects.filter(chain=chain, stage=stages.CLAIM).first())
        Run.objects.filter(chain=chain, state__in=stages.ACTIVE_STATES).update(state=stages.PASSED, verdict=stages.PASS)
    for stage in stages.CHAIN_STAGES[1:5]:
        make_run(chain, stage, stages.PASSED)
    make_run(chain, stages.INTEGRATION, stages.RUNNING)
    assert count_queries(pm_client, url) == few
    assert count_queries(pm_client, url, **HTMX) == few_live


@pytest.mark.django_db
def test_audit_log_filters_by_actor_object_and_action(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V01")
    url = reverse("audit-log")
    body = pm_client.get(url, {"action": "question.update", "actor": "ada"}).content.decode()
    assert (
        body.count('<code class="muted">question.update</code>')
        == AuditEntry.objects.filter(action="question.update", actor_label="ada").count()
    )
    question = Question.objects.get(code="V01")
    body = pm_client.get(url, {"object_type": "vendor.question", "object_id": str(question.pk)}).content.decode()
    assert "question.update" in body
    assert "No audit entry matches these filters." in pm_client.get(url, {"actor": "nobody-at-all"}).content.decode()


@pytest.mark.django_db
def test_audit_log_shows_a_questions_history_by_its_code(pm_client, pm, acme, acme_engineer, checklist):
    """The question's own edits, its answers and comments, and its chains' runs; not another question's."""
    put_to(pm, acme, "V18", "V01")
    question = Question.objects.get(code="V18")
    chain = make_chain(question, acme_engineer)
    run_rerun(actor=pm, run=make_run(chain, stages.CHAIN_STAGES[0], stages.PASSED))
    body = pm_client.get(reverse("audit-log"), {"question": "v18"}).content.decode()
    ids = set(re.findall(r'title="([a-z.]+):(\d+)">', body))
    answer = question.answers.get()
    assert ("vendor.question", str(question.pk)) in ids
    assert ("vendor.answer", str(answer.pk)) in ids
    assert any(kind == "acceptance.run" for kind, _id in ids)
    assert ("vendor.question", str(Question.objects.get(code="V01").pk)) not in ids
    assert all(kind in {"vendor.question", "vendor.answer", "acceptance.chain", "acceptance.run"} for kind, _id in ids)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"question": "V99"}, "Question code: No question has the code V99."),
        ({"capability": "no-such-thing"}, "Capability slug: No capability has the slug no-such-thing."),
        ({"action": "promotion"}, "Action: Select a valid choice. promotion is not one of the available choices."),
    ],
)
def test_audit_log_refuses_an_unknown_question_capability_or_action(pm_client, pm, checklist, params, error):
    response = pm_client.get(reverse("audit-log"), params)
    assert response.status_code == 400
    assert error in response.content.decode()


@pytest.mark.django_db
def test_audit_log_lists_actions_by_name_and_shows_a_blocked_promotion_as_asked_and_stayed(pm_client, pm, checklist):
    capability = Capability.objects.order_by("slug").first()
    capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C0"))
    response = pm_client.get(
        reverse("audit-log"), {"capability": capability.slug, "action": "capability.promotion_blocked"}
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert '<option value="capability.promotion_blocked" selected>promotion blocked</option>' in body
    assert f'<div class="outcome">asked C0, stayed {capability.status}</div>' in body
    assert "→ —" not in body


@pytest.mark.django_db
def test_audit_log_shows_each_entry_s_actor_object_and_changes_in_its_row(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V01", ask=True)
    question = Question.objects.get(code="V01")
    entry = AuditEntry.objects.get(action="question.update", object_id=str(question.pk))
    body = pm_client.get(reverse("audit-log"), {"object_type": "vendor.question"}).content.decode()
    row = body[body.index(f'<td class="num">{entry.id}</td>') :]
    row = row[: row.index("</tr>")]
    assert '<a href="?object_type=vendor.question&amp;actor=ada">ada</a>' in row
    object_cell = f'title="vendor.question:{question.pk}">Question {question.pk}</a>'
    assert object_cell + '\n          <br><span class="muted">V01</span>' in row
    assert '<div><span title="state">State</span>: <span class="muted">New</span> → Asked</div>' in row
    assert '<div><span title="organisation">Organisation</span>: <span class="muted">—</span> → acme</div>' in row
    assert 'class="outcome"' not in row


@pytest.mark.django_db
def test_audit_log_shows_an_over_long_filter_as_an_error(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V18")
    response = pm_client.get(reverse("audit-log"), {"actor": "a" * 201})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Actor: Ensure this value has at most 200 characters (it has 201)." in body
    assert '<code class="muted">question.update</code>' not in body
    assert ">201/200</span>" in body


@pytest.mark.django_db
def test_audit_log_query_count_does_not_grow_with_rows(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V01")
    few = count_queries(pm_client, reverse("audit-log"))
    for code in [f"V{n:02d}" for n in range(2, 61)]:
        put_to(pm, acme, code, ask=True)
    assert AuditEntry.objects.count() > 100
    assert count_queries(pm_client, reverse("audit-log")) == few


@pytest.mark.django_db
def test_reports_list_each_open_question_under_its_vendor_with_its_state_due_date_and_text(
    pm_client, pm, acme, checklist
):
    put_to(pm, acme, "V18", ask=True)
    Question.objects.filter(code="V18").update(due_date=datetime.date(2027, 3, 1))
    body = pm_client.get(reverse("reports")).content.decode()
    vendor = body[body.index("<h3>Acme NPU") : body.index("<h3>Not put to a vendor yet")]
    line = vendor[vendor.index('<li><a href="/questions/V18/">V18</a>') :]
    line = line[: line.index('<ul class="owed-list">')]
    assert '<span class="badge state state-asked">Asked</span>' in line
    assert '<span class="muted">due 2027-03-01</span>' in line
    assert f'<span lang="zh-Hans">{Question.objects.get(code="V18").question}</span>' in line
    assert "V01</a>" not in vendor  # not put to acme


@pytest.mark.django_db
def test_reports_download_the_checklist_and_the_matrix(pm_client, checklist):
    markdown = pm_client.get(reverse("report-checklist", args=["md"]))
    assert markdown["Content-Disposition"] == 'attachment; filename="calculet-checklist.md"'
    assert "V60" in markdown.content.decode()
    checklist_csv = pm_client.get(reverse("report-checklist", args=["csv"])).content
    matrix_csv = pm_client.get(reverse("report-capability-matrix")).content
    # A UTF-8 byte order mark first, so that Excel reads the Chinese text as UTF-8.
    assert checklist_csv.startswith(b"\xef\xbb\xbfcode,") and matrix_csv.startswith(b"\xef\xbb\xbfslug,")
    rows = list(csv.DictReader(io.StringIO(checklist_csv.decode("utf-8-sig"))))
    assert len(rows) == 60
    matrix = list(csv.DictReader(io.StringIO(matrix_csv.decode("utf-8-sig"))))
    assert len(matrix) == Capability.objects.count()
    multi_board = next(row for row in matrix if row["slug"] == "multi-board")
    assert multi_board["status"] == "C3" and re.fullmatch(r"(E[0-4] ?)+", multi_board["evidence_grades"])
    assert pm_client.get("/reports/checklist.exe").status_code == 404


@pytest.mark.django_db
def test_vendor_sees_only_their_own_questions_and_only_writes_in_the_discussion(
    client, pm, acme, acme_engineer, other_engineer, checklist
):
    put_to(pm, acme, "V01", "V03")
    put_to(pm, other_engineer.membership.organisation, "V02")
    client.force_login(acme_engineer)
    assert client.get(reverse("dashboard"))["Location"] == reverse("vendor-home")
    body = client.get(reverse("vendor-home")).content.decode()
    assert re.findall(r'href="/questions/(V[0-9]{2})/"', body) == ["V01", "V03"]
    page = client.get(reverse("question-detail", args=["V01"])).content.decode()
    forms = re.findall(r"<form [^>]*>", page.split("<main")[1])
    assert "Ask the gate" not in page and forms == [
        '<form class="comment-form" method="post" action="/questions/V01/comments" hx-post="/questions/V01/comments"'
        ' hx-target="#comment-thread" hx-swap="outerHTML">'
    ]
    assert "Capabilities this question can move" not in page
    assert client.get(reverse("question-detail", args=["V02"])).status_code == 404
    assert client.get(reverse("question-detail", args=["V04"])).status_code == 404
    assert client.get(reverse("question-list"))["Location"] == reverse("vendor-home")
    for name in ("audit-log", "reports"):
        assert client.get(reverse(name)).status_code == 404
    # What the API shows a vendor, the pages show too (tests/test_access.py).
    for name in ("evidence-register", "capability-matrix"):
        assert client.get(reverse(name)).status_code == 200
    assert client.post(reverse("question-edit", args=["V01"]), {"priority": "p0"}).status_code == 404


@pytest.mark.django_db
def test_vendor_sees_only_their_own_runs(client, pm, acme, acme_engineer, other_engineer, checklist):
    bolt = other_engineer.membership.organisation
    put_to(pm, acme, "V18", "V19")
    put_to(pm, bolt, "V20")
    own = make_run(make_chain(Question.objects.get(code="V18"), acme_engineer), stages.CLAIM, stages.PASSED)
    theirs = make_run(make_chain(Question.objects.get(code="V20"), other_engineer), stages.CLAIM, stages.PASSED)
    earlier = make_run(make_chain(Question.objects.get(code="V19"), acme_engineer), stages.CLAIM, stages.FAILED)
    put_to(pm, bolt, "V19")
    client.force_login(other_engineer)
    home = client.get(reverse("vendor-home")).content.decode()
    runs = re.findall(r'<td class="num">([0-9]+)</td>', home)
    assert runs == [str(theirs.pk)]
    page = client.get(reverse("question-detail", args=["V19"])).content.decode()
    assert f"#{earlier.pk}" not in page and "No chain yet." in page
    client.force_login(acme_engineer)
    assert re.findall(r'<td class="num">([0-9]+)</td>', client.get(reverse("vendor-home")).content.decode()) == [
        str(own.pk)
    ]


@pytest.mark.django_db
def test_a_missing_page_and_another_vendors_question_are_the_same_product_404(client, pm, pm_client, checklist):
    other = make_user("bob", "bolt", "vendor", organisation_name="Bolt Silicon")
    put_to(pm, other.membership.organisation, "V19", ask=True)
    client.force_login(make_user("ann", "acme", "vendor", organisation_name="Acme NPU"))
    for reader, path in ((pm_client, "/questions/V99/"), (client, "/questions/V19/"), (client, "/no-such-page/")):
        for language, heading in (("en", "Page not found"), ("zh-hans", "页面不存在")):
            response = reader.get(path, HTTP_ACCEPT_LANGUAGE=language)
            assert response.status_code == 404
            assert [template.name for template in response.templates][:2] == ["404.html", "base.html"]
            assert f"<h1>{heading}</h1>" in response.content.decode()


@pytest.mark.django_db
def test_the_evidence_register_renders_the_checklists_inline_code(pm_client, checklist):
    page = pm_client.get(reverse("evidence-register") + "?q=R19").content.decode()
    row = page[page.index('id="evidence-R19"') :]
    row = row[: row.index("</tr>")]
    assert "CalRT 指标读取未受 <code>USE_CALRT</code> 保护" in row and "`" not in row
    assert "<code>cal_ctx</code> 声明 <code>:2409-2411</code>" in row


@pytest.mark.django_db
def test_audit_log_shows_states_priorities_lists_and_mappings_as_a_person_reads_them(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V01", ask=True)
    question = Question.objects.get(code="V01")
    question_update(actor=pm, question=question, changes=QuestionChanges(priority="p0"))
    audit_record(
        actor=pm, action="question.update", obj=question,
        before={"versions": None, "reasons": []},
        after={"versions": {"calrt": "0.7.6", "chip": "calculet-2c"}, "reasons": ["no_answer", "no_sdk_evidence"],
               "muted": True},
    )  # fmt: skip
    url = reverse("audit-log")
    shown = {"object_type": "vendor.question", "object_id": str(question.pk)}
    body = pm_client.get(url, shown).content.decode()
    assert '<span title="state">State</span>: <span class="muted">New</span> → Asked' in body
    assert '<span title="priority">Priority</span>: <span class="muted">P2 — normal</span> → P0 — blocking' in body
    versions = '<span class="muted">—</span> → calrt 0.7.6; chip calculet-2c'
    assert f'<span title="versions">Versions</span>: {versions}' in body
    gate_reasons = '<span class="muted">—</span> → no complete answer, no current E2 evidence'
    assert f'<span title="reasons">Gate reasons</span>: {gate_reasons}' in body
    assert '<code>muted</code>: <span class="muted">—</span> → yes' in body
    assert "{'" not in body and "[]" not in body and "<code>state</code>" not in body
    assert f'title="vendor.question:{question.pk}">Question {question.pk}</a>' in body and "<code>vendor." not in body
    chinese = pm_client.get(url, shown, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '<span title="state">状态</span>: <span class="muted">新建</span> → 已提问' in chinese
    assert '<span title="priority">优先级</span>: <span class="muted">P2 — 普通</span> → P0 — 阻断' in chinese
    assert f'<span title="versions">版本</span>: {versions}' in chinese
    # A list inside a Chinese page is joined with the enumeration comma, not ", ".
    gate_reasons = '<span class="muted">—</span> → 没有完整的回答、没有当前的 E2 证据'
    assert f'<span title="reasons">门禁原因</span>: {gate_reasons}' in chinese
    assert '<code>muted</code>: <span class="muted">—</span> → 是' in chinese
    assert f'title="vendor.question:{question.pk}">问题 {question.pk}</a>' in chinese


@pytest.mark.django_db
def test_a_list_inside_a_chinese_sentence_is_joined_with_the_enumeration_comma(pm_client, checklist):
    """The statuses a capability's move needs approvals for, on its page: "C1、C0" in Chinese, "C1, C0" in
    English, from one list joined as the reader's language lists (calculet.labels.listed)."""
    from acceptance.views.capabilities import _approval_moves

    capability = next(c for c in Capability.objects.filter(pinned=False) if len(_approval_moves(c)) >= 2)
    moves = _approval_moves(capability)
    url = reverse("capability-detail", args=[capability.slug])
    chinese = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "、".join(moves) in chinese and ", ".join(moves) not in chinese
    english = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert f"Moving this capability to {', '.join(moves)} needs" in english
