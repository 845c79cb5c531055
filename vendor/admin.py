"""Admin for the vendor app. Writes go through the service layer; statuses and states are read-only here."""

from django.contrib import admin, messages

from calculet.admin import ReadOnlyAdmin, ReadOnlyInline, ServiceAdmin
from calculet.errors import DomainError
from vendor import states
from vendor.inputs import QuestionChanges, organisation_draft, organisation_name
from vendor.models import (
    Answer,
    ApiToken,
    Artifact,
    Blob,
    Comment,
    CommentRevision,
    Deliverable,
    DocumentReview,
    Membership,
    Notification,
    NotificationEvent,
    Organisation,
    Question,
    Section,
    Upload,
    Webhook,
    WebhookDelivery,
)
from vendor.services.organisations import organisation_create, organisation_rename, token_revoke
from vendor.services.questions import question_bulk_update, question_update


@admin.register(Organisation)
class OrganisationAdmin(ServiceAdmin):
    """New organisations through `organisation_create`, renames through `organisation_rename`; a slug and a
    kind never change once made."""

    list_display = ["slug", "name", "kind", "created_at"]
    list_filter = ["kind"]
    search_fields = ["slug", "name"]
    fields = ["slug", "name", "kind"]

    def get_readonly_fields(self, request, obj=None):
        return ["slug", "kind"] if obj is not None else []

    def service_save(self, request, obj, form, change):
        if change:
            name = organisation_name(form.cleaned_data["name"])
            organisation_rename(actor=request.user, organisation=obj, name=name)
            return
        data = form.cleaned_data
        created = organisation_create(
            actor=request.user, draft=organisation_draft(data["slug"], data["name"], data["kind"])
        )
        obj.pk = created.pk


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ["user", "organisation", "role"]
    list_filter = ["role", "organisation"]
    list_select_related = ["user", "organisation"]
    search_fields = ["user__username", "organisation__slug"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["name", "prefix", "user", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["revoked_at"]
    list_select_related = ["user"]
    search_fields = ["name", "prefix", "user__username"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            try:
                token_revoke(actor=request.user, token=token)
            except DomainError as error:
                self.message_user(request, f"{token}: {error.message}", messages.ERROR)


@admin.register(Section)
class SectionAdmin(ReadOnlyAdmin):
    list_display = ["code", "title", "blocks", "question_header", "acceptance_header"]


@admin.register(Question)
class QuestionAdmin(ServiceAdmin):
    """Assignee, organisation, priority and due date change through `question_update`; the text comes from
    the seed document and the state moves only by the service's transitions."""

    list_display = ["code", "section", "short_question", "state", "priority", "organisation", "assignee", "due_date"]
    list_filter = ["section", "state", "priority", "organisation"]
    list_select_related = ["section", "organisation", "assignee"]
    search_fields = ["code", "question", "acceptance"]
    fields = [
        "code",
        "section",
        "question",
        "acceptance",
        "state",
        "priority",
        "organisation",
        "assignee",
        "due_date",
        "created_at",
        "updated_at",
    ]
    readonly_fields = [
        "code",
        "section",
        "question",
        "acceptance",
        "state",
        "state_reason",
        "created_at",
        "updated_at",
    ]
    autocomplete_fields = ["assignee"]
    actions = ["close"]

    @admin.action(description="Close the selected questions (every deliverable must be accepted)")
    def close(self, request, queryset):
        try:
            changed = question_bulk_update(
                actor=request.user, questions=list(queryset), changes=QuestionChanges(state=states.CLOSED)
            )
        except DomainError as error:
            self.message_user(request, error.message, messages.ERROR)
        else:
            self.message_user(request, f"{changed} questions closed.", messages.SUCCESS)

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="question")
    def short_question(self, question):
        return question.question[:80]

    def service_save(self, request, obj, form, change):
        changes = {name: form.cleaned_data[name] for name in form.changed_data}
        question_update(actor=request.user, question=obj, changes=QuestionChanges(**changes))


@admin.register(Deliverable)
class DeliverableAdmin(ReadOnlyAdmin):
    """Deliverables come from the seed data (import_checklist); they are accepted or rejected by document
    reviews, static checks and chains (`vendor.services.deliverables`), never edited here."""

    list_display = ["question", "key", "kind", "state", "decided_at", "decided_by"]
    list_filter = ["kind", "state"]
    list_select_related = ["question", "decided_by"]
    search_fields = ["question__code", "key", "title"]


@admin.register(DocumentReview)
class DocumentReviewAdmin(ReadOnlyAdmin):
    """Reviews are recorded on the question page and the API (`acceptance.services.reviews`)."""

    list_display = ["deliverable", "reviewer", "accepted", "created_at"]
    list_filter = ["accepted"]
    list_select_related = ["deliverable__question", "reviewer"]


@admin.register(Blob)
class BlobAdmin(ReadOnlyAdmin):
    list_display = ["sha256", "size", "created_at"]
    search_fields = ["sha256"]


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ["file_name", "version", "kind", "organisation", "state", "declared_size", "created_at"]
    list_filter = ["kind", "state", "organisation"]
    list_select_related = ["organisation"]
    search_fields = ["file_name", "version", "declared_sha256"]


@admin.register(Answer)
class AnswerAdmin(ReadOnlyAdmin):
    list_display = ["question", "organisation", "revision", "complete", "author", "created_at"]
    list_filter = ["complete", "organisation"]
    list_select_related = ["question", "organisation", "author"]
    search_fields = ["question__code", "summary"]


@admin.register(Upload)
class UploadAdmin(ReadOnlyAdmin):
    list_display = ["id", "organisation", "user", "length", "offset", "created_at", "expires_at", "artifact"]
    list_select_related = ["organisation", "user", "artifact"]


class CommentRevisionInline(ReadOnlyInline):
    model = CommentRevision
    fields = readonly_fields = ["revision", "author", "created_at", "body"]


@admin.register(Comment)
class CommentAdmin(ReadOnlyAdmin):
    """Threads are written on the question page and the API (`vendor.services.comments`); here they are read."""

    list_display = ["id", "question", "organisation", "author", "revision", "created_at", "edited_at"]
    list_filter = ["organisation"]
    list_select_related = ["question", "organisation", "author"]
    search_fields = ["question__code", "body"]
    exclude = ["body_html"]
    inlines = [CommentRevisionInline]


class NotificationInline(ReadOnlyInline):
    model = Notification
    fields = readonly_fields = ["user", "email", "emailed_at", "error"]


@admin.register(NotificationEvent)
class NotificationEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "question", "organisation", "actor_label", "created_at"]
    list_filter = ["kind", "organisation"]
    list_select_related = ["question", "organisation"]
    inlines = [NotificationInline]


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    """Hooks are made and changed on the Webhooks page and the API (`vendor.services.webhooks`, audited); the
    secret is never shown again."""

    list_display = ["name", "organisation", "url", "active", "created_at"]
    list_select_related = ["organisation"]
    exclude = ["secret"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "hook", "event", "state", "attempts", "created_at", "finished_at"]
    list_filter = ["state", "hook"]
    list_select_related = ["hook", "event"]
