"""Notification pages: each person's preferences and what they were told; the PMs' webhooks with their delivery
logs. The rules are `vendor.services.notifications` and `vendor.services.webhooks`'."""

import datetime
from dataclasses import dataclass

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from calculet import web
from calculet.errors import DomainError
from calculet.web import errors_by_field
from vendor import events
from vendor.access import may_manage_webhooks, may_open_pages
from vendor.inputs import EMAIL_MAX_CHARS, WEBHOOK_NAME_MAX_CHARS, WEBHOOK_URL_MAX_CHARS
from vendor.models import WebhookDelivery
from vendor.selectors import (
    notification_kinds,
    notification_list,
    notification_preference,
    organisations,
    webhook_deliveries,
    webhook_list,
)
from vendor.services.notifications import notification_preferences_update
from vendor.services.webhooks import webhook_create, webhook_test, webhook_update
from vendor.views.forms import NotificationPreferencesForm, WebhookCreateForm, WebhookForm

RECENT_NOTIFICATIONS = 50
DELIVERIES_PAGE_SIZE = 25


def _kinds(kinds: list[str]) -> list[tuple[str, str]]:
    return [(kind, str(events.EVENTS[kind].label)) for kind in kinds]


@dataclass(frozen=True)
class ToldRow:
    """A notification as the page lists it: when, its event's subject and page (empty: none), and how its
    e-mail went (`emailed_at`, else `error`, else on its way to `email`, or no address)."""

    pk: int
    created_at: datetime.datetime
    summary: str
    path: str
    email: str
    emailed_at: datetime.datetime | None
    error: str


def _told(user) -> list[ToldRow]:
    return [
        ToldRow(
            pk=notification.pk,
            created_at=notification.created_at,
            summary=events.subject(notification.event.kind, notification.event.data),
            path=notification.event.data.get("path", ""),
            email=notification.email,
            emailed_at=notification.emailed_at,
            error=notification.error,
        )
        for notification in notification_list(user=user)[:RECENT_NOTIFICATIONS]
    ]


def _refused(error: DomainError) -> dict:
    return {error.field if error.field else "form": error.message}


@web.page_for(may_open_pages)
def notification_preferences(request):
    """What the signed-in person is told of, in which language and where; and what they were told lately."""
    user = request.user
    kinds = notification_kinds(user)
    preference = notification_preference(user)
    form = {"email": user.email, "language": preference.language, "muted": preference.muted}
    errors: dict = {}
    if request.method == "POST":
        posted = NotificationPreferencesForm(request.POST, kinds=kinds)
        form = posted.shown()
        if not posted.is_valid():
            errors = errors_by_field(posted)
        else:
            try:
                notification_preferences_update(actor=user, user=user, preferences=posted.preferences)
            except DomainError as error:
                errors = _refused(error)
            else:
                messages.success(request, _("Your notification preferences are saved."))
                return HttpResponseRedirect(reverse("notifications"))
    context = {
        "form": form,
        "errors": errors,
        "kinds": _kinds(kinds),
        "email_max_chars": EMAIL_MAX_CHARS,
        "told": _told(user),
        "may_manage_webhooks": may_manage_webhooks(user),
    }
    return web.render_page(
        request, "vendor/notifications.html", context, nav="notifications", status=400 if errors else 200
    )


def _hooks_context(**extra) -> dict:
    return {
        "hooks": list(webhook_list()),
        "organisations": list(organisations()),
        "kinds": _kinds(events.CHOOSABLE),
        "name_max_chars": WEBHOOK_NAME_MAX_CHARS,
        "url_max_chars": WEBHOOK_URL_MAX_CHARS,
        **extra,
    }


@web.page_for(may_manage_webhooks)
def webhook_list_page(request):
    """Every hook, and the form to make one; the new hook's secret is shown once, on the page it lands on."""
    # The team's own hook, which hears every event, is the one most made; a vendor's is chosen on purpose.
    team = getattr(getattr(request.user, "membership", None), "organisation", None)
    form = {"organisation": team.slug if team else "", "name": "", "url": "", "kinds": [], "active": True}
    errors: dict = {}
    if request.method == "POST":
        posted = WebhookCreateForm(request.POST)
        form = posted.shown()
        if not posted.is_valid():
            errors = errors_by_field(posted)
        else:
            try:
                hook = webhook_create(actor=request.user, draft=posted.draft())
            except DomainError as error:
                errors = _refused(error)
            else:
                messages.success(
                    request,
                    _("Webhook made. Its secret, shown this once: %(secret)s") % {"secret": hook.secret},
                )
                return HttpResponseRedirect(reverse("webhook-detail", args=[hook.pk]))
    context = _hooks_context(form=form, errors=errors)
    return web.render_page(request, "vendor/webhooks.html", context, nav="notifications", status=400 if errors else 200)


def _detail_context(request, hook, **extra) -> dict:
    page = Paginator(webhook_deliveries(hook), DELIVERIES_PAGE_SIZE).get_page(request.GET.get("page"))
    return {
        "hook": hook,
        "deliveries": page,
        # The log refreshes itself while a delivery on this page is still being tried.
        "deliveries_pending": any(delivery.state == WebhookDelivery.PENDING for delivery in page),
        "params": request.GET,
        **_hooks_context(**extra),
    }


@web.page_for(may_manage_webhooks)
def webhook_detail(request, hook_id):
    """One hook: change it, send it a test, and read its delivery log (each attempt, and the body signed)."""
    hook = get_object_or_404(webhook_list(), pk=hook_id)
    form = {"name": hook.name, "url": hook.url, "kinds": hook.events, "active": hook.active}
    errors: dict = {}
    if request.method == "POST":
        posted = WebhookForm(request.POST)
        form = posted.shown()
        if not posted.is_valid():
            errors = errors_by_field(posted)
        else:
            try:
                webhook_update(actor=request.user, hook=hook, changes=posted.changes())
            except DomainError as error:
                errors = _refused(error)
            else:
                messages.success(request, _("Webhook saved."))
                return HttpResponseRedirect(reverse("webhook-detail", args=[hook.pk]))
    if web.wants_partial(request):
        return web.render_page(
            request, "vendor/webhook-detail.html", _detail_context(request, hook), partial="deliveries"
        )
    context = _detail_context(request, hook, form=form, errors=errors)
    return web.render_page(
        request, "vendor/webhook-detail.html", context, nav="notifications", status=400 if errors else 200
    )


@require_POST
@web.page_for(may_manage_webhooks)
def webhook_test_view(request, hook_id):
    """Send the hook a test event; its delivery appears in the log like any other."""
    hook = get_object_or_404(webhook_list(), pk=hook_id)
    webhook_test(actor=request.user, hook=hook)
    return web.answer_post(
        request,
        "vendor/webhook-detail.html",
        lambda: _detail_context(request, hook),
        partial="deliveries",
        redirect_to=reverse("webhook-detail", args=[hook.pk]),
        message=_("A test event is on its way; its delivery is logged below."),
    )
