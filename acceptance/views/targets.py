"""The dashboard's targets panel's forms: a PM or operator approves what an agent registered of a target, and
sets how often its health check is due."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from acceptance.models import Target
from acceptance.services import target_registration_approve, target_set_health_schedule
from acceptance.views.forms import TargetHealthScheduleForm
from calculet import web
from calculet.errors import DomainError
from calculet.web import errors_by_field
from vendor.access import may_approve_moves


@require_POST
@web.page_for(may_approve_moves)
def target_registration_approve_view(request, slug):
    target = get_object_or_404(Target, slug=slug)
    try:
        target_registration_approve(actor=request.user, target=target)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The registration of %(target)s is approved.") % {"target": target.slug})
    return redirect(reverse("dashboard") + "#targets")


@require_POST
@web.page_for(may_approve_moves)
def target_health_schedule_view(request, slug):
    target = get_object_or_404(Target, slug=slug)
    form = TargetHealthScheduleForm(request.POST)
    if not form.is_valid():
        messages.error(request, next(iter(errors_by_field(form).values())))
        return redirect(reverse("dashboard") + "#targets")
    try:
        target_set_health_schedule(actor=request.user, target=target, **form.cleaned_data)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The health check schedule of %(target)s is saved.") % {"target": target.slug})
    return redirect(reverse("dashboard") + "#targets")
