import datetime
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from acceptance import stages
from calculet.models import AuditEntry
from tests.web.conftest import make_chain, make_run, make_user, put_to
from vendor.models import Question, Section
from vendor.services.questions import question_update

HTMX = {"HTTP_HX_REQUEST": "true"}


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
    question_update(actor=pm, question=Question.objects.get(code="V07"), state="asked", assignee=pm)
    assert listed_codes(pm_client.get(reverse("question-list"), {"organisation": "acme"})) == ["V05", "V07"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"state": "asked"})) == ["V07"]
    assert listed_codes(pm_client.get(reverse("question-list"), {"assignee": str(pm.pk)})) == ["V07"]
    assert "V07" not in listed_codes(pm_client.get(reverse("question-list"), {"assignee": "none"}))


@pytest.mark.django_db
def test_list_sorts_and_paginates(pm_client, pm, checklist):
    question_update(actor=pm, question=Question.objects.get(code="V42"), due_date=datetime.date(2026, 9, 1))
    question_update(actor=pm, question=Question.objects.get(code="V13"), due_date=datetime.date(2026, 10, 1))
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
        {"state": "new", "priority": "p0", "assignee": str(pm.pk), "due_date": "2026-09-30"},
        **HTMX,
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<tr id="question-V10"')
    question = Question.objects.get(code="V10")
    assert (question.priority, question.assignee, question.due_date) == ("p0", pm, datetime.date(2026, 9, 30))
    entry = AuditEntry.objects.filter(action="question.update", object_id=str(question.pk)).get()
    assert entry.after == {"priority": "p0", "assignee": "ada", "due_date": "2026-09-30"}


@pytest.mark.django_db
def test_edit_in_place_shows_the_rule_that_refused_and_changes_nothing(pm_client, checklist):
    audit_rows = AuditEntry.objects.count()
    response = pm_client.post(
        reverse("question-edit", args=["V10"]), {"state": "closed", "priority": "p1", "assignee": ""}, **HTMX
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'class="has-error"' in body
    assert "cannot move from new to closed" in body
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
    assert "<html" in body and "cannot move from new to closed" in body
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
def test_bulk_assign_assigns_the_ticked_questions(pm_client, pm, checklist):
    colleague = make_user("cleo", "team", "operator")
    back = reverse("question-list") + "?section=12.5"
    response = pm_client.post(
        reverse("question-bulk-assign"), {"code": ["V37", "V38", "V41"], "assignee": colleague.pk, "next": back}, **HTMX
    )
    assert response.status_code == 200
    assert "Assigned 3 questions to cleo." in response.content.decode()
    assert listed_codes(response) == ["V37", "V38", "V39", "V40", "V41", "V42"]
    assigned = Question.objects.filter(assignee=colleague).values_list("code", flat=True)
    assert sorted(assigned) == ["V37", "V38", "V41"]


@pytest.mark.django_db
def test_bulk_assign_with_nothing_ticked_says_so(pm_client, checklist):
    response = pm_client.post(reverse("question-bulk-assign"), {"assignee": ""}, **HTMX)
    assert "Tick at least one question." in response.content.decode()


@pytest.mark.django_db
def test_bulk_assign_refuses_a_vendor_of_another_organisation(pm_client, pm, acme, other_engineer, checklist):
    put_to(pm, acme, "V01", "V02")
    response = pm_client.post(
        reverse("question-bulk-assign"), {"code": ["V01", "V02"], "assignee": other_engineer.pk}, **HTMX
    )
    assert "belongs to another organisation" in response.content.decode()
    assert not Question.objects.filter(assignee=other_engineer).exists()


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
