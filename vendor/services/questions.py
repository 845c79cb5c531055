"""Questions as tickets: putting them to an organisation, assigning, prioritising, moving their state."""

import datetime
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from calculet.actors import Actor
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError
from calculet.sentences import Labelled, english, sentence
from vendor import events, states
from vendor.access import may_act_as_pm, user_membership
from vendor.inputs import KEEP, QuestionChanges
from vendor.models import Deliverable, Organisation, Question
from vendor.selectors import deliverables_owed
from vendor.services.notifications import notify_on_commit

PRIORITY_CODES = [code for code, _ in states.PRIORITIES]
# The pages' field says so too; longer is refused, never cut.
STATE_REASON_MAX_CHARS = 2000


def _snapshot_value(name: str, value):
    if name == "assignee":
        return value.get_username() if value else None
    if name == "organisation":
        return value.slug if value else None
    if name == "due_date":
        return value.isoformat() if value else None
    return value


def _question_snapshot(question: Question, fields) -> dict:
    return {name: _snapshot_value(name, getattr(question, name)) for name in fields}


def _check_due_date(due_date: datetime.date | None) -> None:
    """A new due date lies today or later; one already set stays as it is when it passes."""
    if due_date is not None and due_date < timezone.localdate():
        raise DomainError(
            gettext_noop("The due date %(date)s is in the past; give today or a later date."),
            field="due_date",
            params={"date": due_date.isoformat()},
        )


def _clean_organisation(value: Organisation | None) -> Organisation | None:
    if value is None:
        return None
    if value.kind != Organisation.VENDOR:
        raise DomainError(gettext_noop("Questions are put to vendor organisations only."), field="organisation")
    return value


def _check_assignee(assignee: User | None, organisation: Organisation | None) -> None:
    """An assignee belongs to the integration team or to the organisation the question is put to."""
    if assignee is None:
        return
    membership = user_membership(assignee)
    if membership is None:
        raise DomainError(
            gettext_noop("User %(user)s is not a member of any organisation."),
            field="assignee",
            params={"user": assignee.get_username()},
        )
    if membership.organisation.kind == Organisation.INTEGRATOR:
        return
    if organisation is None or membership.organisation_id != organisation.pk:
        raise DomainError(
            gettext_noop("User %(user)s belongs to another organisation than the one the question is put to."),
            field="assignee",
            params={"user": assignee.get_username()},
        )


def _check_transition(question: Question, target: str, organisation: Organisation | None) -> None:
    valid = [code for code, _ in states.QUESTION_STATES]
    if target not in valid:
        raise DomainError(
            gettext_noop("Unknown state %(state)r; one of: %(states)s."),
            field="state",
            params={"state": target, "states": list(valid)},
        )
    if not states.can_transition(question.state, target):
        allowed = sorted(states.QUESTION_TRANSITIONS.get(question.state, ()))
        params = {"from": Labelled("state", question.state), "to": Labelled("state", target)}
        if not allowed:
            raise DomainError(
                gettext_noop("A question cannot move from %(from)s to %(to)s; from %(from)s it does not move."),
                field="state",
                params=params,
            )
        raise DomainError(
            gettext_noop("A question cannot move from %(from)s to %(to)s; from %(from)s: %(allowed)s."),
            field="state",
            params={**params, "allowed": Labelled("state", allowed)},
        )
    if target == states.ASKED and organisation is None:
        raise DomainError(gettext_noop("Put the question to an organisation before asking it."), field="state")
    if target == states.CLOSED:
        _check_nothing_owed(question)


def _check_nothing_owed(question: Question) -> None:
    """A question closes only when every deliverable is accepted: refused, naming what is still owed."""
    if not question.deliverables.exists():
        raise DomainError(
            gettext_noop(
                "%(question)s cannot be closed: it has no deliverable to accept. Defer it or mark it won't fix, "
                "with a reason."
            ),
            field="state",
            code="deliverables_owed",
            params={"question": question.code},
        )
    owed = deliverables_owed(question)
    if owed:
        raise DomainError(
            gettext_noop(
                "%(question)s cannot be closed while %(count)s of its deliverables are not accepted: "
                "%(deliverables)s. A question closes when its last deliverable is accepted; otherwise defer it or "
                "mark it won't fix, with a reason."
            ),
            field="state",
            code="deliverables_owed",
            params={"question": question.code, "count": len(owed), "deliverables": [d.key for d in owed]},
        )


def _check_state_reason(target: str, reason: str) -> None:
    _check_state_reason_length(reason)
    if target in states.STATES_NEEDING_REASON and not reason.strip():
        raise DomainError(
            gettext_noop("Give the reason the question is set to %(state)s."),
            field="state_reason",
            params={"state": Labelled("state", target)},
        )


def _check_state_reason_length(reason: str) -> None:
    if len(reason.strip()) > STATE_REASON_MAX_CHARS:
        raise DomainError(
            gettext_noop("The reason is at most %(limit)s characters."),
            field="state_reason",
            params={"limit": STATE_REASON_MAX_CHARS},
        )


def _lock(question: Question) -> Question:
    return lock_rows(Question.objects).get(pk=question.pk)


def _cleaned_changes(question: Question, given: QuestionChanges) -> dict:
    """The changes that differ from the question as stored, checked against every rule; DomainError naming
    the field for the first one refused."""
    changes = given.given()
    organisation = question.organisation
    if "organisation" in changes:
        organisation = _clean_organisation(changes["organisation"])
    cleaned: dict[str, object] = {}
    if "organisation" in changes and (organisation.pk if organisation else None) != question.organisation_id:
        cleaned["organisation"] = organisation
    if "priority" in changes:
        if changes["priority"] not in PRIORITY_CODES:
            raise DomainError(
                gettext_noop("Priority is one of: %(priorities)s."),
                field="priority",
                params={"priorities": Labelled("priority", list(PRIORITY_CODES))},
            )
        if changes["priority"] != question.priority:
            cleaned["priority"] = changes["priority"]
    if "due_date" in changes:
        due_date = changes["due_date"]
        if due_date != question.due_date:
            _check_due_date(due_date)
            cleaned["due_date"] = due_date
    if "state" in changes and changes["state"] != question.state:
        _check_transition(question, changes["state"], organisation)
        reason = str(changes.get("state_reason") or "")
        _check_state_reason(changes["state"], reason)
        cleaned["state"] = changes["state"]
        reason = reason.strip() if changes["state"] in states.STATES_NEEDING_REASON else ""
        if reason != question.state_reason:
            cleaned["state_reason"] = reason
    elif (
        # A new reason for the state the question is already in.
        question.state in states.STATES_NEEDING_REASON
        and str(changes.get("state_reason") or "").strip() not in ("", question.state_reason)
    ):
        _check_state_reason_length(str(changes["state_reason"]))
        cleaned["state_reason"] = str(changes["state_reason"]).strip()
    assignee = changes.get("assignee", question.assignee)
    if "assignee" in changes or "organisation" in cleaned:
        _check_assignee(assignee, organisation)
    if "assignee" in changes and (assignee.pk if assignee else None) != question.assignee_id:
        cleaned["assignee"] = assignee
    return cleaned


def _deliverables_reset(actor: Actor, question: Question, previous: str | None) -> None:
    """What the organisation a question is now put to owes starts afresh: every decided deliverable goes back
    to owed, one audit row each. The reason is cleared, since it spoke of the previous organisation's answers.
    Precondition: this transaction holds the question's row lock (the lock order: question, then deliverable)."""
    now_put_to = question.organisation.slug if question.organisation else None
    for deliverable in lock_rows(Deliverable.objects).filter(question=question).exclude(state=Deliverable.OWED):
        before = {"state": deliverable.state, "reason": deliverable.reason}
        why = sentence(
            gettext_noop(
                "the question was reassigned from %(previous)s to %(now)s: the decision was about %(previous)s's "
                "answers"
            ),
            previous=previous,
            now=now_put_to,
        )
        deliverable.state, deliverable.reason = Deliverable.OWED, ""
        deliverable.decided_at, deliverable.decided_by = None, None
        deliverable.save(update_fields=["state", "reason", "decided_at", "decided_by"])
        audit_record(
            actor=actor,
            action="deliverable.reset",
            obj=deliverable,
            before=before,
            after={
                "state": Deliverable.OWED,
                "question": question.code,
                "key": deliverable.key,
                "reason": english(why),
                "reason_sentence": why,  # the audit log says the reason in its reader's language
            },
        )


def _apply(actor: Actor, question: Question, cleaned: dict) -> None:
    reassigned = "organisation" in cleaned
    if reassigned and question.state == states.CLOSED and "state" not in cleaned:
        cleaned["state"] = states.ASKED  # its deliverables are owed again, by the new organisation
    before = _question_snapshot(question, cleaned)
    for name, value in cleaned.items():
        setattr(question, name, value)
    question.save(update_fields=[*cleaned, "updated_at"])
    audit_record(
        actor=actor, action="question.update", obj=question, before=before, after=_question_snapshot(question, cleaned)
    )
    if reassigned:
        _deliverables_reset(actor, question, before["organisation"])
    if "assignee" in cleaned and (assignee := question.assignee) is not None:
        notify_on_commit(
            events.ASSIGNED,
            actor=actor,
            organisation_id=question.organisation_id,
            question_id=question.pk,
            named_ids=[assignee.pk],
            data={"assignee": assignee.get_username()},
        )


def question_update(*, actor: Actor, question: Question, changes: QuestionChanges) -> Question:
    """Change a question's assignee, priority, due date, state or organisation: the fields `changes` sets,
    as the edge parsed them (`vendor.inputs.QuestionChanges`).

    Preconditions: `actor` is a PM of the integration team (ForbiddenError otherwise). `state` moves only
    along `vendor.states.QUESTION_TRANSITIONS`; Closed only when every deliverable of the question is accepted
    (the error names those still owed); Deferred and Won't fix only with a `state_reason`; `organisation` is
    a vendor organisation or None; an assignee belongs to the integration team or to the question's
    organisation; a new due date is not in the past. A refusal raises DomainError naming the field and
    changes nothing. One audit row records before and after.
    """
    if not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM may change a question."))
    with transaction.atomic():
        locked = _lock(question)
        cleaned = _cleaned_changes(locked, changes)
        if cleaned:
            _apply(actor, locked, cleaned)
    return locked


@dataclass
class BulkRow:
    """One question of a bulk edit: what it is now and what the edit makes of it, or why it refuses."""

    question: Question
    changes: dict
    error: DomainError | None = None

    @property
    def before(self) -> dict:
        return _question_snapshot(self.question, self.changes)

    @property
    def after(self) -> dict:
        return {name: _snapshot_value(name, value) for name, value in self.changes.items()}


def _bulk_rows(questions: list[Question], changes: QuestionChanges) -> list[BulkRow]:
    rows = []
    for question in questions:
        try:
            rows.append(BulkRow(question=question, changes=_cleaned_changes(question, changes)))
        except DomainError as error:
            rows.append(BulkRow(question=question, changes={}, error=error))
    return rows


def _check_bulk(actor: Actor, changes: QuestionChanges) -> None:
    if not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM may change questions."))
    if changes.organisation is not KEEP:
        raise DomainError(
            gettext_noop("%(field)s cannot be changed for many questions at once."),
            field="organisation",
            params={"field": "organisation"},
        )
    if not changes.given():
        raise DomainError(gettext_noop("Choose at least one thing to change."))


def question_bulk_preview(*, actor: Actor, questions, changes: QuestionChanges) -> list[BulkRow]:
    """What `question_bulk_update` would do to each question, read without locking or writing: shown for
    confirmation before anything changes."""
    _check_bulk(actor, changes)
    ids = sorted({question.pk for question in questions})
    found = Question.objects.select_related("organisation", "assignee").filter(pk__in=ids).order_by("number")
    return _bulk_rows(list(found), changes)


def question_bulk_update(*, actor: Actor, questions, changes: QuestionChanges) -> int:
    """Change the assignee, priority, due date or state of many questions at once; returns how many changed.

    Preconditions as `question_update`, for every question: if one refuses, none changes, and the
    DomainError names the question and the field. One audit row per changed question.
    """
    _check_bulk(actor, changes)
    ids = sorted({question.pk for question in questions})
    with transaction.atomic():
        # Lock first, then read with the joins: a locking query must not join a column that may change.
        list(lock_rows(Question.objects).filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))
        locked = list(Question.objects.select_related("organisation", "assignee").filter(pk__in=ids).order_by("pk"))
        rows = _bulk_rows(locked, changes)
        for row in rows:
            if row.error is not None:
                error = row.error
                raise error.about(row.question.code)
        changed = [row for row in rows if row.changes]
        for row in changed:
            _apply(actor, row.question, row.changes)
    return len(changed)


def question_state_move(*, actor: Actor, question: Question, state: str, reason: str = "") -> Question:
    """Move a question's state on behalf of the system (an answer arrived, a chain started, the last
    deliverable was accepted).

    Preconditions: the move is an edge of `vendor.states.QUESTION_TRANSITIONS` and, to Closed, every
    deliverable is accepted (DomainError otherwise).
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
