"""Admin bases every app uses, and the audit log's read-only page."""

from django.contrib import admin, messages
from django.http import HttpResponseRedirect

from calculet.errors import DomainError
from calculet.models import AuditEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """A page to look at rows that only services, the seed import or runs write."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ServiceAdmin(admin.ModelAdmin):
    """An admin page whose saves go through a service (`service_save`), which writes the audit row; a save
    the service refuses changes nothing and says why."""

    def service_save(self, request, obj, form, change) -> None:
        raise NotImplementedError

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        try:
            self.service_save(request, obj, form, change)
        except DomainError as error:
            request.service_refused = True
            field = f"{error.field}: " if error.field else ""
            self.message_user(request, f"Not saved — {field}{error.message}", messages.ERROR)

    def save_related(self, request, form, formsets, change):
        """Related rows are the service's to write."""

    def response_add(self, request, obj, post_url_continue=None):
        if getattr(request, "service_refused", False):
            return HttpResponseRedirect(request.path)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request, obj):
        if getattr(request, "service_refused", False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit log, to read: entries are append-only, so nothing here adds, changes or deletes one."""

    list_display = ["id", "created_at", "actor_label", "action", "object_type", "object_id", "object_repr"]
    list_filter = ["action", "object_type", "actor_label"]
    search_fields = ["object_id", "object_repr", "actor_label"]
    readonly_fields = [f.name for f in AuditEntry._meta.fields]
