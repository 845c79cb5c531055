"""A PM's document review: each checklist item recorded, E3 evidence, the deliverable decided, no capability
moved; through the service, the API and the page."""

import pytest
from django.utils import translation

from acceptance.services import answer_submit
from acceptance.services.reviews import document_review
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.models import AuditEntry
from evidence.models import EvidenceItem
from tests.factories import db_snapshot, make_capability, make_deliverable, make_question, make_user
from vendor import states
from vendor.models import Deliverable, DocumentReview, Organisation

pytestmark = pytest.mark.django_db

CHECKLIST = ["Written authorisation to run the compiler in our CI", "The deployment method", "Limits: hosts, seats"]


@pytest.fixture
def pm(db):
    return make_user("lead", "team", "pm")


@pytest.fixture
def v09(db):
    engineer = make_user("ann", "acme", "vendor")
    acme = Organisation.objects.get(slug="acme")
    question = make_question("V09", organisation=acme, state="asked", deliverable=None)
    capability = make_capability("reproducible-compile", status="C3", questions=[question])
    deliverable = make_deliverable(question, "ci-licence", kind="document", checklist=CHECKLIST)
    answer_submit(actor=engineer, question=question, data={"summary": "the signed letter is attached"})
    question.refresh_from_db()
    assert question.state == states.ANSWERED
    return deliverable, capability


def ticks(*values, note=""):
    return [{"ticked": value, "note": note} for value in values]


def test_a_review_where_every_item_holds_accepts_and_closes_the_question(pm, v09):
    deliverable, capability = v09
    review = document_review(actor=pm, deliverable=deliverable, items=ticks(True, True, True), reason="signed 1 Dec")
    assert review.accepted and review.reviewer == pm and review.created_at
    assert [entry["item"] for entry in review.items] == CHECKLIST
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.ACCEPTED and deliverable.decided_by == pm
    assert deliverable.question.state == states.CLOSED
    item = EvidenceItem.objects.get(deliverable=deliverable)
    assert (item.origin, item.grade_text) == ("review", "E3")
    assert "[x] The deployment method" in item.explanation
    # A document never moves a capability, nor is it evidence a capability rests on.
    capability.refresh_from_db()
    assert capability.status == "C3" and not capability.evidence.exists()
    assert AuditEntry.objects.filter(action="document.review").count() == 1


def test_a_review_with_an_item_that_does_not_hold_rejects_naming_it(pm, v09):
    deliverable, _capability = v09
    items = [
        {"ticked": True, "note": ""},
        {"ticked": False, "note": "only a licence server is mentioned"},
        {"ticked": True, "note": ""},
    ]
    review = document_review(actor=pm, deliverable=deliverable, items=items, reason="ask for the deployment")
    assert not review.accepted
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.REJECTED
    assert "does not hold: The deployment method" in deliverable.reason
    assert deliverable.question.state == states.ANSWERED
    assert "[ ] The deployment method: only a licence server is mentioned" in (
        EvidenceItem.objects.get(deliverable=deliverable).explanation
    )


@pytest.mark.parametrize(
    ("items", "reason", "field"),
    [
        (ticks(True, True), "ok", "items"),
        (ticks(True, True, "yes"), "ok", "items.2.ticked"),
        ([{"ticked": True}, {"ticked": True}, {"ticked": True, "colour": "red"}], "ok", "items.2.colour"),
        (ticks(True, True, True), "  ", "reason"),
    ],
)
def test_bad_reviews_name_the_field_and_change_nothing(pm, v09, items, reason, field):
    deliverable, _capability = v09
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        document_review(actor=pm, deliverable=deliverable, items=items, reason=reason)
    assert error.value.field == field
    assert db_snapshot() == before


def test_only_a_pm_reviews_only_documents_that_were_delivered(pm, v09):
    deliverable, _capability = v09
    engineer = make_user("bob", "acme", "vendor")
    with pytest.raises(ForbiddenError):
        document_review(actor=engineer, deliverable=deliverable, items=ticks(True, True, True), reason="ok")
    package = make_deliverable(deliverable.question, "package", kind="calbin")
    with pytest.raises(DomainError) as error:
        document_review(actor=pm, deliverable=package, items=[], reason="ok")
    assert error.value.field == "deliverable"
    assert error.value.english == (
        "package is a deliverable of kind calbin package: only documents are reviewed by hand."
    )
    with translation.override("zh-hans"):
        assert error.value.message == "package 是“calbin 包”类交付物：只有文档需要人工审阅。"
    unanswered = make_deliverable(deliverable.question, "policy", kind="document", checklist=["Dated"])
    with pytest.raises(ConflictError):
        document_review(actor=pm, deliverable=unanswered, items=ticks(True), reason="ok")
    assert not DocumentReview.objects.exists()
