"""A PM's review of a document deliverable, item by item, through `acceptance.services.reviews`."""

from django.http import HttpResponseRedirect
from django.urls import reverse

from acceptance.selectors import question_deliverables
from acceptance.services.reviews import document_review
from acceptance.views.questions import question_page
from calculet import web
from calculet.errors import DomainError, NotFoundError
from vendor.access import may_act_as_pm


def _document(question, key):
    deliverable = question.deliverables.filter(key=key).first()
    if deliverable is None:
        raise NotFoundError(f"{question.code} has no deliverable {key}.")
    return deliverable


def _posted_items(post, deliverable) -> list[dict]:
    return [
        {"ticked": post.get(f"item-{index}") == "yes", "note": post.get(f"note-{index}", "")}
        for index in range(len(deliverable.checklist))
    ]


@web.page_for(may_act_as_pm)
def deliverable_review(request, code, key):
    """The checklist of a document deliverable: each item ticked or not, with a note, and the reason; the
    review accepts the document when every item holds, rejects it otherwise."""
    question = question_page(request, code)
    deliverable = _document(question, key)
    errors: dict = {}
    posted = {"items": [{"ticked": False, "note": ""} for _ in deliverable.checklist], "reason": ""}
    if request.method == "POST":
        posted = {"items": _posted_items(request.POST, deliverable), "reason": request.POST.get("reason", "")}
        try:
            document_review(actor=request.user, deliverable=deliverable, items=posted["items"], reason=posted["reason"])
        except DomainError as error:
            errors[error.field or "form"] = error.message
        else:
            return HttpResponseRedirect(reverse("question-detail", args=[question.code]) + "#deliverables")
    view = next(view for view in question_deliverables(question) if view.deliverable.pk == deliverable.pk)
    rows = [
        (index, item, posted["items"][index]["ticked"], posted["items"][index]["note"])
        for index, item in enumerate(deliverable.checklist)
    ]
    context = {
        "question": question,
        "deliverable": deliverable,
        "view": view,
        "rows": rows,
        "reason": posted["reason"],
        "errors": errors,
    }
    status = 400 if errors else 200
    return web.render_page(request, "acceptance/deliverable-review.html", context, nav="questions", status=status)
