import datetime
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from acceptance import stages
from acceptance.services import answer_submit
from calculet.models import AuditEntry
from tests.factories import make_chain, make_run, make_user, put_to
from vendor.inputs import AnswerDraft, QuestionChanges
from vendor.models import Question, Section
from vendor.services.questions import question_update

HTMX = {"HTTP_HX_REQUEST": "true"}
TODAY = datetime.date.today()


def days(n: int) -> datetime.date:
    return TODAY + datetime.timedelta(days=n)


def listed_codes(response):
    return re.findall(r'<tr id="question-(V[0-9]{2})"', response.content.decode())


@pytest.mark.django_db
def test_pages_need_a_login(client):
    response = client.get(reverse("question-list"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_login_page_logs_in_and_lands_on_the_dashboard(client, pm):
    response = client.post(reverse("login"), {"username": "ada", "password": "a-long-test-password-9"})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard")
    assert client.get(reverse("dashboard")).status_code == 200


@pytest.mark.django_db
def test_list_filters_combine(pm_client, checklist):
    assert listed_codes(pm_client.get(reverse("question-list"), {"section": "12.2", "q": "golden"})) == ["V13"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"q": "GOLDEN"})) == ["V08", "V13", "V18", "V42"]


@pytest.mark.django_db
def test_list_text_filter_matches_chinese_in_questions_and_section_titles(pm_client, checklist):
    assert listed_codes(pm_client.get(reverse("question-list"), {"q": "回滚"})) == ["V59"]
    section_codes = listed_codes(pm_client.get(reverse("question-list"), {"q": "性能主线"}))
    assert section_codes == [f"V{n}" for n in range(18, 28)]


@pytest.mark.django_db
def test_list_filters_by_blocking_theme_state_assignee_and_organisation(pm_client, pm, acme, checklist):
    blocks = Section.objects.get(code="12.1").blocks
    assert blocks
    codes = listed_codes(pm_client.get(reverse("question-list"), {"theme": blocks}))
    assert codes == [f"V{n:02d}" for n in range(1, 10)]

    put_to(pm, acme, "V05", "V07")
    question_update(
        actor=pm, question=Question.objects.get(code="V07"), changes=QuestionChanges(state="asked", assignee=pm)
    )
    assert listed_codes(pm_client.get(reverse("question-list"), {"organisation": "acme"})) == ["V05", "V07"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"state": "asked"})) == ["V07"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"assignee": pm.username})) == ["V07"]
    assert "V07" not in listed_codes(pm_client.get(reverse("question-list"), {"assignee": "none"}))


@pytest.mark.django_db
def test_list_sorts_and_paginates(pm_client, pm, checklist):
    question_update(actor=pm, question=Question.objects.get(code="V42"), changes=QuestionChanges(due_date=days(10)))
    question_update(actor=pm, question=Question.objects.get(code="V13"), changes=QuestionChanges(due_date=days(40)))
    assert listed_codes(pm_client.get(reverse("question-list"), {"sort": "due"}))[:2] == ["V42", "V13"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"sort": "-due"}))[:2] == ["V13", "V42"]

    first = pm_client.get(reverse("question-list"))
    second = pm_client.get(reverse("question-list"), {"page": 2})
    assert first.context["page"].paginator.num_pages == 3
    assert listed_codes(second)[0] == "V26"
    assert 'href="?page=2"' in first.content.decode()


@pytest.mark.django_db
def test_htmx_asks_for_the_table_alone(pm_client, checklist):
    response = pm_client.get(reverse("question-list"), {"state": "new"}, **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="question-table"')
    assert "<html" not in body
    assert "HX-Request" in response["Vary"]


@pytest.mark.django_db
def test_edit_in_place_changes_the_row_and_records_it(pm_client, pm, checklist):
    response = pm_client.post(
        reverse("question-edit", args=["V10"]),
        {"state": "new", "priority": "p0", "assignee": pm.username, "due_date": days(30).isoformat()},
        **HTMX,
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<tr id="question-V10"')
    question = Question.objects.get(code="V10")
    assert (question.priority, question.assignee, question.due_date) == ("p0", pm, days(30))
    entry = AuditEntry.objects.filter(action="question.update", object_id=str(question.pk)).get()
    assert entry.after == {"priority": "p0", "assignee": "ada", "due_date": days(30).isoformat()}


@pytest.mark.django_db
def test_edit_in_place_shows_the_rule_that_refused_and_changes_nothing(pm_client, checklist):
    audit_rows = AuditEntry.objects.count()
    response = pm_client.post(
        reverse("question-edit", args=["V10"]), {"state": "closed", "priority": "p1", "assignee": ""}, **HTMX
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'class="has-error"' in body
    assert "cannot move from New to Closed" in body
    question = Question.objects.get(code="V10")
    assert (question.state, question.priority) == ("new", "p2")
    assert AuditEntry.objects.count() == audit_rows


@pytest.mark.django_db
def test_edit_in_place_names_a_bad_date(pm_client, checklist):
    response = pm_client.post(reverse("question-edit", args=["V10"]), {"due_date": "30/09/2026"}, **HTMX)
    assert "Enter a date as YYYY-MM-DD." in response.content.decode()
    assert Question.objects.get(code="V10").due_date is None


@pytest.mark.django_db
def test_edit_without_javascript_redirects_back_to_the_filtered_list(pm_client, checklist):
    back = reverse("question-list") + "?section=12.2&page=1"
    response = pm_client.post(reverse("question-edit", args=["V11"]), {"priority": "p1", "next": back})
    assert response.status_code == 302
    assert response["Location"] == back
    assert Question.objects.get(code="V11").priority == "p1"


@pytest.mark.django_db
def test_edit_without_javascript_shows_the_error_beside_the_row(pm_client, checklist):
    back = reverse("question-list") + "?section=12.2"
    response = pm_client.post(reverse("question-edit", args=["V11"]), {"state": "closed", "next": back})
    assert response.status_code == 400
    body = response.content.decode()
    assert "<html" in body and "cannot move from New to Closed" in body
    assert listed_codes(response)[0] == "V10"


@pytest.mark.django_db
def test_edit_refuses_an_outside_redirect(pm_client, checklist):
    response = pm_client.post(reverse("question-edit", args=["V11"]), {"priority": "p1", "next": "https://evil.test/"})
    assert response["Location"] == reverse("question-list")


@pytest.mark.django_db
def test_only_a_pm_edits(client, viewer, checklist):
    client.force_login(viewer)
    page = client.get(reverse("question-list")).content.decode()
    assert "hx-post" not in page
    response = client.post(reverse("question-edit", args=["V10"]), {"priority": "p0"}, **HTMX)
    assert response.status_code == 404
    assert Question.objects.get(code="V10").priority == "p2"


@pytest.mark.django_db
def test_bulk_edit_shows_the_change_then_makes_it_once_confirmed(pm_client, pm, checklist):
    colleague = make_user("cleo", "team", "operator")
    back = reverse("question-list") + "?section=12.5"
    ticked = {"code": ["V37", "V38", "V41"], "next": back}
    choices = {"assignee": colleague.username, "priority": "p0", "due_date": days(14).isoformat()}
    preview = pm_client.post(reverse("question-bulk-edit"), {**ticked, **choices}, **HTMX)
    body = preview.content.decode()
    assert preview.status_code == 200
    assert "Change 3 questions?" in body and "Confirm" in body
    assert "<del>P2 — normal</del> → <ins>P0 — blocking</ins>" in body
    assert not Question.objects.filter(assignee=colleague).exists()
    assert AuditEntry.objects.filter(action="question.update").count() == 0

    done = pm_client.post(reverse("question-bulk-edit"), {**ticked, **choices, "confirm": "yes"}, **HTMX)
    assert "Changed 3 questions." in done.content.decode()
    assert listed_codes(done) == ["V37", "V38", "V39", "V40", "V41", "V42"]
    changed = Question.objects.filter(assignee=colleague, priority="p0", due_date=days(14))
    assert sorted(changed.values_list("code", flat=True)) == ["V37", "V38", "V41"]
    assert AuditEntry.objects.filter(action="question.update").count() == 3


@pytest.mark.django_db
def test_bulk_edit_moves_states_and_clears_due_dates_without_javascript(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V01", "V02")
    for code in ("V01", "V02"):
        question_update(actor=pm, question=Question.objects.get(code=code), changes=QuestionChanges(due_date=days(3)))
    back = reverse("question-list") + "?organisation=acme"
    form = {"code": ["V01", "V02"], "state": "asked", "clear_due": "1", "next": back}
    preview = pm_client.post(reverse("question-bulk-edit"), form)
    assert preview.status_code == 200 and "<html" in preview.content.decode()
    response = pm_client.post(reverse("question-bulk-edit"), {**form, "confirm": "yes"})
    assert response.status_code == 302 and response["Location"] == back
    assert set(Question.objects.filter(code__in=["V01", "V02"]).values_list("state", "due_date")) == {("asked", None)}
    assert "Changed 2 questions." in pm_client.get(back).content.decode()


@pytest.mark.django_db
def test_bulk_edit_with_nothing_ticked_or_chosen_says_so(pm_client, checklist):
    response = pm_client.post(reverse("question-bulk-edit"), {"priority": "p1"}, **HTMX)
    assert "Tick at least one question." in response.content.decode()
    response = pm_client.post(reverse("question-bulk-edit"), {"code": ["V01"]}, **HTMX)
    assert "Choose at least one thing to change." in response.content.decode()


@pytest.mark.django_db
def test_bulk_edit_preview_names_the_questions_that_refuse(pm_client, pm, acme, other_engineer, checklist):
    put_to(pm, acme, "V01", "V02")
    form = {"code": ["V01", "V02"], "assignee": other_engineer.username}
    body = pm_client.post(reverse("question-bulk-edit"), form, **HTMX).content.decode()
    assert body.count("belongs to another organisation") == 2
    assert ">Confirm</button>" not in body
    confirmed = pm_client.post(reverse("question-bulk-edit"), {**form, "confirm": "yes"})
    assert confirmed.status_code == 400
    assert "V01: User bob belongs to another organisation" in confirmed.content.decode()
    assert not Question.objects.filter(assignee=other_engineer).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"due_date": "1900-01-01"}, "The due date 1900-01-01 is in the past"),
        ({"due_date": "01/02/2030"}, "Enter a date as YYYY-MM-DD."),
        ({"priority": "p9"}, "Priority is one of: P0 — blocking, P1 — high, P2 — normal, P3 — low."),
        ({"assignee": "nobody-of-that-name"}, "Choose a person from the list."),
    ],
)
def test_bulk_edit_refuses_bad_input_and_changes_nothing(pm_client, checklist, choice, message):
    response = pm_client.post(reverse("question-bulk-edit"), {"code": ["V01", "V02"], **choice, "confirm": "yes"})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert AuditEntry.objects.filter(action="question.update").count() == 0


@pytest.mark.django_db
def test_a_vendor_contact_is_offered_only_on_the_questions_of_their_organisation(
    pm_client, pm, acme, other_engineer, checklist
):
    put_to(pm, acme, "V01")
    make_user("cleo", "team", "viewer")
    edit = reverse("question-edit", args=["V01"])
    v01 = pm_client.get(edit, {"field": "assignee"}, **HTMX).content.decode()
    v02 = pm_client.get(reverse("question-edit", args=["V02"]), {"field": "assignee"}, **HTMX).content.decode()
    assert ">ann</option>" in v01 and ">bob</option>" not in v01
    assert ">ann</option>" not in v02
    assert '<option value="cleo" >cleo</option>' in v02
    ann = Question.objects.get(code="V01").organisation.memberships.get().user
    response = pm_client.post(reverse("question-edit", args=["V01"]), {"assignee": ann.username}, **HTMX)
    assert "Saved" in response.content.decode()
    assert Question.objects.get(code="V01").assignee == ann


@pytest.mark.django_db
def test_a_past_due_date_is_refused_on_entry_in_the_row_and_the_ticket(pm_client, checklist):
    response = pm_client.post(reverse("question-edit", args=["V10"]), {"due_date": "1900-01-01"}, **HTMX)
    assert "The due date 1900-01-01 is in the past; give today or a later date." in response.content.decode()
    response = pm_client.post(reverse("question-ticket", args=["V10"]), {"due_date": "1900-01-01"})
    assert response.status_code == 400
    assert "The due date 1900-01-01 is in the past" in response.content.decode()
    assert Question.objects.get(code="V10").due_date is None


def _set_due(question_code: str, due_date: datetime.date) -> None:
    """A due date set earlier, which has passed since (no service sets a past date)."""
    Question.objects.filter(code=question_code).update(due_date=due_date)


@pytest.mark.django_db
def test_overdue_and_due_soon_are_highlighted_filtered_and_counted(
    pm_client, pm, acme, acme_engineer, settings, checklist
):
    settings.QUESTION_DUE_SOON_DAYS = 7
    put_to(pm, acme, "V01", "V02", "V03", "V04", ask=True)
    _set_due("V01", days(-3))
    _set_due("V02", days(0))
    _set_due("V03", days(7))
    _set_due("V04", days(8))
    _set_due("V05", days(-1))
    question_update(
        actor=pm,
        question=Question.objects.get(code="V05"),
        changes=QuestionChanges(state="deferred", state_reason="not this release"),
    )  # settled: not overdue
    body = pm_client.get(reverse("question-list"), {"section": "12.1"}).content.decode()
    row_classes = dict(re.findall(r'<tr id="question-(V[0-9]{2})" class="([^"]*)"', body))
    assert (row_classes["V01"], row_classes["V02"], row_classes["V03"]) == (
        " row-overdue",
        " row-due_soon",
        " row-due_soon",
    )
    assert (row_classes["V04"], row_classes["V05"]) == ("", "")
    assert '<span class="badge due due-overdue">Overdue</span>' in body.split('id="question-V01"')[1].split("</tr>")[0]
    assert listed_codes(pm_client.get(reverse("question-list"), {"due": "overdue"})) == ["V01"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"due": "due_soon"})) == ["V02", "V03"]
    assert "V04" not in listed_codes(pm_client.get(reverse("question-list"), {"due": "due_soon"}))
    dashboard = pm_client.get(reverse("dashboard"))
    counted = dict(dashboard.context["due_counts"])
    assert (counted["overdue"], counted["due_soon"]) == (1, 2)
    assert 'href="/questions/?due=overdue&amp;sort=due"' in dashboard.content.decode()
    overdue = '<span class="badge due due-overdue">Overdue</span>'
    ticket = pm_client.get(reverse("question-detail", args=["V01"])).content.decode().split('id="question-ticket"')[1]
    assert overdue in ticket.split("</section>")[0]
    control = pm_client.get(reverse("question-edit", args=["V01"]), {"field": "due_date"}, **HTMX).content.decode()
    assert overdue in control
    pm_client.force_login(acme_engineer)  # the vendor sees its own overdue question marked
    vendor_home = pm_client.get(reverse("vendor-home")).content.decode()
    assert (
        '<span class="badge due due-overdue">Overdue</span>' in vendor_home.split("V01</strong>")[1].split("</tr>")[0]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "shown"),
    [
        ({"section": "99.9"}, "Section: Select a valid choice. 99.9 is not one of the available choices."),
        ({"state": "nope"}, "State: Select a valid choice. nope is not one of the available choices."),
        ({"sort": "x"}, "Sort: Select a valid choice. x is not one of the available choices."),
        ({"due": "later"}, "Due: Select a valid choice."),
        ({"q": "x" * 201}, "Text: Ensure this value has at most 200 characters (it has 201)."),
    ],
)
def test_invalid_filters_are_shown_as_errors_not_ignored(pm_client, checklist, params, shown):
    response = pm_client.get(reverse("question-list"), params)
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="filter-errors"' in body and shown in body
    assert listed_codes(response) == []


@pytest.mark.django_db
def test_the_search_field_shows_its_limit_and_count(pm_client, checklist):
    body = pm_client.get(reverse("question-list"), {"q": "KV 缓存"}).content.decode()
    assert 'maxlength="200"' in body
    assert 'data-for="id_q" data-limit="200"' in body and ">5/200</span>" in body


@pytest.mark.django_db
def test_question_list_queries_do_not_grow_with_rows(client, pm, django_assert_num_queries):
    section = Section.objects.create(
        code="12.1", position=1, title="t", theme="t", question_header="q", acceptance_header="a"
    )
    for number in (1, 2):
        Question.objects.create(code=f"V{number:02d}", number=number, section=section, question="q", acceptance="a")
    client.force_login(pm)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("question-list"))
    for number in range(3, 80):
        Question.objects.create(
            code=f"V{number:02d}", number=number, section=section, question="q", acceptance="a", assignee=pm
        )
    with django_assert_num_queries(len(few.captured_queries)):
        client.get(reverse("question-list"))


@pytest.mark.django_db
def test_list_filters_by_chain_stage_reached(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18", "V19")
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for stage in stages.CHAIN_STAGES[:3]:
        make_run(chain, stage, stages.PASSED)
    make_chain(Question.objects.get(code="V19"), acme_engineer)
    assert listed_codes(pm_client.get(reverse("question-list"), {"stage": stages.GOLDEN})) == ["V18"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"stage": stages.CLAIM})) == ["V19"]
    not_started = listed_codes(pm_client.get(reverse("question-list"), {"stage": "none", "section": "12.3"}))
    assert not_started == [f"V{n}" for n in range(20, 28)]
    body = pm_client.get(reverse("question-list"), {"section": "12.3"}).content.decode()
    assert "Numerical golden" in body.split('id="question-V18"')[1].split("</tr>")[0]


def _verifying_v18_owing_batches(pm, acme):
    put_to(pm, acme, "V18")
    Question.objects.filter(code="V18").update(state="verifying")
    return Question.objects.get(code="V18")


@pytest.mark.django_db
def test_edit_in_place_refuses_closed_naming_what_is_owed(pm_client, pm, acme, checklist):
    _verifying_v18_owing_batches(pm, acme)
    audit_rows = AuditEntry.objects.count()
    response = pm_client.post(reverse("question-edit", args=["V18"]), {"state": "closed"}, **HTMX)
    body = response.content.decode()
    assert 'class="has-error"' in body
    assert "V18 cannot be closed while 3 of its deliverables are not accepted" in body
    assert "package-batch-4" in body and "package-batch-16" in body
    assert Question.objects.get(code="V18").state == "verifying"
    assert AuditEntry.objects.count() == audit_rows


@pytest.mark.django_db
def test_bulk_edit_refuses_closed_naming_what_is_owed(pm_client, pm, acme, checklist):
    _verifying_v18_owing_batches(pm, acme)
    form = {"code": ["V18"], "state": "closed"}
    preview = pm_client.post(reverse("question-bulk-edit"), form, **HTMX).content.decode()
    assert "package-batch-8" in preview and ">Confirm</button>" not in preview
    confirmed = pm_client.post(reverse("question-bulk-edit"), {**form, "confirm": "yes"})
    assert confirmed.status_code == 400
    assert "V18: V18 cannot be closed while 3 of its deliverables" in confirmed.content.decode()
    assert Question.objects.get(code="V18").state == "verifying"


@pytest.mark.django_db
def test_answer_tolerances_read_as_the_golden_check_applies_them(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18")
    tolerances = {"cosine_min": 0.9999, "max_rel": 0.005, "decode_logits.top1_min": 0.995}
    answer_submit(
        actor=acme_engineer,
        question=Question.objects.get(code="V18"),
        draft=AnswerDraft(deliverable="package-batch-8", golden_tolerances=tolerances),
    )
    body = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    shown = re.findall(r'<span class="muted tolerance">([^<]*)</span>', body)
    assert sorted(shown) == ["cosine ≥ 0.9999", "decode_logits.top1 ≥ 0.995", "max_rel ≤ 0.005"]


@pytest.mark.django_db
def test_the_list_shows_values_and_fetches_a_cells_control_when_asked(pm_client, pm, checklist):
    """25 rows render no select: each editable cell is its value, linking to the ticket without JavaScript and
    fetching its control with it; an unknown field is not found."""
    body = pm_client.get(reverse("question-list")).content.decode()
    table = body[body.index('<table class="questions">') :]
    assert "<select" not in table[: table.index("</table>")]
    row = table[table.index('id="question-V01"') :]
    assert 'href="/questions/V01/#question-ticket"' in row and 'hx-get="/questions/V01/edit?field=priority"' in row
    control = pm_client.get(reverse("question-edit", args=["V01"]), {"field": "priority"}, **HTMX).content.decode()
    assert control.count("<select") == 1 and 'name="priority"' in control and 'hx-include="#list-next"' in control
    assert pm_client.get(reverse("question-edit", args=["V01"]), {"field": "organisation"}).status_code == 404
    response = pm_client.post(reverse("question-edit", args=["V01"]), {"priority": "p0"}, **HTMX)
    row = response.content.decode()
    assert "Saved" in row and "<select" not in row and "P0" in row


@pytest.mark.django_db
def test_a_state_reason_over_its_limit_is_refused_in_the_ticket_not_cut(pm_client, checklist):
    response = pm_client.post(
        reverse("question-ticket", args=["V10"]), {"state": "deferred", "state_reason": "r" * 2001}
    )
    assert response.status_code == 400
    assert "The reason is at most 2000 characters." in response.content.decode()
    question = Question.objects.get(code="V10")
    assert (question.state, question.state_reason) == ("new", "")
    response = pm_client.post(
        reverse("question-ticket", args=["V10"]), {"state": "deferred", "state_reason": "r" * 2000}
    )
    assert response.status_code == 302
    assert len(Question.objects.get(code="V10").state_reason) == 2000


@pytest.mark.django_db
def test_the_edit_forms_name_the_assignee_by_username_as_the_api_does(pm_client, pm, checklist):
    """The row's control and the ticket offer usernames; a person's id (what they sent before) names nobody."""
    control = pm_client.get(reverse("question-edit", args=["V10"]), {"field": "assignee"}, **HTMX).content.decode()
    assert '<option value="ada" >ada</option>' in control
    ticket = pm_client.get(reverse("question-detail", args=["V10"])).content.decode()
    assert '<option value="ada" >ada</option>' in ticket
    response = pm_client.post(reverse("question-ticket", args=["V10"]), {"assignee": str(pm.pk)})
    assert response.status_code == 400 and "Choose a person from the list." in response.content.decode()
    assert Question.objects.get(code="V10").assignee is None
    response = pm_client.post(reverse("question-ticket", args=["V10"]), {"assignee": "ada"})
    assert response.status_code == 302
    assert Question.objects.get(code="V10").assignee == pm
