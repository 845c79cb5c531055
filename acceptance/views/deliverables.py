"""A PM's review of a document deliverable, item by item and element by element, through
`acceptance.services.reviews`."""

from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_noop

from acceptance.selectors import document_answer, question_deliverables
from acceptance.services.reviews import document_review
from acceptance.views.forms import DocumentReviewForm
from acceptance.views.questions import question_page
from calculet import web
from calculet.errors import DomainError, NotFoundError
from vendor.access import may_act_as_pm
from vendor.claim import ELEMENTS


def _document(question, key):
    deliverable = question.deliverables.filter(key=key).first()
    if deliverable is None:
        raise NotFoundError(
            gettext_noop("%(question)s has no deliverable %(key)s."), params={"question": question.code, "key": key}
        )
    return deliverable


@web.page_for(may_act_as_pm)
def deliverable_review(request, code, key):
    """The checklist of a document deliverable: each item ticked or not, with a note, each of section 13's
    elements present or not applicable with why, and the reason; the review accepts the document when every
    item holds and every element that applies is in the answer, rejects it otherwise."""
    question = question_page(request, code)
    deliverable = _document(question, key)
    errors: dict = {}
    posted = {"items": [{"ticked": False, "note": ""} for _ in deliverable.checklist], "elements": {}, "reason": ""}
    if request.method == "POST":
        form = DocumentReviewForm(request.POST, deliverable=deliverable)
        form.is_valid()  # every field takes what is posted; the parse's refusals are in `form.refusals`
        posted = {"items": form.items(), "elements": form.elements(), "reason": form.cleaned_data["reason"]}
        errors.update(form.refusals)
        if not errors:
            try:
                document_review(actor=request.user, deliverable=deliverable, draft=form.draft)
            except DomainError as error:
                errors[error.field or "form"] = error.message
            else:
                return HttpResponseRedirect(reverse("question-detail", args=[question.code]) + "#deliverables")
    view = next(view for view in question_deliverables(question) if view.deliverable.pk == deliverable.pk)
    rows = [
        (index, item, posted["items"][index]["ticked"], posted["items"][index]["note"])
        for index, item in enumerate(deliverable.checklist)
    ]
    # What the latest answer holds, so the reviewer sees which elements it lacks.
    answer = document_answer(deliverable)
    missing = answer.missing if answer else ELEMENTS
    element_rows = [
        (
            element,
            element not in missing,
            posted["elements"].get(element, {}).get("verdict", ""),
            posted["elements"].get(element, {}).get("reason", ""),
        )
        for element in ELEMENTS
    ]
    context = {
        "question": question,
        "deliverable": deliverable,
        "view": view,
        "rows": rows,
        "element_rows": element_rows,
        "answer": answer,
        "reason": posted["reason"],
        "errors": errors,
    }
    status = 400 if errors else 200
    return web.render_page(request, "acceptance/deliverable-review.html", context, nav="questions", status=status)
