"""Browser pages for evidence: the register of the 91 items, the capability matrix, the reports."""

import csv
from dataclasses import dataclass

from django import forms
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _

from calculet import labels, web
from evidence.exporter import CSV_BOM
from evidence.grades import GRADES, STATUSES
from evidence.models import Capability, EvidenceGrade, EvidenceItem, EvidenceStatus, SourceReference
from evidence.selectors import (
    archive_list,
    capabilities_with_grades,
    capability_matrix_rows,
    evidence_table_list,
    path_alias_list,
    run_evidence_under,
    run_evidence_without_seed_item,
    seed_evidence_list,
)
from vendor.access import may_open_pages, may_see_all

EVIDENCE_PAGE_SIZE = 100


class EvidenceFilterForm(forms.Form):
    table = forms.ChoiceField(required=False, label=_("Table"))
    grade = forms.ChoiceField(required=False, label=_("Evidence grade"))
    status = forms.ChoiceField(required=False, label=_("Capability status"))
    mark = forms.ChoiceField(required=False, label=_("Mark"))

    def __init__(self, data, *, tables):
        super().__init__(data)
        anything = [("", _("any"))]
        self.fields["table"].choices = anything + [(t.prefix, f"{t.prefix} — {t.section}. {t.title}") for t in tables]
        self.fields["grade"].choices = anything + [(g, f"{g} — {labels.label('grade', g)}") for g in GRADES]
        self.fields["status"].choices = anything + [(s, f"{s} — {labels.label('status', s)}") for s in STATUSES]
        self.fields["mark"].choices = anything + [
            ("defect", _("defect (缺陷)")),
            ("limitation", _("limitation (限制)")),
            ("none", _("neither")),
        ]

    def filter(self, items):
        """The items the filters select; none while a filter is invalid (the page shows why)."""
        if not self.is_valid():
            return items.none()
        data = self.cleaned_data
        if data.get("table"):
            items = items.filter(table__prefix=data["table"])
        if data.get("grade"):
            items = items.filter(grades__grade=data["grade"])
        if data.get("status"):
            items = items.filter(statuses__status=data["status"])
        if data.get("mark") == "defect":
            items = items.filter(defect=True)
        elif data.get("mark") == "limitation":
            items = items.filter(limitation=True)
        elif data.get("mark") == "none":
            items = items.filter(defect=False, limitation=False)
        return items.distinct()


@dataclass(frozen=True)
class EvidenceRow:
    """A seed item as the register lists it: the item, its sources, grades and statuses, and the capabilities
    citing it that run evidence was grouped under (`run_evidence_under`)."""

    item: EvidenceItem
    sources: list[SourceReference]
    grades: list[EvidenceGrade]
    statuses: list[EvidenceStatus]
    run_groups: list[Capability]


@web.page_for(may_open_pages)
def evidence_register(request):
    form = EvidenceFilterForm(request.GET, tables=list(evidence_table_list()))
    items = form.filter(seed_evidence_list(user=request.user))
    page = Paginator(items, EVIDENCE_PAGE_SIZE).get_page(request.GET.get("page"))
    runs_under = run_evidence_under(list(page), user=request.user)
    # Read once each: every `.all()` of a prefetched relation in the template builds a new queryset.
    rows = [
        EvidenceRow(
            item=item,
            sources=list(item.sources.all()),
            grades=list(item.grades.all()),
            statuses=list(item.statuses.all()),
            run_groups=runs_under.get(item.pk, []),
        )
        for item in page
    ]
    context = {
        "form": form,
        "page": page,
        "rows": rows,
        "runs_without_seed_item": run_evidence_without_seed_item(user=request.user),
        "params": request.GET,
        "archives": archive_list(),
        "aliases": path_alias_list(),
    }
    status = 400 if form.errors and not web.wants_partial(request) else 200
    return web.render_page(
        request, "evidence/evidence-register.html", context, partial="evidence-table", nav="evidence", status=status
    )


@web.page_for(may_open_pages)
def capability_matrix(request):
    context = {"capabilities": capabilities_with_grades(user=request.user), "statuses": STATUSES}
    return web.render_page(request, "evidence/capability-matrix.html", context, nav="capabilities")


@web.page_for(may_see_all)
def report_capability_matrix(request):
    """The capability matrix as CSV: status (C) and the linked evidence's grades (E) in separate columns."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="calculet-capability-matrix.csv"'
    response.write(CSV_BOM)  # Excel reads the Chinese text right only after a byte order mark
    writer = csv.writer(response)
    writer.writerow(["slug", "title", "status", "pinned_status", "scope", "evidence_grades", "evidence"])
    for row in capability_matrix_rows(user=request.user):
        capability = row.capability
        writer.writerow(
            [
                capability.slug,
                capability.title,
                capability.status,
                capability.pinned_status,
                capability.scope,
                " ".join(row.evidence_grades),
                " ".join(item.code for item in capability.evidence.all()),
            ]
        )
    return response
