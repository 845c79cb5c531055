"""Admin bases every app uses, and the audit log's read-only page."""

from django.contrib import admin

from calculet.models import AuditEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """A page to look at rows that only services, the seed import or runs write."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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
