"""Answers name their deliverable; the question's deliverables and the document reviews through the API."""

import pytest

from evidence.models import Capability
from tests.factories import complete_answer, db_snapshot, make_capability, make_deliverable, make_question
from vendor.claim import ELEMENTS
from vendor.models import Answer, Organisation

pytestmark = pytest.mark.django_db


@pytest.fixture
def v18(vendor_a):
    question = make_question("V18", organisation=Organisation.objects.get(slug="acme"), state="asked", deliverable=None)
    for position, batch in enumerate((4, 8, 16), start=1):
        make_deliverable(question, f"package-batch-{batch}", position=position)
    return question


def test_an_answer_to_a_question_owing_several_things_must_name_one(vendor_a, v18):
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", {"summary": "batch 8"}, format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["field"] == "deliverable"
    assert "package-batch-4, package-batch-8, package-batch-16" in error["message"]
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", {"summary": "batch 8", "deliverable": "package-batch-32"}, format="json"
    )
    assert (response.status_code, response.json()["errors"][0]["field"]) == (400, "deliverable")
    assert db_snapshot() == before

    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", {"summary": "batch 8", "deliverable": "package-batch-8"}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["deliverable"] == "package-batch-8"
    assert Answer.objects.get().deliverable.key == "package-batch-8"


def test_an_answer_may_claim_only_a_capability_its_deliverable_proves(vendor_a, question_a, capability, artifacts_a):
    """A batch-8 package proves nothing about batch 16."""
    capability.deliverables.add(question_a.deliverables.get(key="package"))
    batch_16 = Capability.objects.create(slug="decode-batch-16", title="Decode batch 16", status="C3", position=2)
    batch_16.questions.add(question_a)
    batch_16.deliverables.add(make_deliverable(question_a, "package-batch-16"))
    body = {**complete_answer(artifacts_a), "deliverable": "package", "capability": "decode-batch-16"}
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["field"] == "capability"
    assert "package proves decode-batch-8, not decode-batch-16" in error["message"]
    assert db_snapshot() == before


def test_the_question_lists_its_deliverables_with_state_and_progress(pm, vendor_a, v18):
    v18.deliverables.get(key="package-batch-4").capabilities.add(make_capability("decode-batch-4"))
    body = vendor_a.client().get("/api/v1/questions/V18/deliverables/").json()
    assert [d["key"] for d in body] == ["package-batch-4", "package-batch-8", "package-batch-16"]
    assert body[0]["state"] == "owed"
    assert body[0]["progress"] == {"simulator": "none", "hardware": "none"}
    assert body[0]["runs_prove"] == [
        {"target_kind": "simulator", "code": "package", "label": "the vendor's package on the simulator"},
        {"target_kind": "hardware", "code": "board", "label": "the board"},
    ]
    assert body[1]["runs_prove"] == []  # no capability linked: nothing runs for it
    detail = pm.client().get("/api/v1/questions/V18/").json()
    assert [d["state"] for d in detail["deliverables"]] == ["owed", "owed", "owed"]


def test_a_pm_reviews_a_document_through_the_api(pm, vendor_a):
    acme = Organisation.objects.get(slug="acme")
    question = make_question("V60", organisation=acme, state="asked", deliverable=None)
    make_deliverable(question, "version-policy", kind="document", checklist=["Dated", "Release dates"])
    vendor_a.client().post("/api/v1/questions/V60/answers/", {"summary": "policy attached"}, format="json")
    url = "/api/v1/questions/V60/deliverables/version-policy/reviews/"
    elements = {element: {"verdict": "not_applicable", "reason": "a written policy"} for element in ELEMENTS}
    body = {"items": [{"ticked": True}] * 2, "elements": elements, "reason": "mine"}
    refused = vendor_a.client().post(url, body, format="json")
    assert refused.status_code == 403
    bad = pm.client().post(url, {**body, "items": [{"ticked": True}]}, format="json")
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (400, "items")
    response = pm.client().post(
        url,
        {**body, "items": [{"ticked": True, "note": "1 Dec"}, {"ticked": False}], "reason": "no dates"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    review = response.json()
    assert (review["accepted"], review["reviewer"], review["items"][1]["item"]) == (False, "pat", "Release dates")
    assert review["elements"]["golden"] == {"verdict": "not_applicable", "reason": "a written policy"}
    listed = vendor_a.client().get("/api/v1/questions/V60/deliverables/").json()[0]
    assert listed["state"] == "rejected" and "Release dates" in listed["reason"]
    assert len(listed["reviews"]) == 1


@pytest.mark.parametrize(
    ("elements", "field"),
    [
        # An element without a verdict is refused naming it.
        ({element: {"verdict": "present"} for element in ELEMENTS if element != "golden"}, "elements.golden"),
        # Not applicable needs the reason why.
        ({element: {"verdict": "not_applicable"} for element in ELEMENTS}, "elements.version.reason"),
        (
            {**{element: {"verdict": "present"} for element in ELEMENTS}, "golden": {"verdict": "maybe"}},
            "elements.golden.verdict",
        ),
    ],
)
def test_a_document_review_without_a_verdict_on_each_element_is_refused_naming_it(pm, vendor_a, elements, field):
    acme = Organisation.objects.get(slug="acme")
    question = make_question("V60", organisation=acme, state="asked", deliverable=None)
    make_deliverable(question, "version-policy", kind="document", checklist=["Dated"])
    vendor_a.client().post("/api/v1/questions/V60/answers/", {"summary": "policy attached"}, format="json")
    before = db_snapshot()
    response = pm.client().post(
        "/api/v1/questions/V60/deliverables/version-policy/reviews/",
        {"items": [{"ticked": True}], "elements": elements, "reason": "dated"},
        format="json",
    )
    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == [field]
    assert db_snapshot() == before
