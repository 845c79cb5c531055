"""What the browser pages share: opening a page only to whom it is for, rendering a page or one of its
partials, and answering a page action's post the same way with htmx and without."""

from collections.abc import Callable
from functools import wraps

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache


def page_for(may_open: Callable) -> Callable:
    """A page for signed-in users for whom `may_open(user)` holds (a `vendor.access.may_*` predicate).
    Anyone else gets 404, as for anything that is not theirs. No page is kept by the browser
    (`Cache-Control: no-store`): Back after a change made in place would otherwise show the state before it."""

    def decorator(view):
        @never_cache
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not may_open(request.user):
                raise Http404
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def errors_by_field(form: forms.Form) -> dict[str, str]:
    """A refused form's first error for each field, as the pages show them; "form" for the whole form's."""
    return {
        ("form" if name == forms.forms.NON_FIELD_ERRORS else name): str(found[0]) for name, found in form.errors.items()
    }


def wants_partial(request) -> bool:
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page(request, template: str, context: dict, *, partial: str | None = None, nav: str = "", status=200):
    """The whole page, or only the named partial of the same template when htmx asks for it."""
    name = f"{template}#{partial}" if partial and wants_partial(request) else template
    response = render(request, name, {**context, "nav": nav}, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def answer_post(
    request,
    template: str,
    context: Callable[[], dict],
    *,
    partial: str,
    partial_template: str = "",
    page_context: Callable[[], dict] | None = None,
    nav: str = "",
    status: int = 200,
    redirect_to: str = "",
    message: str = "",
    message_level: int = messages.SUCCESS,
) -> HttpResponse:
    """How every page action answers its post. With htmx: the `partial` (of `partial_template` when it is not
    the page's), in place, from `context()`. A plain post: a redirect to `redirect_to` when given
    (post/redirect/get, so a reload does not post again), `message` shown there; otherwise the whole page again
    from `page_context()` (or `context()`) with `status`: 400 when refused, showing what was typed and why.
    The contexts are built only when a page is rendered."""
    if not wants_partial(request):
        if redirect_to:
            if message:
                messages.add_message(request, message_level, message)
            return HttpResponseRedirect(redirect_to)
        return render_page(request, template, (page_context or context)(), nav=nav, status=status)
    return render_page(request, partial_template or template, context(), partial=partial, nav=nav)
