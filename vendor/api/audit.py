"""The audit log over the API, for those `vendor.access.may_read_audit` lets in."""

import datetime

import django_filters
from django.core.exceptions import ValidationError
from django.utils.translation import gettext, gettext_noop
from django_filters.fields import IsoDateTimeField
from rest_framework import serializers
from rest_framework.generics import ListAPIView

from calculet import labels
from calculet.api import Api
from calculet.errors import ForbiddenError
from calculet.models import AuditEntry
from vendor.access import may_read_audit
from vendor.selectors import audit_entries


class AuditOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField(source="actor_label")
    action = serializers.CharField()
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    hash = serializers.CharField()


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 date and time, turned into UTC: PostgreSQL refuses offsets Python accepts (+21:46)."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return None
        try:
            return value.astimezone(datetime.UTC)
        except OverflowError as error:
            raise ValidationError(gettext("The date and time is out of range."), code="invalid") from error


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class AuditFilter(django_filters.FilterSet):
    # A choice, so that an action nothing records is refused rather than matching nothing.
    action = django_filters.ChoiceFilter(choices=[(value, value) for value in labels.values("audit_action")])
    actor = django_filters.CharFilter(field_name="actor_label")
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = ["action", "object_type", "object_id", "actor", "created_after", "created_before"]


class AuditListApi(Api, ListAPIView):
    """The append-only audit log, newest first (PMs only)."""

    queryset = AuditEntry.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = AuditOutputSerializer
    filterset_class = AuditFilter
    ordering_fields = ["id", "created_at"]
    ordering = ["-id"]

    def get_queryset(self):
        if not may_read_audit(self.request.user):
            raise ForbiddenError(gettext_noop("Only a PM reads the audit log."))
        return audit_entries()
