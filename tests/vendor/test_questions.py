import datetime

import pytest

from calculet.errors import DomainError, ForbiddenError
from calculet.models import AuditEntry
from tests.vendor.fixtures import db_snapshot, make_question
from vendor.models import Organisation
from vendor.services.questions import question_bulk_assign, question_state_move, question_update


def test_pm_puts_a_question_to_a_vendor_and_assigns_it(pm, vendor_a):
    question = make_question("V18")
    acme = Organisation.objects.get(slug="acme")

    updated = question_update(
        actor=pm.user,
        question=question,
        organisation=acme,
        assignee=vendor_a.user,
        priority="p0",
        due_date="2026-12-01",
        state="asked",
    )

    question.refresh_from_db()
    assert (question.organisation, question.assignee, question.priority, question.state) == (
        acme,
        vendor_a.user,
        "p0",
        "asked",
    )
    assert question.due_date == datetime.date(2026, 12, 1)
    assert updated.pk == question.pk
    entry = AuditEntry.objects.filter(action="question.update").get()
    assert entry.before == {"organisation": None, "assignee": None, "priority": "p2", "due_date": None, "state": "new"}
    assert entry.after == {
        "organisation": "acme",
        "assignee": "alice",
        "priority": "p0",
        "due_date": "2026-12-01",
        "state": "asked",
    }


def test_an_update_that_changes_nothing_writes_no_audit_row(pm):
    question = make_question("V18")
    question_update(actor=pm.user, question=question, priority="p2")
    assert not AuditEntry.objects.filter(action="question.update").exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"state": "closed"}, "state"),
        ({"state": "nonsense"}, "state"),
        ({"state": "asked"}, "state"),  # not put to any organisation yet
        ({"priority": "urgent"}, "priority"),
        ({"due_date": "next tuesday"}, "due_date"),
        ({"code": "V99"}, "code"),
    ],
)
def test_bad_changes_name_the_field_and_change_nothing(pm, changes, field):
    question = make_question("V18")
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, **changes)
    assert error.value.field == field
    assert db_snapshot() == before


def test_a_question_is_put_to_vendor_organisations_only(pm):
    question = make_question("V18")
    team = Organisation.objects.get(slug="team")
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, organisation=team)
    assert error.value.field == "organisation"


def test_the_assignee_belongs_to_the_team_or_the_questions_organisation(pm, vendor_a, vendor_b):
    question = make_question("V18", organisation=vendor_a.user.membership.organisation)
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question, assignee=vendor_b.user)
    assert error.value.field == "assignee"
    question_update(actor=pm.user, question=question, assignee=pm.user)
    question_update(actor=pm.user, question=question, assignee=vendor_a.user)
    question.refresh_from_db()
    assert question.assignee == vendor_a.user


@pytest.mark.parametrize("role", ["viewer", "vendor"])
def test_only_a_pm_changes_questions(pm, viewer, vendor_a, role):
    actor = {"viewer": viewer, "vendor": vendor_a}[role].user
    question = make_question("V18", organisation=vendor_a.user.membership.organisation)
    with pytest.raises(ForbiddenError):
        question_update(actor=actor, question=question, priority="p0")
    with pytest.raises(ForbiddenError):
        question_bulk_assign(actor=actor, questions=[question], assignee=None)
    question.refresh_from_db()
    assert question.priority == "p2"


def test_bulk_assign_changes_all_or_none(pm, vendor_a):
    acme = vendor_a.user.membership.organisation
    asked = [make_question(f"V{n}", organisation=acme) for n in (18, 19, 20)]
    assert question_bulk_assign(actor=pm.user, questions=asked, assignee=pm.user) == 3
    assert question_bulk_assign(actor=pm.user, questions=asked, assignee=pm.user) == 0
    assert AuditEntry.objects.filter(action="question.update").count() == 3

    unasked = make_question("V21")  # put to no organisation: a vendor engineer may not take it
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        question_bulk_assign(actor=pm.user, questions=[*asked, unasked], assignee=vendor_a.user)
    assert error.value.field == "assignee"
    assert db_snapshot() == before


def test_state_moves_follow_the_transition_table(pm, vendor_a):
    question = make_question("V18", organisation=vendor_a.user.membership.organisation, state="asked")
    question_state_move(actor=None, question=question, state="answered", reason="answer r1")
    with pytest.raises(DomainError):
        question_state_move(actor=None, question=question, state="new")
    question.refresh_from_db()
    assert question.state == "answered"
