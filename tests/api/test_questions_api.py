import datetime
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from calculet.models import AuditEntry
from tests.factories import complete_answer, db_snapshot, make_question
from vendor.inputs import QuestionChanges
from vendor.models import Question
from vendor.services.questions import question_update


def test_pm_sees_every_question_and_a_vendor_only_theirs(pm, vendor_a, question_a, question_b, capability):
    make_question("V01")
    codes = [q["code"] for q in pm.client().get("/api/v1/questions/").json()["results"]]
    assert codes == ["V01", "V18", "V19"]
    body = vendor_a.client().get("/api/v1/questions/").json()
    assert body["count"] == 1
    question = body["results"][0]
    assert question["code"] == "V18"
    assert question["organisation"] == "acme"
    assert question["state"] == "asked"
    assert question["capabilities"] == [{"slug": "decode-batch-8", "title": "Decode batch 8", "status": "C3"}]


def test_lists_filter_order_and_paginate(pm, vendor_a):
    acme = vendor_a.user.membership.organisation
    for number in range(1, 8):
        make_question(
            f"V{number:02d}", organisation=acme if number % 2 else None, state="asked" if number % 2 else "new"
        )
    client = pm.client()
    assert [q["code"] for q in client.get("/api/v1/questions/?state=asked").json()["results"]] == [
        "V01",
        "V03",
        "V05",
        "V07",
    ]
    assert [
        q["code"] for q in client.get("/api/v1/questions/?organisation=acme&ordering=-number").json()["results"]
    ] == [
        "V07",
        "V05",
        "V03",
        "V01",
    ]
    page = client.get("/api/v1/questions/?page_size=3&page=2").json()
    assert (page["count"], [q["code"] for q in page["results"]]) == (7, ["V04", "V05", "V06"])
    bad = client.get("/api/v1/questions/?state=open")
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["field"] == "state"
    for name, value in (("section", "99.9"), ("capability", "no-such-capability")):
        bad = client.get(f"/api/v1/questions/?{name}={value}")
        assert bad.status_code == 400, name
        assert bad.json()["errors"][0]["field"] == name


def test_a_question_is_looked_up_by_code(pm, question_a):
    response = pm.client().get("/api/v1/questions/V18/")
    assert response.status_code == 200
    assert response.json()["code"] == "V18"
    assert pm.client().get("/api/v1/questions/V99/").json() == {
        "errors": [{"field": None, "code": "not_found", "message": "Question V99 not found."}]
    }


def test_pm_patches_a_question(pm, vendor_a):
    make_question("V18")
    due = (datetime.date.today() + datetime.timedelta(days=23)).isoformat()
    response = pm.client().patch(
        "/api/v1/questions/V18/",
        {"organisation": "acme", "assignee": "alice", "priority": "p0", "due_date": due, "state": "asked"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["organisation"], body["assignee"], body["priority"], body["due_date"], body["state"]) == (
        "acme",
        "alice",
        "p0",
        due,
        "asked",
    )
    assert AuditEntry.objects.filter(action="question.update", actor__username="pat").count() == 1
    assert vendor_a.client().get("/api/v1/questions/V18/").status_code == 200


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"organisation": "nobody"}, "organisation", "not_found"),
        ({"organisation": "team"}, "organisation", "invalid"),
        ({"assignee": "ghost"}, "assignee", "not_found"),
        ({"priority": "urgent"}, "priority", "invalid_choice"),
        ({"due_date": "soon"}, "due_date", "invalid"),
        ({"due_date": "1900-01-01"}, "due_date", "invalid"),
        ({"state": "closed"}, "state", "invalid"),
        ({"colour": "red"}, "colour", "invalid"),
        ({"priority": ["p1"]}, "priority", "invalid_choice"),
    ],
)
def test_bad_patches_name_the_field_and_change_nothing(pm, vendor_a, body, field, code):
    make_question("V18")
    before = db_snapshot()
    response = pm.client().patch("/api/v1/questions/V18/", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert response.json()["errors"][0]["code"] == code
    assert db_snapshot() == before


def test_only_a_pm_patches(viewer, vendor_a, question_a):
    before = db_snapshot()
    assert viewer.client().patch("/api/v1/questions/V18/", {"priority": "p0"}, format="json").status_code == 403
    assert vendor_a.client().patch("/api/v1/questions/V18/", {"priority": "p0"}, format="json").status_code == 403
    assert db_snapshot() == before


def test_sessions_work_with_csrf(pm, question_a):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(pm.user)
    assert client.get("/api/v1/questions/V18/").status_code == 200
    refused = client.patch("/api/v1/questions/V18/", {"priority": "p0"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["errors"][0]["message"]
    secret = "s3cr3t" * 5 + "ab"  # a CSRF secret is 32 letters and digits; cookie and header must agree
    client.cookies["csrftoken"] = secret
    accepted = client.patch("/api/v1/questions/V18/", {"priority": "p0"}, format="json", HTTP_X_CSRFTOKEN=secret)
    assert accepted.status_code == 200


def test_answers_are_nested_under_their_question(vendor_a, pm, question_a, artifacts_a):
    client = vendor_a.client()
    created = client.post("/api/v1/questions/V18/answers/", complete_answer(artifacts_a), format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["question"], body["organisation"], body["revision"], body["complete"], body["missing"]) == (
        "V18",
        "acme",
        1,
        True,
        [],
    )
    assert body["golden"] == {"artifacts": [artifacts_a["golden"].pk], "tolerances": {"max_abs": 0.02}}
    second = client.post("/api/v1/questions/V18/answers/", {"version": "0.7.7"}, format="json").json()
    assert (second["revision"], second["complete"]) == (2, False)
    listing = pm.client().get("/api/v1/questions/V18/answers/").json()
    assert [a["revision"] for a in listing["results"]] == [2, 1]
    detail = pm.client().get(f"/api/v1/questions/V18/answers/{body['id']}/")
    assert detail.json() == body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"version": 12}, "version"),
        ({"executable_assets": "1"}, "executable_assets"),
        ({"executable_assets": ["x"]}, "executable_assets[0]"),
        ({"error_paths": [{"scenario": "timeout", "expect_code": "E17"}]}, "error_paths[0].expect_code"),
        ({"golden": {"tolerances": {"atol": "tight"}}}, "golden.tolerances.atol"),
        ({"compatibility": {"kernel": "6.1"}}, "compatibility.kernel"),
        ({"minimal_example": {"artifact": 999999}}, "minimal_example.artifact"),
        ({"version": "newest"}, "version"),
        ({"version": "the latest"}, "version"),
        ({"surprise": 1}, "surprise"),
        ({"error_paths": [{"scenario": "timeout"}]}, "error_paths[0].expect_code"),
        ({"error_paths": [{"scenario": " ", "expect_code": 3}]}, "error_paths[0].scenario"),
        ({"error_paths": [{"scenario": "timeout", "expect_code": 3, "retry": 1}]}, "error_paths[0].retry"),
        ({"error_paths": {"scenario": "x"}}, "error_paths"),
        ({"golden": {"artifacts": [], "tolerances": {"atol": -1}}}, "golden.tolerances.atol"),
        ({"golden": {"tolerances": {"a tol": 0.1}}}, "golden.tolerances"),
        ({"golden": {"atol": 0.1}}, "golden.atol"),
        ({"minimal_example": {"artifact": 1, "script": "run.sh"}}, "minimal_example.script"),
        ({"compatibility": {"calrt": "0.7.6", "os": "linux"}}, "compatibility.os"),
        ({"compatibility": {"calrt": "x" * 201}}, "compatibility.calrt"),
        ({"capability": "not-linked"}, "capability"),
        ({"deliverable": "package-batch-32"}, "deliverable"),
    ],
)
def test_bad_answers_get_a_400_naming_the_field(vendor_a, question_a, body, field):
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("thresholds", "field", "message"),
    [
        ({"decode_batch.min_p_value": 0.01}, "thresholds.decode_batch.min_p_value", "no threshold"),
        ({"sampling.min_p_value": 0.01}, "thresholds.sampling.min_p_value", "'sampling' is not in its recipe"),
        ({"soak_requests": 1e9}, "thresholds.soak_requests", "from 1 to 512"),
        ({"soak_concurrency": 0}, "thresholds.soak_concurrency", "from 1 to 64"),
        ({"soak_output_tokens": 2.5}, "thresholds.soak_output_tokens", "whole number"),
        ({"min_decode_tokens_per_s": -1}, "thresholds.min_decode_tokens_per_s", "from 0 to 100000"),
    ],
)
def test_thresholds_a_runner_cannot_serve_get_a_400_naming_them(
    vendor_a, question_a, capability, artifacts_a, thresholds, field, message
):
    body = {**complete_answer(artifacts_a), "capability": capability.slug, "thresholds": thresholds}
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert message in response.json()["errors"][0]["message"]
    assert db_snapshot() == before


def test_soak_thresholds_within_the_limits_are_stored(vendor_a, question_a, artifacts_a):
    body = {**complete_answer(artifacts_a), "thresholds": {"soak_requests": 512, "soak_concurrency": 8.0}}
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["thresholds"] == {"soak_requests": 512, "soak_concurrency": 8.0}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"golden": {"tolerances": {"cosine_min": 0.5, "top1_min": 0, "topk_min": 0, "max_rel": 100}}},
            "golden.tolerances.cosine_min",
        ),
        ({"golden": {"tolerances": {"decode_logits.max_rel": 0.5}}}, "golden.tolerances.decode_logits.max_rel"),
        ({"golden": {"tolerances": {"atol": 0.02}}}, "golden.tolerances.atol"),
        ({"thresholds": {"min_decode_tokens_per_s": 5}}, "thresholds.min_decode_tokens_per_s"),
        ({"thresholds": {"soak_requests": 4}}, "thresholds.soak_requests"),
        ({"thresholds": {"bogus": 1.0}}, "thresholds.bogus"),
    ],
)
def test_an_answer_that_loosens_its_own_test_gets_a_400_naming_the_field(
    vendor_a, question_a, capability, artifacts_a, body, field
):
    golden = {**complete_answer(artifacts_a)["golden"], **body.get("golden", {})}
    payload = {**complete_answer(artifacts_a), **body, "golden": golden, "capability": capability.slug}
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert db_snapshot() == before


def test_an_oversized_body_is_refused_before_it_is_read(vendor_a, question_a):
    before = db_snapshot()
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", {"summary": "x" * (2 * 1024 * 1024)}, format="json"
    )
    assert response.status_code == 413
    assert response.json()["errors"][0]["field"] == "body"
    assert db_snapshot() == before


def test_questions_say_when_they_are_due_and_filter_by_it(pm, vendor_a, settings):
    settings.QUESTION_DUE_SOON_DAYS = 5
    acme = vendor_a.user.membership.organisation
    today = datetime.date.today()
    for number, offset in ((1, -2), (2, 5), (3, 6), (4, None)):
        make_question(f"V{number:02d}", organisation=acme)
        due = today + datetime.timedelta(days=offset) if offset is not None else None
        Question.objects.filter(number=number).update(due_date=due)  # V01's date was set before it passed
    client = pm.client()
    listed = client.get("/api/v1/questions/").json()["results"]
    assert [(q["code"], q["due_status"]) for q in listed] == [
        ("V01", "overdue"),
        ("V02", "due_soon"),
        ("V03", None),
        ("V04", None),
    ]
    codes = {
        due: [q["code"] for q in client.get(f"/api/v1/questions/?due={due}").json()["results"]]
        for due in ("overdue", "due_soon", "none")
    }
    assert codes == {"overdue": ["V01"], "due_soon": ["V02"], "none": ["V04"]}
    bad = client.get("/api/v1/questions/?due=later")
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (400, "due")
    assert vendor_a.client().get("/api/v1/questions/?due=overdue").json()["count"] == 1


def test_a_hand_set_closed_is_refused_naming_the_deliverables_owed(pm, vendor_a, question_a):
    from tests.factories import make_deliverable

    Question.objects.filter(pk=question_a.pk).update(state="verifying")
    make_deliverable(question_a, "package-batch-4")
    make_deliverable(question_a, "package-batch-16")
    before = db_snapshot()
    response = pm.client().patch("/api/v1/questions/V18/", {"state": "closed"}, format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["field"], error["code"]) == ("state", "deliverables_owed")
    assert "package-batch-4" in error["message"] and "package-batch-16" in error["message"]
    assert db_snapshot() == before


def test_deferring_through_the_api_needs_a_reason(pm, vendor_a, question_a):
    response = pm.client().patch("/api/v1/questions/V18/", {"state": "deferred"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "state_reason"
    response = pm.client().patch(
        "/api/v1/questions/V18/", {"state": "deferred", "state_reason": "after CalRT 0.8"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert (response.json()["state"], response.json()["state_reason"]) == ("deferred", "after CalRT 0.8")


def test_the_api_and_the_question_page_mean_the_same_by_each_filter(pm, question_a, question_b):
    """One selector applies both: free text, a username or "none" for the assignee, an organisation's slug."""
    make_question("V01")
    question_update(actor=pm.user, question=question_b, changes=QuestionChanges(assignee=pm.user))
    page = Client()
    page.force_login(pm.user)
    expected = {
        (("q", "v18"),): ["V18"],
        (("assignee", "pat"),): ["V19"],
        (("assignee", "none"),): ["V01", "V18"],
        (("organisation", "acme"), ("q", "V1")): ["V18"],
    }
    for params, codes in expected.items():
        api = [q["code"] for q in pm.client().get("/api/v1/questions/", dict(params)).json()["results"]]
        listed = re.findall(
            r'<tr id="question-(V[0-9]{2})"', page.get(reverse("question-list"), dict(params)).content.decode()
        )
        assert (api, listed) == (codes, codes), params


def test_owes_lists_every_open_question_still_owing_a_deliverable_whatever_its_state(vendor_a):
    """A vendor's "waiting for us": answered and verifying questions still owe what is not accepted yet."""
    organisation = vendor_a.user.membership.organisation
    for code, state in (("V17", "asked"), ("V18", "verifying"), ("V19", "answered"), ("V20", "deferred")):
        make_question(code, organisation=organisation, state=state)
    make_question("V21", organisation=organisation, state="answered", deliverable=None)
    Question.objects.get(code="V19").deliverables.update(state="accepted", decided_at=timezone.now())
    client = vendor_a.client()
    owing = [q["code"] for q in client.get("/api/v1/questions/?owes=true").json()["results"]]
    assert owing == ["V17", "V18"]
    rest = [q["code"] for q in client.get("/api/v1/questions/?owes=false").json()["results"]]
    assert rest == ["V19", "V20", "V21"]
    assert [q["code"] for q in client.get("/api/v1/questions/?state=asked").json()["results"]] == ["V17"]
    refused = client.get("/api/v1/questions/?owes=maybe")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "owes"
