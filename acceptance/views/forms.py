"""The forms of the pages' actions: each parses what a page posts into the typed input the service takes
(`vendor.inputs.QuestionChanges`, `acceptance.inputs.PromotionRequest`, `ApprovalRequest` and
`DocumentReviewDraft`), once. The
service then checks the business rules (which priorities and moves exist, who may be assigned, dates not in
the past). People are named by username, as in the API."""

from django import forms
from django.utils.translation import gettext_lazy as _

from acceptance.inputs import (
    SCHEDULE_NOT_A_NUMBER,
    DocumentReviewDraft,
    ItemCheck,
    approval_request,
    element_verdict,
    promotion_request,
    review_note,
    review_reason,
    schedule_number,
)
from acceptance.selectors import NOBODY
from calculet.errors import DomainError
from vendor import selectors as vendor_selectors
from vendor.claim import ELEMENTS
from vendor.inputs import KEEP, QuestionChanges, comment_draft

DATE_ERROR = {"invalid": _("Enter a date as YYYY-MM-DD.")}


def _person(username: str):
    """The active user of that username; a form error naming the field when there is none."""
    person = vendor_selectors.active_users().filter(username=username).first()
    if person is None:
        raise forms.ValidationError(_("Choose a person from the list."))
    return person


class QuestionRowForm(forms.Form):
    """A row of the list changed in place: only the fields posted change, and of those only the ones that
    differ from the question as stored. An empty assignee or due date clears it."""

    assignee = forms.CharField(required=False)
    priority = forms.CharField(required=False, strip=False)
    state = forms.CharField(required=False, strip=False)
    state_reason = forms.CharField(required=False, strip=False)  # its limit is the service's rule
    due_date = forms.DateField(required=False, input_formats=["%Y-%m-%d"], error_messages=DATE_ERROR)

    def __init__(self, data, *, question):
        super().__init__(data)
        self.question = question

    def clean_assignee(self):
        username = self.cleaned_data["assignee"]
        return _person(username) if username else None

    def changes(self) -> QuestionChanges:
        """Call only after `is_valid()` held."""
        posted = {name: value for name, value in self.cleaned_data.items() if name in self.data}
        return QuestionChanges(
            **{name: value for name, value in posted.items() if value != getattr(self.question, name)}
        )


class QuestionTicketForm(QuestionRowForm):
    """The question page's ticket: a row's fields and the organisation the question is put to (by slug; empty:
    none yet)."""

    organisation = forms.ModelChoiceField(
        queryset=vendor_selectors.vendor_organisations(),
        to_field_name="slug",
        required=False,
        error_messages={"invalid_choice": _("Choose an organisation from the list.")},
    )


class QuestionBulkForm(forms.Form):
    """The bulk edit's choices for every ticked question (`code`, posted as a list): a field left blank is left as
    it is; the assignee NOBODY unassigns, `clear_due` clears the due date."""

    assignee = forms.CharField(required=False)
    priority = forms.CharField(required=False, strip=False)
    state = forms.CharField(required=False, strip=False)
    state_reason = forms.CharField(required=False, strip=False)
    due_date = forms.DateField(required=False, input_formats=["%Y-%m-%d"], error_messages=DATE_ERROR)
    clear_due = forms.BooleanField(required=False)

    INPUTS = ("assignee", "priority", "state", "state_reason", "due_date", "clear_due")

    def clean_assignee(self):
        username = self.cleaned_data["assignee"]
        if not username:
            return KEEP
        return None if username == NOBODY else _person(username)

    def clean(self):
        data = super().clean()
        if not self.data.getlist("code"):
            self.add_error(None, _("Tick at least one question."))
        elif not self.errors and not self.changes().given():
            self.add_error(None, _("Choose at least one thing to change."))
        return data

    def changes(self) -> QuestionChanges:
        """Call only after `is_valid()` held."""
        data = self.cleaned_data
        due_date = None if data["clear_due"] else data["due_date"] or KEEP
        return QuestionChanges(
            assignee=data["assignee"],
            priority=data["priority"] or KEEP,
            state=data["state"] or KEEP,
            state_reason=data["state_reason"] or KEEP,
            due_date=due_date,
        )

    def typed(self) -> dict[str, str]:
        """What was posted, to show again and to carry into the confirming post."""
        return {name: self.data.get(name, "") for name in self.INPUTS}


class CapabilityPromoteForm(forms.Form):
    """The capability page's request to the promotion gate: the status asked for and why."""

    to = forms.CharField(required=False)
    reason = forms.CharField(required=False, strip=False)  # stripped by the parse, which checks its length

    def clean(self):
        data = super().clean()
        try:
            self.request = promotion_request(data.get("to", ""), data.get("reason", ""))
        except DomainError as error:
            self.add_error(error.field, error.message)
        return data


class CapabilityApproveForm(forms.Form):
    """The capability page's approval of a move that needs two members: the status moved to and a note."""

    to = forms.CharField(required=False)
    note = forms.CharField(required=False, strip=False)  # stripped by the parse, which checks its length

    def clean(self):
        data = super().clean()
        try:
            self.request = approval_request(data.get("to", ""), data.get("note", ""))
        except DomainError as error:
            self.add_error(error.field, error.message)
        return data


class IdListField(forms.Field):
    """A list of row ids, posted as one value each (ticked boxes, a multiple select)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[int]:
        values = list(value or [])
        if not all(str(item).isdigit() for item in values):
            raise forms.ValidationError(_("Choose artifacts from the list."))
        return [int(item) for item in values]


class CommentForm(forms.Form):
    """A comment added to a question's thread or edited: its text and the ids of the artifacts it links, parsed
    into a `vendor.inputs.CommentDraft` (whose the artifacts are is the service's to check)."""

    body = forms.CharField(required=False, strip=False)  # stripped by the parse, which checks its length
    artifacts = IdListField(required=False)

    def clean(self):
        data = super().clean()
        try:
            self.draft = comment_draft(data.get("body", ""), data.get("artifacts", []))
        except DomainError as error:
            self.add_error(error.field, error.message)
        return data

    def typed(self) -> dict:
        """What was posted, as the form shows it again."""
        ids = self.data.getlist("artifacts")
        return {"body": self.data.get("body", ""), "artifacts": [int(value) for value in ids if value.isdigit()]}


class ScheduleField(forms.CharField):
    """One field of a target's health check schedule: empty (the settings' default) or a whole number. Its
    error names the target's field (`names`), as the command's and the service's do."""

    def __init__(self, *, names: str):
        super().__init__(required=False)
        self.names = names

    def to_python(self, value) -> int | None:
        try:
            return schedule_number(super().to_python(value))
        except ValueError:
            raise forms.ValidationError(_(SCHEDULE_NOT_A_NUMBER) % {"field": self.names}) from None


class TargetHealthScheduleForm(forms.Form):
    """The dashboard's health check schedule of a target: every N runs and every H hours (that each is at least
    1 is the service's rule)."""

    every_runs = ScheduleField(names="health_check_every_runs")
    every_hours = ScheduleField(names="health_check_every_hours")


class DocumentReviewForm(forms.Form):
    """A PM's review of a document deliverable: per checklist item `item-N` ticked ("yes") and `note-N`; per
    element of section 13 `element-E` (its verdict) and `element-E-reason`; and the decision's `reason`;
    parsed into an `acceptance.inputs.DocumentReviewDraft`. `refusals` holds each field's error, under the
    names the API uses (`items.N.note`, `elements.E.verdict`, `reason`…); that a not-applicable element has
    its reason is the service's rule."""

    reason = forms.CharField(required=False, strip=False)

    def __init__(self, data=None, *, deliverable):
        super().__init__(data)
        self.checklist = deliverable.checklist
        self.refusals: dict[str, str] = {}
        for index in range(len(self.checklist)):
            self.fields[f"item-{index}"] = forms.CharField(required=False, strip=False)
            self.fields[f"note-{index}"] = forms.CharField(required=False, strip=False)
        for element in ELEMENTS:
            self.fields[f"element-{element}"] = forms.CharField(required=False, strip=False)
            self.fields[f"element-{element}-reason"] = forms.CharField(required=False, strip=False)

    def _parsed(self, parse, *args):
        try:
            return parse(*args)
        except DomainError as error:
            self.refusals[error.field or "form"] = error.message
            return None

    def clean(self):
        data = super().clean()
        items = [
            ItemCheck(
                ticked=data[f"item-{index}"] == "yes", note=self._parsed(review_note, index, data[f"note-{index}"])
            )
            for index in range(len(self.checklist))
        ]
        elements = [
            self._parsed(element_verdict, element, data[f"element-{element}"], data[f"element-{element}-reason"])
            for element in ELEMENTS
        ]
        reason = self._parsed(review_reason, data["reason"])
        if not self.refusals:
            self.draft = DocumentReviewDraft(items=tuple(items), elements=tuple(elements), reason=reason)
        return data

    def items(self) -> list[dict]:
        """One {"ticked", "note"} per checklist item as posted, to show again."""
        data = self.cleaned_data
        return [
            {"ticked": data[f"item-{index}"] == "yes", "note": data[f"note-{index}"]}
            for index in range(len(self.checklist))
        ]

    def elements(self) -> dict[str, dict]:
        """Each element's verdict as posted, the unanswered ones left out, to show again."""
        data = self.cleaned_data
        return {
            element: {"verdict": data[f"element-{element}"], "reason": data[f"element-{element}-reason"]}
            for element in ELEMENTS
            if data[f"element-{element}"]
        }
