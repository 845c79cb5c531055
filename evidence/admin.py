"""Admin pages for what the seed import and runs write. Read-only: the checklist document is the source
(change it and run import_checklist); capabilities have their own admin with the promotion gate's actions."""

from django.contrib import admin

from calculet.admin import ReadOnlyAdmin, ReadOnlyInline
from evidence.models import (
    Archive,
    ChecklistDocument,
    EvidenceGrade,
    EvidenceItem,
    EvidenceStatus,
    EvidenceTable,
    PathAlias,
    SourceReference,
)


@admin.register(ChecklistDocument)
class ChecklistDocumentAdmin(ReadOnlyAdmin):
    list_display = ["title", "date", "source_sha256", "imported_at"]


@admin.register(PathAlias)
class PathAliasAdmin(ReadOnlyAdmin):
    list_display = ["name", "path", "expanded_path"]


@admin.register(Archive)
class ArchiveAdmin(ReadOnlyAdmin):
    list_display = ["name", "sha256", "description"]


@admin.register(EvidenceTable)
class EvidenceTableAdmin(ReadOnlyAdmin):
    list_display = ["section", "prefix", "title"]


class EvidenceGradeInline(ReadOnlyInline):
    model = EvidenceGrade


class EvidenceStatusInline(ReadOnlyInline):
    model = EvidenceStatus


class SourceReferenceInline(ReadOnlyInline):
    model = SourceReference
    fields = ["position", "raw", "alias", "path", "lines", "line_ranges", "same_file"]


@admin.register(EvidenceItem)
class EvidenceItemAdmin(ReadOnlyAdmin):
    list_display = ["code", "table", "conclusion", "grade_text", "defect", "limitation", "origin"]
    list_filter = ["table", "origin", "defect", "limitation", "grades__grade", "statuses__status"]
    list_select_related = ["table"]
    search_fields = ["code", "conclusion", "source_text", "grade_text"]
    inlines = [EvidenceGradeInline, EvidenceStatusInline, SourceReferenceInline]


@admin.register(EvidenceGrade)
class EvidenceGradeAdmin(ReadOnlyAdmin):
    list_display = ["item", "grade"]
    list_filter = ["grade"]
    list_select_related = ["item"]


@admin.register(EvidenceStatus)
class EvidenceStatusAdmin(ReadOnlyAdmin):
    list_display = ["item", "status", "qualifier"]
    list_filter = ["status"]
    list_select_related = ["item"]


@admin.register(SourceReference)
class SourceReferenceAdmin(ReadOnlyAdmin):
    list_display = ["item", "position", "raw", "alias", "path", "lines", "same_file"]
    list_filter = ["alias", "same_file"]
    list_select_related = ["item", "alias"]
    search_fields = ["raw", "path"]
