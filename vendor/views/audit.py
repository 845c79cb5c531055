"""The audit log's browser page, for those `vendor.access.may_read_audit` lets in."""

import datetime
from dataclasses import dataclass

from django import forms
from django.core.paginator import Paginator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from calculet import audit, labels, sentences, web
from calculet.errors import DomainError
from vendor.access import may_read_audit
from vendor.selectors import audit_entries

AUDIT_PAGE_SIZE = 50
FILTER_MAX_CHARS = 200


def _action_choices():
    return [("", _("any action")), *sorted(labels.choices("audit_action"), key=lambda pair: pair[1])]


class AuditFilterForm(forms.Form):
    question = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Question code"))
    capability = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Capability slug"))
    action = forms.ChoiceField(required=False, label=_("Action"))
    actor = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Actor"))
    object_type = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Object type"))
    object_id = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Object id"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = _action_choices()

    def _history(self, kind: str, message):
        key = self.cleaned_data.get(kind, "").strip()
        if not key:
            return None
        try:
            return audit.subject_history(kind, key)
        except DomainError:
            raise forms.ValidationError(message, params={"key": key}) from None

    def clean_question(self):
        return self._history("question", _("No question has the code %(key)s."))

    def clean_capability(self):
        return self._history("capability", _("No capability has the slug %(key)s."))

    def filter(self, entries):
        """The entries the filters select; none while a filter is invalid (the page shows why)."""
        if not self.is_valid():
            return entries.none()
        data = self.cleaned_data
        for history in (data.get("question"), data.get("capability")):
            if history is not None:
                entries = entries.filter(history)
        if actor := data.get("actor", "").strip():
            entries = entries.filter(actor_label=actor)
        if object_type := data.get("object_type", "").strip():
            entries = entries.filter(object_type=object_type)
        if object_id := data.get("object_id", "").strip():
            entries = entries.filter(object_id=object_id)
        if action := data.get("action"):
            entries = entries.filter(action=action)
        return entries


# The vocabulary a stored `state` is in, by the kind of object it belongs to.
STATE_KINDS = {
    "vendor.question": "state",
    "acceptance.run": "run_state",
    "vendor.deliverable": "deliverable_state",
    "vendor.artifact": "artifact_state",
}
# The vocabulary a stored `kind` is in, by the kind of object it belongs to.
KIND_KINDS = {
    "vendor.artifact": "artifact_kind",
    "vendor.deliverable": "deliverable_kind",
    "vendor.organisation": "organisation_kind",
}
# Other fields whose stored codes have a label.
FIELD_KINDS = {
    "priority": "priority",
    "stage": "stage",
    "verdict": "verdict",
    "grade": "grade",
    "role": "role",
    "health": "health",
    "reasons": "gate_reason",  # a promotion's: the gate's reason codes
}
# The kinds of object an entry is about, by their labels (the type code stays in the filter link's title).
OBJECT_LABELS = {
    "vendor.organisation": pgettext_lazy("audit object", "Organisation"),
    "vendor.membership": pgettext_lazy("audit object", "Membership"),
    "vendor.apitoken": pgettext_lazy("audit object", "API token"),
    "vendor.question": pgettext_lazy("audit object", "Question"),
    "vendor.artifact": pgettext_lazy("audit object", "Artifact"),
    "vendor.deliverable": pgettext_lazy("audit object", "Deliverable"),
    "vendor.answer": pgettext_lazy("audit object", "Answer"),
    "vendor.documentreview": pgettext_lazy("audit object", "Document review"),
    "vendor.upload": pgettext_lazy("audit object", "Upload"),
    "vendor.comment": pgettext_lazy("audit object", "Comment"),
    "vendor.notificationpreference": pgettext_lazy("audit object", "Notification preferences"),
    "vendor.webhook": pgettext_lazy("audit object", "Webhook"),
    "acceptance.target": pgettext_lazy("audit object", "Target"),
    "acceptance.targettoken": pgettext_lazy("audit object", "Target token"),
    "acceptance.targetagent": pgettext_lazy("audit object", "Target agent"),
    "acceptance.answerclaim": pgettext_lazy("audit object", "Answer claim"),
    "acceptance.chain": pgettext_lazy("audit object", "Chain"),
    "acceptance.run": pgettext_lazy("audit object", "Run"),
    "acceptance.promotionattempt": pgettext_lazy("audit object", "Promotion attempt"),
    "acceptance.capabilityapproval": pgettext_lazy("audit object", "Capability approval"),
    "evidence.evidenceitem": pgettext_lazy("audit object", "Evidence item"),
    "evidence.capability": pgettext_lazy("audit object", "Capability"),
}
# The fields an entry names by a label rather than by their stored name.
FIELD_LABELS = {
    "state": _("State"),
    "state_reason": _("State reason"),
    "priority": _("Priority"),
    "due_date": _("Due date"),
    "assignee": _("Assignee"),
    "organisation": _("Organisation"),
    "reason": _("Reason"),
    "health": _("Health"),
    "maintenance": _("Maintenance"),
    "role": _("Role"),
    "name": _("Name"),
    "kind": _("Kind"),
    "stage": _("Stage"),
    "verdict": _("Verdict"),
    "versions": _("Versions"),
    "reasons": _("Gate reasons"),
}


def _shown(entry, field: str, value):
    """A stored value as a person reads it: labels for codes, lists and mappings spelled out, yes and no."""
    if value is None or value == [] or value == {}:
        return None
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, list):
        return labels.listed(_shown(entry, field, item) or "—" for item in value)
    if isinstance(value, dict):
        # Sorted: PostgreSQL keeps a JSON object's keys in its own order, not the order they were written in.
        return "; ".join(f"{key} {_shown(entry, key, item) or '—'}" for key, item in sorted(value.items()))
    by_object = {"state": STATE_KINDS, "kind": KIND_KINDS}
    kind = by_object[field].get(entry.object_type) if field in by_object else FIELD_KINDS.get(field)
    return labels.label(kind, value) if kind else value


@dataclass(frozen=True)
class AuditRow:
    """An audit entry as the log lists it: who did what to which object (its kind as a label), and the fields
    it changed as (field, its label or None, before, after) read from its snapshots; or, for a blocked
    promotion, which changed nothing, its `outcome`: what was asked and where the capability stayed."""

    id: int
    created_at: datetime.datetime
    actor_label: str
    action: str
    object_type: str
    object_label: str
    object_id: str
    object_repr: str
    outcome: str
    changes: list[tuple[str, str | None, object, object]]


# A snapshot's `<field>_sentence` is that field's sentence as `calculet.sentences.sentence` stores it, beside
# its English in `<field>` (what the API gives): the log says it in the reader's language.
SENTENCE_SUFFIX = "_sentence"


# Stored English sentences a registered phrase says in the reader's language, by the object and its field.
PHRASES = {("vendor.deliverable", "reason"): "deliverable_reason"}


def _shown_in(entry, snapshot: dict, field: str):
    """A snapshot's field as a person reads it: its sentence in the reader's language when it keeps one."""
    said = snapshot.get(field + SENTENCE_SUFFIX)
    if isinstance(said, dict) and "template" in said:
        return sentences.text(said)
    value = snapshot.get(field)
    if (entry.object_type, field) in PHRASES and isinstance(value, str) and value:
        return labels.phrase(PHRASES[entry.object_type, field], value)
    return _shown(entry, field, value)


def _audit_row(entry) -> AuditRow:
    before = entry.before if isinstance(entry.before, dict) else {}
    after = entry.after if isinstance(entry.after, dict) else {}
    outcome, changes = "", []
    if entry.action == "capability.promotion_blocked":
        outcome = _("asked %(to)s, stayed %(status)s") % {"to": after.get("to"), "status": before.get("status")}
    else:
        changes = [
            (key, FIELD_LABELS.get(key), _shown_in(entry, before, key), _shown_in(entry, after, key))
            for key in dict.fromkeys([*before, *after])
            if before.get(key) != after.get(key) and not key.endswith(SENTENCE_SUFFIX)
        ]
    return AuditRow(
        id=entry.id,
        created_at=entry.created_at,
        actor_label=entry.actor_label,
        action=entry.action,
        object_type=entry.object_type,
        object_label=OBJECT_LABELS.get(entry.object_type, entry.object_type),
        object_id=entry.object_id,
        object_repr=entry.object_repr,
        outcome=outcome,
        changes=changes,
    )


@web.page_for(may_read_audit)
def audit_log(request):
    form = AuditFilterForm(request.GET)
    page = Paginator(form.filter(audit_entries()), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"form": form, "page": page, "rows": [_audit_row(entry) for entry in page], "params": request.GET}
    status = 400 if form.errors and not web.wants_partial(request) else 200
    return web.render_page(request, "vendor/audit-log.html", context, partial="audit-table", nav="audit", status=status)
