from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.template.response import TemplateResponse

from acceptance.inputs import REASON_MAX_CHARS, PromotionRequest, target_token_name
from acceptance.models import CapabilityApproval, Chain, PromotionAttempt, Run, Target, TargetAgent, TargetToken
from acceptance.services import (
    capability_promote,
    run_rerun,
    target_register,
    target_registration_approve,
    target_set_health_schedule,
    target_set_maintenance,
)
from acceptance.services.agents import target_token_create, target_token_revoke
from calculet.admin import ReadOnlyAdmin, ServiceAdmin
from calculet.errors import DomainError
from evidence.grades import STATUS_CHOICES
from evidence.models import Capability
from evidence.services import CAPABILITY_TEXT_FIELDS, capability_update


class PromotionForm(forms.Form):
    to = forms.ChoiceField(choices=STATUS_CHOICES, label="New status")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=REASON_MAX_CHARS)

    def promotion_request(self) -> PromotionRequest:
        """Call only after `is_valid()` held."""
        return PromotionRequest(to=self.cleaned_data["to"], reason=self.cleaned_data["reason"])


@admin.register(Capability)
class CapabilityAdmin(ServiceAdmin):
    """Capabilities. The status is read-only: it moves only through the promotion gate, by the action below.
    Text and links to questions and evidence are saved through `capability_update`, which audits them."""

    list_display = ["slug", "title", "status", "pinned", "pinned_status", "status_changed_at"]
    list_filter = ["status", "pinned"]
    search_fields = ["slug", "title"]
    readonly_fields = ["status", "pinned", "pinned_status", "status_changed_at", "created_at"]
    filter_horizontal = ["evidence", "questions"]
    actions = ["change_status"]

    def has_add_permission(self, request):
        return False

    def service_save(self, request, obj, form, change):
        capability_update(
            actor=request.user,
            capability=obj,
            changes={field: form.cleaned_data[field] for field in CAPABILITY_TEXT_FIELDS if field in form.cleaned_data},
            questions=form.cleaned_data.get("questions"),
            evidence=form.cleaned_data.get("evidence"),
            deliverables=form.cleaned_data.get("deliverables"),
        )

    @admin.action(description="Change status through the promotion gate…")
    def change_status(self, request, queryset):
        form = PromotionForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            for capability in queryset:
                try:
                    attempt = capability_promote(
                        actor=request.user, capability=capability, request=form.promotion_request()
                    )
                except DomainError as error:
                    self.message_user(request, f"{capability.slug}: {error.message}", messages.ERROR)
                    continue
                if attempt.allowed:
                    self.message_user(request, f"{capability.slug}: {attempt.from_status} → {attempt.to_status}.")
                else:
                    why = "; ".join(item["message"] for item in attempt.reasons)
                    self.message_user(request, f"{capability.slug}: blocked — {why}", messages.WARNING)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Change status through the promotion gate",
            "form": form,
            "queryset": queryset,
            "opts": self.model._meta,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/acceptance/change-status.html", context)


@admin.register(Target)
class TargetAdmin(ServiceAdmin):
    """Targets. Versions and the runner command are saved through `target_register` (which makes dependent
    stages stale and refuses a hardware target without a runner command); health comes from heartbeats and
    health checks; maintenance is switched by the actions."""

    list_display = ["slug", "kind", "queue", "health", "maintenance", "calrt_version", "last_heartbeat_at"]
    list_filter = ["kind", "health", "maintenance"]
    fields = [
        "slug",
        "name",
        "kind",
        "queue",
        "calrt_version",
        "driver_version",
        "firmware_version",
        "chip",
        "runner_command",
        "runner_digest",
        "registration_pending",
        "registration_approved_at",
        "health_check_every_runs",
        "health_check_every_hours",
        "health",
        "health_reason",
        "maintenance",
        "last_heartbeat_at",
        "last_heartbeat_worker",
        "last_health_check_at",
        "last_health_check_passed",
        "last_health_run",
    ]
    readonly_fields = [
        "runner_digest",
        "registration_pending",
        "registration_approved_at",
        "health",
        "health_reason",
        "maintenance",
        "last_heartbeat_at",
        "last_heartbeat_worker",
        "last_health_check_at",
        "last_health_check_passed",
        "last_health_run",
    ]
    actions = ["enter_maintenance", "leave_maintenance", "make_agent_token", "approve_registration"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "slug", "kind", "queue"] if obj else self.readonly_fields

    def service_save(self, request, obj, form, change):
        # One change: a schedule refused (a bad value, or not a PM's or operator's) leaves the versions unsaved too.
        with transaction.atomic():
            saved = target_register(
                actor=request.user,
                slug=obj.slug,
                kind=obj.kind,
                name=obj.name,
                queue=obj.queue,
                calrt_version=obj.calrt_version,
                driver_version=obj.driver_version,
                firmware_version=obj.firmware_version,
                chip=obj.chip,
                runner_command=obj.runner_command,
            )
            schedule = (obj.health_check_every_runs, obj.health_check_every_hours)
            if schedule != (saved.health_check_every_runs, saved.health_check_every_hours):
                target_set_health_schedule(
                    actor=request.user, target=saved, every_runs=schedule[0], every_hours=schedule[1]
                )
        obj.pk = saved.pk

    def _set_maintenance(self, request, queryset, maintenance: bool) -> None:
        for target in queryset:
            try:
                target_set_maintenance(actor=request.user, target=target, maintenance=maintenance, reason="admin")
            except DomainError as error:
                self.message_user(request, f"{target.slug}: {error.message}", messages.ERROR)

    @admin.action(description="Put in maintenance (no new runs)")
    def enter_maintenance(self, request, queryset):
        self._set_maintenance(request, queryset, True)

    @admin.action(description="Bring back from maintenance (health check first)")
    def leave_maintenance(self, request, queryset):
        self._set_maintenance(request, queryset, False)

    @admin.action(description="Approve what the agent registered (back in rotation)")
    def approve_registration(self, request, queryset):
        for target in queryset:
            try:
                target_registration_approve(actor=request.user, target=target)
            except DomainError as error:
                self.message_user(request, f"{target.slug}: {error.message}", messages.ERROR)
                continue
            self.message_user(request, f"{target.slug}: registration approved.")

    @admin.action(description="Make a calculet-agent token (its key is shown once)")
    def make_agent_token(self, request, queryset):
        for target in queryset:
            name = target_token_name(f"made by {request.user}")
            token, key = target_token_create(actor=request.user, target=target, name=name)
            shown_once = f"{target.slug}: token {token.pk}, key {key} (copy it now; only its hash is kept)"
            self.message_user(request, shown_once, messages.WARNING)


@admin.register(TargetToken)
class TargetTokenAdmin(ReadOnlyAdmin):
    """The tokens targets' agents hold (made with the targets' action or `manage.py target_token`)."""

    list_display = ["id", "target", "name", "prefix", "created_by", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["target"]
    list_select_related = ["target"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke (their agents stop; their runs are sent again)")
    def revoke(self, request, queryset):
        for token in queryset:
            target_token_revoke(actor=request.user, token=token)


@admin.register(TargetAgent)
class TargetAgentAdmin(ReadOnlyAdmin):
    """Each agent as it registered, with its last poll, the run it holds and the size of its input cache."""

    list_display = ["id", "target", "host", "agent_version", "last_poll_at", "current_run", "cache_bytes"]
    list_filter = ["target"]
    list_select_related = ["target", "current_run"]


@admin.register(Chain)
class ChainAdmin(ReadOnlyAdmin):
    list_display = ["id", "question", "capability", "target", "answer", "updated_at"]
    list_filter = ["target"]
    list_select_related = ["question", "capability", "target", "answer__question"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "stage", "target", "state", "verdict", "attempt", "progress", "created_at", "finished_at"]
    list_filter = ["state", "stage", "target", "verdict"]
    list_select_related = ["target"]
    exclude = ["artifacts"]
    actions = ["rerun"]

    @admin.action(description="Re-run the selected runs' stages")
    def rerun(self, request, queryset):
        for run in queryset:
            try:
                new = run_rerun(actor=request.user, run=run)
            except DomainError as error:
                self.message_user(request, f"run {run.pk}: {error.message}", messages.ERROR)
                continue
            self.message_user(request, f"run {run.pk}: re-run as run {new.pk}.")


@admin.register(PromotionAttempt)
class PromotionAttemptAdmin(ReadOnlyAdmin):
    list_display = ["id", "capability", "from_status", "to_status", "allowed", "actor_label", "created_at"]
    list_filter = ["allowed", "to_status"]
    list_select_related = ["capability"]


@admin.register(CapabilityApproval)
class CapabilityApprovalAdmin(ReadOnlyAdmin):
    """Approvals are given as each member, through the page, the API or approve_capability: read here only."""

    list_display = ["id", "capability", "from_status", "to_status", "approver", "created_at", "revoked_at"]
    list_filter = ["to_status"]
    list_select_related = ["capability", "approver"]
    exclude = ["runs"]
