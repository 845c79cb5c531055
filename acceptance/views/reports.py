"""The reports page and the checklist downloads: the live checklist, and what each vendor still owes, per
deliverable and, for model packages, per target kind."""

import datetime
from dataclasses import dataclass

from django.http import Http404, HttpResponse
from django.utils.translation import gettext_lazy as _

from acceptance.selectors import DeliverableView, checklist_download, deliverables_owed_views
from calculet import web
from evidence.exporter import EXPORT_FORMATS
from vendor.access import may_see_all
from vendor.selectors import open_questions


@dataclass(frozen=True)
class OpenQuestion:
    """An open question as the reports list it under its vendor: the fields its line shows and what it still
    owes (none: nothing)."""

    code: str
    state: str
    due_date: datetime.date | None
    text: str
    owed: list[DeliverableView]


@web.page_for(may_see_all)
def reports(request):
    questions = list(open_questions())
    owed_by_question: dict[int, list[DeliverableView]] = {}
    for view in deliverables_owed_views(question.pk for question in questions):
        owed_by_question.setdefault(view.deliverable.question_id, []).append(view)
    by_vendor: dict = {}
    for question in questions:
        row = OpenQuestion(
            code=question.code,
            state=question.state,
            due_date=question.due_date,
            text=question.question,
            owed=owed_by_question.get(question.pk, []),
        )
        by_vendor.setdefault(question.organisation, []).append(row)
    context = {
        "formats": [("md", _("Checklist, Markdown")), ("csv", _("Checklist, CSV")), ("json", _("Checklist, JSON"))],
        "open_by_vendor": list(by_vendor.items()),
    }
    return web.render_page(request, "evidence/reports.html", context, nav="reports")


@web.page_for(may_see_all)
def report_checklist(request, fmt):
    if fmt not in EXPORT_FORMATS:
        raise Http404
    content_type, extension = EXPORT_FORMATS[fmt]
    response = HttpResponse(checklist_download(fmt), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="calculet-checklist.{extension}"'
    return response
