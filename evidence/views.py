"""Browser pages for evidence: the register of the 91 items, the capability matrix and page, reports."""

import csv

from django import forms
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from acceptance.services import capability_promote
from calculet import web
from calculet.errors import DomainError
from evidence.exporter import EXPORT_FORMATS, checklist_export
from evidence.grades import GRADES, STATUSES
from evidence.models import Archive, Capability, EvidenceGrade, EvidenceItem, EvidenceTable, PathAlias, SourceReference
from vendor import states
from vendor.access import user_is_pm
from vendor.models import Question

EVIDENCE_PAGE_SIZE = 100
HISTORY_LIMIT = 200
CAPABILITY_EVIDENCE_LIMIT = 200


class EvidenceFilterForm(forms.Form):
    table = forms.ChoiceField(required=False, label=_("Table"))
    grade = forms.ChoiceField(required=False, label=_("Evidence grade"))
    status = forms.ChoiceField(required=False, label=_("Capability status"))
    mark = forms.ChoiceField(required=False, label=_("Mark"))

    def __init__(self, data, *, tables):
        super().__init__(data)
        anything = [("", _("any"))]
        self.fields["table"].choices = anything + [(t.prefix, f"{t.prefix} — {t.section}. {t.title}") for t in tables]
        self.fields["grade"].choices = anything + [(g, f"{g} — {web.label('grade', g)}") for g in GRADES]
        self.fields["status"].choices = anything + [(s, f"{s} — {web.label('status', s)}") for s in STATUSES]
        self.fields["mark"].choices = anything + [
            ("defect", _("defect (缺陷)")),
            ("limitation", _("limitation (限制)")),
            ("none", _("neither")),
        ]

    def filter(self, items):
        data = self.cleaned_data if self.is_valid() else {}
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


@web.internal_page
def evidence_register(request):
    tables = list(EvidenceTable.objects.all())
    form = EvidenceFilterForm(request.GET, tables=tables)
    items = form.filter(
        EvidenceItem.objects.select_related("table").prefetch_related(
            "grades",
            "statuses",
            Prefetch("sources", queryset=SourceReference.objects.select_related("alias")),
        )
    )
    page = Paginator(items, EVIDENCE_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "page": page,
        "params": request.GET,
        "archives": Archive.objects.all(),
        "aliases": PathAlias.objects.all(),
    }
    return web.render_page(
        request, "evidence/evidence-register.html", context, partial="evidence-table", nav="evidence"
    )


def capabilities_with_grades(capabilities=None):
    """Capabilities in matrix order, each with the distinct E grades of its evidence (never merged with C).

    Two queries: the grades come as distinct (capability, grade) pairs, however many evidence items (run
    evidence included) a capability has.
    """
    capabilities = list(capabilities if capabilities is not None else Capability.objects.all())
    grades: dict[int, set[str]] = {}
    pairs = (
        EvidenceGrade.objects.filter(item__capabilities__in=capabilities)
        .values_list("item__capabilities", "grade")
        .distinct()
    )
    for capability_id, grade in pairs:
        grades.setdefault(capability_id, set()).add(grade)
    for capability in capabilities:
        capability.evidence_grades = sorted(grades.get(capability.pk, ()))
    return capabilities


@web.internal_page
def capability_matrix(request):
    context = {"capabilities": capabilities_with_grades(), "statuses": STATUSES}
    return web.render_page(request, "evidence/capability-matrix.html", context, nav="capabilities")


def _capability_page_context(request, capability, **promotion) -> dict:
    return {
        "capability": capability,
        # Seed evidence first, then the newest run evidence: a much-tested capability has many run items.
        "evidence": capability.evidence.select_related("table")
        .prefetch_related("grades", "statuses")
        .order_by("-origin", "table__section", "position", "-id")[:CAPABILITY_EVIDENCE_LIMIT],
        "evidence_total": capability.evidence.count(),
        "questions": capability.questions.select_related("section"),
        "history": capability.promotion_attempts.order_by("-id")[:HISTORY_LIMIT],
        "statuses": STATUSES,
        "status_choices": [(status, f"{status} — {web.label('status', status)}") for status in STATUSES],
        "can_promote": user_is_pm(request.user),
        "attempt": None,
        "promotion_errors": {},
        "promotion_input": {},
        **promotion,
    }


@web.internal_page
def capability_detail(request, slug):
    capability = get_object_or_404(Capability, slug=slug)
    context = _capability_page_context(request, capability)
    return web.render_page(request, "evidence/capability-detail.html", context, nav="capabilities")


@require_POST
@web.pm_page
def capability_promote_view(request, slug):
    """Ask the promotion gate; its decision, and its reasons when it blocks, are shown in place."""
    capability = get_object_or_404(Capability, slug=slug)
    to_status = request.POST.get("to", "")
    reason = request.POST.get("reason", "")
    attempt = None
    errors = {}
    try:
        attempt = capability_promote(actor=request.user, capability=capability, to_status=to_status, reason=reason)
    except DomainError as error:
        errors[error.field if error.field in ("to", "reason") else "form"] = error.message
    capability.refresh_from_db()
    context = _capability_page_context(
        request,
        capability,
        attempt=attempt,
        promotion_errors=errors,
        promotion_input={"to": to_status, "reason": "" if attempt and attempt.allowed else reason},
    )
    status = 400 if errors and not web.wants_partial(request) else 200
    return web.render_page(
        request,
        "evidence/capability-detail.html",
        context,
        partial="capability-promotion",
        nav="capabilities",
        status=status,
    )


@web.internal_page
def reports(request):
    open_questions = (
        Question.objects.exclude(state__in=[states.CLOSED, states.DEFERRED])
        .select_related("organisation", "assignee", "section")
        .order_by("organisation__slug", "number")
    )
    by_vendor = {}
    for question in open_questions:
        by_vendor.setdefault(question.organisation, []).append(question)
    context = {
        "formats": [("md", _("Checklist, Markdown")), ("csv", _("Checklist, CSV")), ("json", _("Checklist, JSON"))],
        "open_by_vendor": list(by_vendor.items()),
    }
    return web.render_page(request, "evidence/reports.html", context, nav="reports")


@web.internal_page
def report_checklist(request, fmt):
    if fmt not in EXPORT_FORMATS:
        raise Http404
    content_type, extension = EXPORT_FORMATS[fmt]
    response = HttpResponse(checklist_export(fmt), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="calculet-checklist.{extension}"'
    return response


@web.internal_page
def report_capability_matrix(request):
    """The capability matrix as CSV: status (C) and the linked evidence's grades (E) in separate columns."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="calculet-capability-matrix.csv"'
    writer = csv.writer(response)
    writer.writerow(["slug", "title", "status", "pinned_status", "scope", "evidence_grades", "evidence"])
    capabilities = Capability.objects.prefetch_related(
        Prefetch("evidence", queryset=EvidenceItem.objects.only("id", "code").order_by("code"))
    )
    for capability in capabilities_with_grades(capabilities):
        writer.writerow(
            [
                capability.slug,
                capability.title,
                capability.status,
                capability.pinned_status,
                capability.scope,
                " ".join(capability.evidence_grades),
                " ".join(item.code for item in capability.evidence.all()),
            ]
        )
    return response
