"""A PM's document review: each checklist item and each of section 13's elements recorded, E3 evidence, the
deliverable decided, no capability moved; through the service, the API and the page."""

import pytest
from django.contrib.auth import get_user_model
from django.utils import translation

from acceptance.inputs import (
    DocumentReviewDraft,
    ElementVerdict,
    ItemCheck,
    element_verdict,
    review_note,
    review_reason,
)
from acceptance.services import answer_submit
from acceptance.services.reviews import document_review
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.models import AuditEntry
from evidence.models import EvidenceItem
from tests.factories import answer_draft, db_snapshot, make_capability, make_deliverable, make_question, make_user
from vendor import states
from vendor.claim import ELEMENTS
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
    answer_submit(actor=engineer, question=question, draft=answer_draft({"summary": "the signed letter is attached"}))
    question.refresh_from_db()
    assert question.state == states.ANSWERED
    return deliverable, capability


def ticks(*values, note=""):
    return [{"ticked": value, "note": note} for value in values]


def draft(items: list[dict], elements: dict, reason: str) -> DocumentReviewDraft:
    """The typed review an edge builds from these entries, the elements in section 13's order."""
    return DocumentReviewDraft(
        items=tuple(ItemCheck(**item) for item in items),
        elements=tuple(ElementVerdict(element, **elements[element]) for element in ELEMENTS if element in elements),
        reason=reason,
    )


# A signed letter carries none of section 13's elements, and none applies to it.
NOT_APPLICABLE = {element: {"verdict": "not_applicable", "reason": "a signed letter"} for element in ELEMENTS}


def test_a_review_where_every_item_holds_accepts_and_closes_the_question(pm, v09):
    deliverable, capability = v09
    review = document_review(
        actor=pm, deliverable=deliverable, draft=draft(ticks(True, True, True), NOT_APPLICABLE, "signed 1 Dec")
    )
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
    review = document_review(
        actor=pm, deliverable=deliverable, draft=draft(items, NOT_APPLICABLE, "ask for the deployment")
    )
    assert not review.accepted
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.REJECTED
    assert "does not hold: The deployment method" in deliverable.reason
    assert deliverable.question.state == states.ANSWERED
    assert "[ ] The deployment method: only a licence server is mentioned" in (
        EvidenceItem.objects.get(deliverable=deliverable).explanation
    )


def test_a_review_with_an_entry_per_item_other_than_the_checklist_s_is_refused_and_changes_nothing(pm, v09):
    deliverable, _capability = v09
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        document_review(actor=pm, deliverable=deliverable, draft=draft(ticks(True, True), NOT_APPLICABLE, "ok"))
    assert error.value.field == "items"
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("parse", "args", "field"),
    [
        (review_note, (2, "x" * 2001), "items.2.note"),
        (review_reason, ("  ",), "reason"),
        (review_reason, ("x" * 5001,), "reason"),
        (element_verdict, ("golden", "", ""), "elements.golden"),
        (element_verdict, ("golden", "absent", ""), "elements.golden.verdict"),
        (element_verdict, ("golden", "present", "x" * 2001), "elements.golden.reason"),
    ],
)
def test_a_page_s_review_fields_are_parsed_once_naming_the_field(parse, args, field):
    with pytest.raises(DomainError) as error:
        parse(*args)
    assert error.value.field == field


def test_the_parse_strips_notes_and_reasons():
    assert review_note(0, "  1 Dec  ") == "1 Dec"
    assert review_reason("  signed  ") == "signed"
    assert element_verdict("golden", "not_applicable", "  a letter ") == ElementVerdict(
        "golden", "not_applicable", "a letter"
    )


def test_only_a_pm_reviews_only_documents_that_were_delivered(pm, v09):
    deliverable, _capability = v09
    engineer = make_user("bob", "acme", "vendor")
    with pytest.raises(ForbiddenError):
        document_review(
            actor=engineer, deliverable=deliverable, draft=draft(ticks(True, True, True), NOT_APPLICABLE, "ok")
        )
    package = make_deliverable(deliverable.question, "package", kind="calbin")
    with pytest.raises(DomainError) as error:
        document_review(actor=pm, deliverable=package, draft=draft([], NOT_APPLICABLE, "ok"))
    assert error.value.field == "deliverable"
    assert error.value.english == (
        "package is a deliverable of kind calbin package: only documents are reviewed by hand."
    )
    with translation.override("zh-hans"):
        assert error.value.message == "package 是“calbin 包”类交付物：只有文档需要人工审阅。"
    unanswered = make_deliverable(deliverable.question, "policy", kind="document", checklist=["Dated"])
    with pytest.raises(ConflictError):
        document_review(actor=pm, deliverable=unanswered, draft=draft(ticks(True), NOT_APPLICABLE, "ok"))
    assert not DocumentReview.objects.exists()


def test_a_review_judging_an_element_not_applicable_without_the_reason_is_refused_naming_it(pm, v09):
    deliverable, _capability = v09
    elements = {**NOT_APPLICABLE, "golden": {"verdict": "not_applicable"}}
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        document_review(actor=pm, deliverable=deliverable, draft=draft(ticks(True, True, True), elements, "ok"))
    assert error.value.field == "elements.golden.reason"
    assert db_snapshot() == before


def test_an_answer_lacking_an_element_that_applies_does_not_close_the_question(pm, v09):
    """The letter's answer carries no version; the reviewer says the version applies, so the review rejects
    the document naming what the answer lacks, however well the checklist holds."""
    deliverable, _capability = v09
    elements = {**NOT_APPLICABLE, "version": {"verdict": "present"}}
    review = document_review(
        actor=pm, deliverable=deliverable, draft=draft(ticks(True, True, True), elements, "all items hold")
    )
    assert not review.accepted
    assert review.elements["version"] == {"verdict": "present", "reason": ""}
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.REJECTED
    assert "lacks version (section 13)" in deliverable.reason
    assert deliverable.question.state == states.ANSWERED
    assert "version: applies, but the answer has none" in EvidenceItem.objects.get(deliverable=deliverable).explanation


def test_an_element_the_answer_holds_is_judged_present(pm, v09):
    deliverable, _capability = v09
    engineer = get_user_model().objects.get(username="ann")
    answer_submit(
        actor=engineer, question=deliverable.question, draft=answer_draft({"summary": "letter v2", "version": "2.0"})
    )
    elements = {**NOT_APPLICABLE, "version": {"verdict": "present"}}
    review = document_review(
        actor=pm, deliverable=deliverable, draft=draft(ticks(True, True, True), elements, "dated 2.0")
    )
    assert review.accepted and review.answer.revision == 2
    deliverable.refresh_from_db()
    assert deliverable.question.state == states.CLOSED


def answer_html(response) -> str:
    page = response.content.decode()
    start = page.index('<article class="answer"')
    return page[start : page.index("</article>", start)]


def test_the_closed_questions_page_shows_its_accepted_answer_complete(pm, v09, client):
    """The answer lacks every element structurally; the accepted review judged each not applicable, so the
    question page and the vendor's home show it complete, each element with the reason, never incomplete."""
    deliverable, _capability = v09
    review_page = f"/questions/V09/deliverables/{deliverable.key}/review"
    client.force_login(pm)
    assert "incomplete" in answer_html(client.get("/questions/V09/"))
    posted = {f"item-{index}": "yes" for index in range(3)} | {"reason": "signed 1 Dec"}
    for element in ELEMENTS:
        posted[f"element-{element}"] = "not_applicable"
        posted[f"element-{element}-reason"] = f"no {element} in a letter"
    refused = client.post(review_page, {**posted, "element-golden-reason": ""})
    assert refused.status_code == 400 and "Say why the golden does not apply" in refused.content.decode()
    assert not DocumentReview.objects.exists()
    assert client.post(review_page, posted).status_code == 302
    deliverable.refresh_from_db()
    assert deliverable.question.state == states.CLOSED
    answer = answer_html(client.get("/questions/V09/"))
    assert "complete" in answer and "incomplete" not in answer and "(missing)" not in answer
    assert "no golden in a letter" in answer
    # The vendor's home page says the same of its latest answer.
    client.force_login(get_user_model().objects.get(username="ann"))
    home = client.get("/vendor/").content.decode()
    row = home[home.index('href="/questions/V09/"') : home.index("</tr>", home.index('href="/questions/V09/"'))]
    assert "complete" in row and "incomplete" not in row


def test_the_review_page_names_each_bad_field_at_once_and_changes_nothing(pm, v09, client):
    """The page's form parses every field before the service is called: a blank reason, an element without a
    verdict and one with an unknown verdict are each named, and nothing is written."""
    deliverable, _capability = v09
    client.force_login(pm)
    posted = {f"item-{index}": "yes" for index in range(3)} | {"reason": "  ", "note-1": "x" * 2001}
    for element in ELEMENTS:
        posted[f"element-{element}"] = "not_applicable"
        posted[f"element-{element}-reason"] = "a letter"
    posted["element-golden"] = ""
    posted["element-version"] = "absent"
    before = db_snapshot()
    refused = client.post(f"/questions/V09/deliverables/{deliverable.key}/review", posted)
    page = refused.content.decode()
    assert refused.status_code == 400
    assert "Give the reason for the decision." in page
    assert "A note is text of at most 2000 characters." in page
    assert "Say whether the answer&#x27;s golden is present or does not apply to this document." in page
    assert "The verdict is one of: present, not_applicable." in page
    assert db_snapshot() == before
