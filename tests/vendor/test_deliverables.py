"""The close rule: a question closes only when every one of its deliverables is accepted, whoever asks."""

import pytest

from calculet.actors import SYSTEM
from calculet.errors import DomainError, ForbiddenError
from calculet.models import AuditEntry
from tests.factories import db_snapshot, make_deliverable, make_question
from vendor import states
from vendor.inputs import QuestionChanges
from vendor.models import Deliverable, Organisation
from vendor.selectors import deliverables_owed
from vendor.services.deliverables import deliverable_accept, deliverable_reject
from vendor.services.questions import question_bulk_update, question_state_move, question_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def v18(vendor_a):
    """V18 being verified, owing a package at decode batch 4, 8 and 16."""
    question = make_question(
        "V18", organisation=Organisation.objects.get(slug="acme"), state=states.VERIFYING, deliverable=None
    )
    for position, batch in enumerate((4, 8, 16), start=1):
        make_deliverable(question, f"package-batch-{batch}", position=position)
    return question


def test_a_pm_cannot_close_a_question_whose_deliverables_are_owed(pm, v18):
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=v18, changes=QuestionChanges(state=states.CLOSED))
    assert error.value.field == "state"
    assert error.value.code == "deliverables_owed"
    for key in ("package-batch-4", "package-batch-8", "package-batch-16"):
        assert key in error.value.message
    assert db_snapshot() == before


def test_a_question_without_deliverables_cannot_be_closed_by_anyone(pm):
    question = make_question(
        "V20", organisation=Organisation.objects.create(slug="v", name="V", kind="vendor"), deliverable=None
    )
    question.state = states.VERIFYING
    question.save()
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, changes=QuestionChanges(state=states.CLOSED))
    assert "no deliverable" in error.value.message
    with pytest.raises(DomainError):
        question_state_move(actor=SYSTEM, question=question, state=states.CLOSED)
    question.refresh_from_db()
    assert question.state == states.VERIFYING


def test_the_system_cannot_close_it_either(v18):
    with pytest.raises(DomainError) as error:
        question_state_move(actor=SYSTEM, question=v18, state=states.CLOSED)
    assert "package-batch-4" in error.value.message
    v18.refresh_from_db()
    assert v18.state == states.VERIFYING


def test_bulk_edit_refuses_the_whole_change_naming_the_question(pm, v18):
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_bulk_update(actor=pm.user, questions=[v18], changes=QuestionChanges(state=states.CLOSED))
    assert error.value.message.startswith("V18: ")
    assert "package-batch-16" in error.value.message
    assert db_snapshot() == before


def test_accepting_batch_8_leaves_4_and_16_owed(pm, v18):
    batch_8 = v18.deliverables.get(key="package-batch-8")
    deliverable_accept(batch_8, actor=SYSTEM, reason="every stage passed on the simulator")
    assert [d.key for d in deliverables_owed(v18)] == ["package-batch-4", "package-batch-16"]
    v18.refresh_from_db()
    assert v18.state == states.VERIFYING
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=v18, changes=QuestionChanges(state=states.CLOSED))
    assert "package-batch-4" in error.value.message and "package-batch-16" in error.value.message
    assert "package-batch-8" not in error.value.message


def test_accepting_the_last_deliverable_closes_the_question_audited(pm, v18):
    for deliverable in v18.deliverables.all():
        deliverable_accept(deliverable, actor=pm.user, reason="checked")
    v18.refresh_from_db()
    assert v18.state == states.CLOSED
    accepted = AuditEntry.objects.filter(action="deliverable.accept")
    assert accepted.count() == 3
    close = AuditEntry.objects.get(action="question.state", object_id=str(v18.pk))
    assert close.after == {"state": "closed", "reason": "every deliverable is accepted"}
    assert close.actor == pm.user


def test_rejecting_a_deliverable_of_a_closed_question_opens_it_again(pm, v18):
    for deliverable in v18.deliverables.all():
        deliverable_accept(deliverable, actor=SYSTEM, reason="passed")
    batch_16 = v18.deliverables.get(key="package-batch-16")
    rejected = deliverable_reject(batch_16, actor=SYSTEM, reason="the soak stage failed on CalRT 0.8.0")
    assert (rejected.state, rejected.reason) == (Deliverable.REJECTED, "the soak stage failed on CalRT 0.8.0")
    assert rejected.decided_at is not None and rejected.decided_by is None
    v18.refresh_from_db()
    assert v18.state == states.ASKED
    assert [d.key for d in deliverables_owed(v18)] == ["package-batch-16"]


def test_a_decision_needs_a_pm_or_the_system_and_a_reason(vendor_a, viewer, v18):
    deliverable = v18.deliverables.first()
    before = db_snapshot()
    with pytest.raises(ForbiddenError):
        deliverable_accept(deliverable, actor=vendor_a.user, reason="looks fine to me")
    with pytest.raises(ForbiddenError):
        deliverable_accept(deliverable, actor=viewer.user, reason="looks fine")
    with pytest.raises(DomainError) as error:
        deliverable_reject(deliverable, actor=SYSTEM, reason="  ")
    assert error.value.field == "reason"
    assert db_snapshot() == before


@pytest.mark.parametrize("state", [states.DEFERRED, states.WONT_FIX])
def test_deferred_and_wont_fix_need_a_reason(pm, v18, state):
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=v18, changes=QuestionChanges(state=state))
    assert error.value.field == "state_reason"
    assert db_snapshot() == before
    question = question_update(
        actor=pm.user, question=v18, changes=QuestionChanges(state=state, state_reason="batch 16 is not planned")
    )
    assert (question.state, question.state_reason) == (state, "batch 16 is not planned")
    entry = AuditEntry.objects.filter(action="question.update").latest("id")
    assert entry.after == {"state": state, "state_reason": "batch 16 is not planned"}
    # Moving on clears the reason: it explained the state it was given for.
    question = question_update(actor=pm.user, question=question, changes=QuestionChanges(state=states.ASKED))
    assert (question.state, question.state_reason) == (states.ASKED, "")


@pytest.fixture
def v45(vendor_a):
    """V45 being verified: the calls in a named SDK version, or the erratum removing them, with a third
    deliverable that is no alternative of theirs."""
    question = make_question(
        "V45", organisation=Organisation.objects.get(slug="acme"), state=states.VERIFYING, deliverable=None
    )
    make_deliverable(question, "relocation-api", kind="sdk", position=1, either="relocation")
    make_deliverable(question, "relocation-erratum", kind="document", position=2, either="relocation")
    make_deliverable(question, "other", kind="document", position=3)
    return question


@pytest.mark.parametrize("closing", ["relocation-api", "relocation-erratum"])
def test_one_of_two_alternatives_accepted_is_enough_to_close(v45, closing):
    deliverable_accept(v45.deliverables.get(key="other"), actor=SYSTEM, reason="reviewed")
    assert [d.key for d in deliverables_owed(v45)] == ["relocation-api", "relocation-erratum"]
    deliverable_accept(v45.deliverables.get(key=closing), actor=SYSTEM, reason="checked")
    assert deliverables_owed(v45) == []
    v45.refresh_from_db()
    assert v45.state == states.CLOSED


def test_an_alternative_accepted_does_not_stand_for_a_deliverable_outside_its_group(v45):
    deliverable_accept(v45.deliverables.get(key="relocation-erratum"), actor=SYSTEM, reason="reviewed")
    assert [d.key for d in deliverables_owed(v45)] == ["other"]
    v45.refresh_from_db()
    assert v45.state == states.VERIFYING
    rejected = deliverable_reject(v45.deliverables.get(key="relocation-api"), actor=SYSTEM, reason="no such call")
    assert rejected.state == Deliverable.REJECTED
    assert [d.key for d in deliverables_owed(v45)] == ["other"]  # the erratum still answers for the SDK


def test_rejecting_an_alternative_of_the_one_that_closed_the_question_leaves_it_closed(v45):
    deliverable_accept(v45.deliverables.get(key="other"), actor=SYSTEM, reason="reviewed")
    deliverable_accept(v45.deliverables.get(key="relocation-erratum"), actor=SYSTEM, reason="reviewed")
    deliverable_reject(v45.deliverables.get(key="relocation-api"), actor=SYSTEM, reason="no such call")
    v45.refresh_from_db()
    assert v45.state == states.CLOSED
    deliverable_reject(v45.deliverables.get(key="relocation-erratum"), actor=SYSTEM, reason="withdrawn")
    v45.refresh_from_db()
    assert v45.state == states.ASKED
