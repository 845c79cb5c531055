import datetime

import pytest

from calculet.actors import SYSTEM
from calculet.errors import DomainError, ForbiddenError
from calculet.models import AuditEntry
from tests.factories import db_snapshot, make_question
from vendor.inputs import QuestionChanges
from vendor.models import Organisation
from vendor.services.questions import (
    question_bulk_preview,
    question_bulk_update,
    question_state_move,
    question_update,
)

IN_A_MONTH = datetime.date.today() + datetime.timedelta(days=30)


def test_pm_puts_a_question_to_a_vendor_and_assigns_it(pm, vendor_a):
    question = make_question("V18")
    acme = Organisation.objects.get(slug="acme")

    updated = question_update(
        actor=pm.user,
        question=question,
        changes=QuestionChanges(
            organisation=acme, assignee=vendor_a.user, priority="p0", due_date=IN_A_MONTH, state="asked"
        ),
    )

    question.refresh_from_db()
    assert (question.organisation, question.assignee, question.priority, question.state) == (
        acme,
        vendor_a.user,
        "p0",
        "asked",
    )
    assert question.due_date == IN_A_MONTH
    assert updated.pk == question.pk
    entry = AuditEntry.objects.filter(action="question.update").get()
    assert entry.before == {"organisation": None, "assignee": None, "priority": "p2", "due_date": None, "state": "new"}
    assert entry.after == {
        "organisation": "acme",
        "assignee": "alice",
        "priority": "p0",
        "due_date": IN_A_MONTH.isoformat(),
        "state": "asked",
    }


def test_an_update_that_changes_nothing_writes_no_audit_row(pm):
    question = make_question("V18")
    question_update(actor=pm.user, question=question, changes=QuestionChanges(priority="p2"))
    assert not AuditEntry.objects.filter(action="question.update").exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"state": "closed"}, "state"),
        ({"state": "nonsense"}, "state"),
        ({"state": "asked"}, "state"),  # not put to any organisation yet
        ({"priority": "urgent"}, "priority"),
        ({"due_date": datetime.date(1900, 1, 1)}, "due_date"),
        ({"due_date": datetime.date.today() - datetime.timedelta(days=1)}, "due_date"),
    ],
)
def test_bad_changes_name_the_field_and_change_nothing(pm, changes, field):
    question = make_question("V18")
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, changes=QuestionChanges(**changes))
    assert error.value.field == field
    assert db_snapshot() == before


def test_a_question_is_put_to_vendor_organisations_only(pm):
    question = make_question("V18")
    team = Organisation.objects.get(slug="team")
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, changes=QuestionChanges(organisation=team))
    assert error.value.field == "organisation"


def test_the_assignee_belongs_to_the_team_or_the_questions_organisation(pm, vendor_a, vendor_b):
    question = make_question("V18", organisation=vendor_a.user.membership.organisation)
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, changes=QuestionChanges(assignee=vendor_b.user))
    assert error.value.field == "assignee"
    question_update(actor=pm.user, question=question, changes=QuestionChanges(assignee=pm.user))
    question_update(actor=pm.user, question=question, changes=QuestionChanges(assignee=vendor_a.user))
    question.refresh_from_db()
    assert question.assignee == vendor_a.user


@pytest.mark.parametrize("role", ["viewer", "vendor"])
def test_only_a_pm_changes_questions(pm, viewer, vendor_a, role):
    actor = {"viewer": viewer, "vendor": vendor_a}[role].user
    question = make_question("V18", organisation=vendor_a.user.membership.organisation)
    with pytest.raises(ForbiddenError):
        question_update(actor=actor, question=question, changes=QuestionChanges(priority="p0"))
    with pytest.raises(ForbiddenError):
        question_bulk_update(actor=actor, questions=[question], changes=QuestionChanges(assignee=None))
    with pytest.raises(ForbiddenError):
        question_bulk_preview(actor=actor, questions=[question], changes=QuestionChanges(assignee=None))
    question.refresh_from_db()
    assert question.priority == "p2"


def test_bulk_update_changes_all_or_none(pm, vendor_a):
    acme = vendor_a.user.membership.organisation
    asked = [make_question(f"V{n}", organisation=acme) for n in (18, 19, 20)]
    changes = {"assignee": pm.user, "priority": "p0", "due_date": IN_A_MONTH}
    assert question_bulk_update(actor=pm.user, questions=asked, changes=QuestionChanges(**changes)) == 3
    assert question_bulk_update(actor=pm.user, questions=asked, changes=QuestionChanges(**changes)) == 0
    entries = AuditEntry.objects.filter(action="question.update")
    assert entries.count() == 3
    assert entries.first().after == {"assignee": "pat", "priority": "p0", "due_date": IN_A_MONTH.isoformat()}

    unasked = make_question("V21")  # put to no organisation: a vendor engineer may not take it
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_bulk_update(
            actor=pm.user, questions=[*asked, unasked], changes=QuestionChanges(assignee=vendor_a.user)
        )
    assert error.value.field == "assignee"
    assert error.value.message.startswith("V21: ")
    assert db_snapshot() == before


def test_bulk_update_moves_states_by_the_transition_table(pm, vendor_a):
    acme = vendor_a.user.membership.organisation
    asked = make_question("V18", organisation=acme)
    new = make_question("V19", state="new")
    assert (
        question_bulk_update(
            actor=pm.user, questions=[asked], changes=QuestionChanges(state="deferred", state_reason="waiting for 0.8")
        )
        == 1
    )
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_bulk_update(actor=pm.user, questions=[asked, new], changes=QuestionChanges(state="asked"))
    assert (error.value.field, error.value.message) == (
        "state",
        "V19: Put the question to an organisation before asking it.",
    )
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"priority": "urgent"}, "priority"),
        ({"due_date": datetime.date(1900, 1, 1)}, "due_date"),
        ({"organisation": None}, "organisation"),
        ({}, None),
    ],
)
def test_bad_bulk_changes_name_the_field_and_change_nothing(pm, vendor_a, changes, field):
    questions = [make_question("V18"), make_question("V19")]
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_bulk_update(actor=pm.user, questions=questions, changes=QuestionChanges(**changes))
    assert error.value.field == field
    assert db_snapshot() == before


def test_bulk_preview_says_what_would_change_and_writes_nothing(pm, vendor_a):
    acme = vendor_a.user.membership.organisation
    asked = make_question("V18", organisation=acme)
    unasked = make_question("V19")
    before = db_snapshot()
    rows = question_bulk_preview(
        actor=pm.user, questions=[unasked, asked], changes=QuestionChanges(assignee=vendor_a.user)
    )
    assert db_snapshot() == before
    assert [row.question.code for row in rows] == ["V18", "V19"]
    assert (rows[0].before, rows[0].after, rows[0].error) == ({"assignee": None}, {"assignee": "alice"}, None)
    assert rows[1].error.field == "assignee" and rows[1].after == {}


def test_a_past_due_date_stays_when_other_fields_change(pm):
    question = make_question("V18")
    question.due_date = datetime.date(2020, 1, 1)  # set before it passed
    question.save(update_fields=["due_date"])
    question_update(
        actor=pm.user, question=question, changes=QuestionChanges(priority="p1", due_date=datetime.date(2020, 1, 1))
    )
    question.refresh_from_db()
    assert (question.priority, question.due_date) == ("p1", datetime.date(2020, 1, 1))


def test_state_moves_follow_the_transition_table(pm, vendor_a):
    question = make_question("V18", organisation=vendor_a.user.membership.organisation, state="asked")
    question_state_move(actor=SYSTEM, question=question, state="answered", reason="answer r1")
    with pytest.raises(DomainError):
        question_state_move(actor=SYSTEM, question=question, state="new")
    question.refresh_from_db()
    assert question.state == "answered"
