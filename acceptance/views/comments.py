"""The question page's discussion: adding to the thread and editing one's own comments, in place with htmx and
as plain forms without it. The thread's rules are `vendor.services.comments`'."""

from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from acceptance.views.forms import CommentForm
from acceptance.views.questions import (
    question_nav,
    question_page,
    render_question_page,
    thread_context,
    whole_question_page_context,
)
from calculet import web
from calculet.errors import DomainError
from calculet.web import errors_by_field
from vendor.access import may_discuss, may_edit_comment, may_open_pages, object_for_user
from vendor.selectors import comment_list
from vendor.services.comments import comment_create, comment_edit

THREAD_TEMPLATE = "vendor/comment-thread.html"


def _refused(error: DomainError) -> dict:
    field = error.field.split("[", 1)[0] if error.field else "form"
    return {field if field in ("body", "artifacts") else "form": error.message}


def _thread_context(request, question, **thread) -> dict:
    return {"question": question, **thread_context(request, question, **thread)}


def _thread(request, question, **thread):
    """The thread alone for htmx, the whole question page otherwise."""
    context = _thread_context(request, question, **thread)
    if web.wants_partial(request):
        return web.render_page(request, THREAD_TEMPLATE, context, partial="comment-thread")
    return render_question_page(request, question, thread=context)


def _answered(request, question, *, status=200, redirect_to="", **thread):
    """A post's answer: the thread in place for htmx; without it the redirect to `redirect_to` once saved, or
    the whole question page with the thread as it was refused."""

    def context() -> dict:
        return _thread_context(request, question, **thread)

    return web.answer_post(
        request,
        "acceptance/question-detail.html",
        context,
        page_context=lambda: whole_question_page_context(request, question, thread=context()),
        partial="comment-thread",
        partial_template=THREAD_TEMPLATE,
        nav=question_nav(request.user),
        status=status,
        redirect_to=redirect_to,
    )


def _back_to(question, comment_id: int) -> str:
    return reverse("question-detail", args=[question.code]) + f"#comment-{comment_id}"


@require_http_methods(["GET", "POST"])
@web.page_for(may_open_pages)
def comment_thread(request, code):
    """GET: the thread (htmx refreshes it). POST: add a comment."""
    question = question_page(request, code)
    if request.method == "GET":
        if not web.wants_partial(request):
            return HttpResponseRedirect(reverse("question-detail", args=[question.code]) + "#comment-thread")
        return _thread(request, question)
    if not may_discuss(request.user):
        return _answered(
            request,
            question,
            status=403,
            errors={"form": _("Only the team's PMs and the question's vendor write here.")},
        )
    form = CommentForm(request.POST)
    errors = errors_by_field(form)
    if not errors:
        try:
            comment = comment_create(actor=request.user, question=question, draft=form.draft)
        except DomainError as error:
            errors = _refused(error)
        else:
            return _answered(request, question, redirect_to=_back_to(question, comment.pk))
    return _answered(request, question, status=400, form=form.typed(), errors=errors)


@require_http_methods(["GET", "POST"])
@web.page_for(may_discuss)
def comment_edit_view(request, code, comment_id):
    """GET: one's own comment as a form (the comment alone for htmx; someone else's has no form: 404). POST:
    save the edit."""
    question = question_page(request, code)
    comment = object_for_user(request.user, comment_list(user=request.user, question=question), pk=comment_id)
    if request.method == "GET":
        if not may_edit_comment(request.user, comment):
            raise Http404
        form = {"body": comment.body, "artifacts": [artifact.pk for artifact in comment.artifacts.all()]}
        if web.wants_partial(request):
            context = {"question": question, "comment": comment, **thread_context(request, question, edit_form=form)}
            return web.render_page(request, THREAD_TEMPLATE, context, partial="comment-edit")
        return _thread(request, question, editing=comment.pk, edit_form=form)
    posted = CommentForm(request.POST)
    errors = errors_by_field(posted)
    if not errors:
        try:
            comment_edit(actor=request.user, comment=comment, draft=posted.draft)
        except DomainError as error:
            errors = _refused(error)
        else:
            return _answered(request, question, redirect_to=_back_to(question, comment.pk))
    return _answered(
        request,
        question,
        status=403 if "form" in errors else 400,
        editing=comment.pk,
        edit_form=posted.typed(),
        edit_errors=errors,
    )
