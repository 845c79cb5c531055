"""The audit log's browser page, for those `vendor.access.may_read_audit` lets in."""

from django import forms
from django.core.paginator import Paginator
from django.utils.translation import gettext_lazy as _

from calculet import web
from vendor.access import may_read_audit
from vendor.selectors import audit_entries

AUDIT_PAGE_SIZE = 50
FILTER_MAX_CHARS = 200


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Actor"))
    object_type = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Object type"))
    object_id = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Object id"))
    action = forms.CharField(required=False, max_length=FILTER_MAX_CHARS, label=_("Action"))

    def filter(self, entries):
        """The entries the filters select; none while a filter is invalid (the page shows why)."""
        if not self.is_valid():
            return entries.none()
        data = self.cleaned_data
        if actor := data.get("actor", "").strip():
            entries = entries.filter(actor_label=actor)
        if object_type := data.get("object_type", "").strip():
            entries = entries.filter(object_type=object_type)
        if object_id := data.get("object_id", "").strip():
            entries = entries.filter(object_id=object_id)
        if action := data.get("action", "").strip():
            entries = entries.filter(action__startswith=action)
        return entries


def _changes(entry):
    """The fields an entry changed, as (field, before, after), from its before/after snapshots."""
    before = entry.before if isinstance(entry.before, dict) else {}
    after = entry.after if isinstance(entry.after, dict) else {}
    keys = list(dict.fromkeys([*before, *after]))
    return [(key, before.get(key), after.get(key)) for key in keys if before.get(key) != after.get(key)]


@web.page_for(may_read_audit)
def audit_log(request):
    form = AuditFilterForm(request.GET)
    page = Paginator(form.filter(audit_entries()), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    for entry in page:
        entry.changes = _changes(entry)
    context = {"form": form, "page": page, "params": request.GET}
    status = 400 if form.errors and not web.wants_partial(request) else 200
    return web.render_page(request, "vendor/audit-log.html", context, partial="audit-table", nav="audit", status=status)
