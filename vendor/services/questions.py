"""Questions as tickets: putting them to an organisation, assigning, prioritising, moving their state."""

import datetime

from django.contrib.auth import get_user_model
from django.db import transaction

from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError
from vendor import states
from vendor.access import may_act_as_pm, user_membership
from vendor.models import Organisation, Question

EDITABLE_FIELDS = ("assignee", "priority", "due_date", "state", "organisation")
PRIORITY_CODES = [code for code, _ in states.PRIORITIES]


def _question_snapshot(question: Question, fields) -> dict:
    values = {}
    for name in fields:
        if name == "assignee":
            values[name] = question.assignee.get_username() if question.assignee else None
        elif name == "organisation":
            values[name] = question.organisation.slug if question.organisation else None
        elif name == "due_date":
            values[name] = question.due_date.isoformat() if question.due_date else None
        else:
            values[name] = getattr(question, name)
    return values


def _clean_due_date(value) -> datetime.date | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        raise DomainError("Give a date, not a date and time.", field="due_date")
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise DomainError("Give the due date as YYYY-MM-DD.", field="due_date")


def _clean_organisation(value) -> Organisation | None:
    if value is None:
        return None
    if not isinstance(value, Organisation) or value.pk is None:
        raise DomainError("Give an organisation.", field="organisation")
    if value.kind != Organisation.VENDOR:
        raise DomainError("Questions are put to vendor organisations only.", field="organisation")
    return value


def _check_assignee(assignee, organisation: Organisation | None) -> None:
    """An assignee belongs to the integration team or to the organisation the question is put to."""
    if assignee is None:
        return
    if not isinstance(assignee, get_user_model()) or assignee.pk is None:
        raise DomainError("Give a user.", field="assignee")
    membership = user_membership(assignee)
    if membership is None:
        raise DomainError(f"User {assignee.get_username()} is not a member of any organisation.", field="assignee")
    if membership.organisation.kind == Organisation.INTEGRATOR:
        return
    if organisation is None or membership.organisation_id != organisation.pk:
        raise DomainError(
            f"User {assignee.get_username()} belongs to another organisation than the one the question is put to.",
            field="assignee",
        )


def _check_transition(question: Question, target: str, organisation: Organisation | None) -> None:
    valid = [code for code, _ in states.QUESTION_STATES]
    if target not in valid:
        raise DomainError(f"Unknown state {target!r}; one of: {', '.join(valid)}.", field="state")
    if not states.can_transition(question.state, target):
        allowed = ", ".join(sorted(states.QUESTION_TRANSITIONS.get(question.state, ()))) or "none"
        raise DomainError(
            f"A question cannot move from {question.state} to {target}; from {question.state}: {allowed}.",
            field="state",
        )
    if target == states.ASKED and organisation is None:
        raise DomainError("Put the question to an organisation before asking it.", field="state")


def _lock(question: Question) -> Question:
    return lock_rows(Question.objects).get(pk=question.pk)


def question_update(*, actor, question: Question, **changes) -> Question:
    """Change a question's assignee, priority, due date, state or organisation.

    Preconditions: `actor` is a PM of the integration team (ForbiddenError otherwise). `state` moves only
    along `vendor.states.QUESTION_TRANSITIONS`; `organisation` is a vendor organisation or None; an
    assignee belongs to the integration team or to the question's organisation. Bad input raises
    DomainError naming the field and changes nothing. One audit row records before and after.
    """
    if not may_act_as_pm(actor):
        raise ForbiddenError("Only a PM may change a question.")
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise DomainError(f"{unknown[0]} cannot be changed here.", field=unknown[0])
    with transaction.atomic():
        locked = _lock(question)
        organisation = locked.organisation
        if "organisation" in changes:
            organisation = _clean_organisation(changes["organisation"])
        cleaned: dict[str, object] = {}
        if "organisation" in changes and (organisation.pk if organisation else None) != locked.organisation_id:
            cleaned["organisation"] = organisation
        if "priority" in changes:
            if changes["priority"] not in PRIORITY_CODES:
                raise DomainError(f"Priority is one of: {', '.join(PRIORITY_CODES)}.", field="priority")
            if changes["priority"] != locked.priority:
                cleaned["priority"] = changes["priority"]
        if "due_date" in changes:
            due_date = _clean_due_date(changes["due_date"])
            if due_date != locked.due_date:
                cleaned["due_date"] = due_date
        if "state" in changes and changes["state"] != locked.state:
            _check_transition(locked, changes["state"], organisation)
            cleaned["state"] = changes["state"]
        assignee = changes.get("assignee", locked.assignee)
        if "assignee" in changes or "organisation" in cleaned:
            _check_assignee(assignee, organisation)
        if "assignee" in changes and (assignee.pk if assignee else None) != locked.assignee_id:
            cleaned["assignee"] = assignee
        if not cleaned:
            return locked
        before = _question_snapshot(locked, cleaned)
        for name, value in cleaned.items():
            setattr(locked, name, value)
        locked.save(update_fields=[*cleaned, "updated_at"])
        audit_record(
            actor=actor, action="question.update", obj=locked, before=before, after=_question_snapshot(locked, cleaned)
        )
    return locked


def question_bulk_assign(*, actor, questions, assignee) -> int:
    """Assign many questions at once; returns how many changed.

    Preconditions as `question_update`: a PM acts, and the assignee may take every one of the questions
    (if one refuses, none changes). One audit row per changed question.
    """
    if not may_act_as_pm(actor):
        raise ForbiddenError("Only a PM may assign questions.")
    ids = sorted({question.pk for question in questions})
    changed = 0
    with transaction.atomic():
        # Lock first, then read with the joins: a locking query must not join a column that may change.
        list(lock_rows(Question.objects).filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))
        locked = list(Question.objects.select_related("organisation", "assignee").filter(pk__in=ids).order_by("pk"))
        for question in locked:
            _check_assignee(assignee, question.organisation)
        for question in locked:
            if (assignee.pk if assignee else None) == question.assignee_id:
                continue
            before = _question_snapshot(question, ["assignee"])
            question.assignee = assignee
            question.save(update_fields=["assignee", "updated_at"])
            audit_record(
                actor=actor,
                action="question.update",
                obj=question,
                before=before,
                after=_question_snapshot(question, ["assignee"]),
            )
            changed += 1
    return changed


def question_state_move(*, actor, question: Question, state: str, reason: str = "") -> Question:
    """Move a question's state on behalf of the system (an answer arrived, a chain passed or failed).

    Preconditions: the move is an edge of `vendor.states.QUESTION_TRANSITIONS` (DomainError otherwise).
    Runs in the caller's transaction when there is one; writes one audit row.
    """
    with transaction.atomic():
        locked = _lock(question)
        if locked.state == state:
            return locked
        _check_transition(locked, state, locked.organisation)
        before = {"state": locked.state}
        locked.state = state
        locked.save(update_fields=["state", "updated_at"])
        audit_record(
            actor=actor,
            action="question.state",
            obj=locked,
            before=before,
            after={"state": state, "reason": reason} if reason else {"state": state},
        )
    return locked
