"""Notifications over the API: your own preferences and what you were told; webhooks for PMs."""

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from calculet.api import Api, StrictSerializer
from calculet.errors import DomainError, ForbiddenError
from vendor import events
from vendor.access import may_manage_webhooks
from vendor.inputs import (
    EMAIL_MAX_CHARS,
    KEEP,
    LANGUAGE_CODES,
    WEBHOOK_NAME_MAX_CHARS,
    WEBHOOK_URL_MAX_CHARS,
    NotificationPreferences,
    WebhookChanges,
    WebhookDraft,
    event_kinds,
    webhook_url,
)
from vendor.models import Notification, Organisation, Webhook, WebhookDelivery
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


class PreferencesOutputSerializer(serializers.Serializer):
    events = serializers.ListField(child=serializers.CharField(), help_text="The kinds you can be told of.")
    muted = serializers.ListField(child=serializers.CharField(), help_text="The kinds you are not told of.")
    language = serializers.ChoiceField(choices=LANGUAGE_CODES, help_text="The language of your e-mails.")
    email = serializers.CharField(allow_blank=True, help_text="Where e-mails go; empty: none are sent.")


class PreferencesInputSerializer(StrictSerializer):
    muted = serializers.ListField(
        child=serializers.ChoiceField(choices=events.CHOOSABLE), required=False, max_length=len(events.CHOOSABLE)
    )
    language = serializers.ChoiceField(choices=LANGUAGE_CODES, required=False)
    email = serializers.EmailField(allow_blank=True, required=False, max_length=EMAIL_MAX_CHARS)

    def preferences(self, current: dict) -> NotificationPreferences:
        """The preferences as the service takes them: the fields given, the `current` ones for the others;
        call only after `is_valid()` held."""
        data = {**current, **self.validated_data}
        return NotificationPreferences(
            muted=event_kinds(data["muted"], field="muted"), language=data["language"], email=data["email"]
        )


def _preferences(user) -> dict:
    preference = notification_preference(user)
    return {
        "events": notification_kinds(user),
        "muted": preference.muted,
        "language": preference.language,
        "email": user.email,
    }


class NotificationPreferencesApi(Api):
    @extend_schema(responses=PreferencesOutputSerializer)
    def get(self, request):
        """What you are told of, in which language, and where."""
        return Response(PreferencesOutputSerializer(_preferences(request.user)).data)

    @extend_schema(request=PreferencesInputSerializer, responses=PreferencesOutputSerializer)
    def patch(self, request):
        """Change any of them; the others stay."""
        serializer = PreferencesInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        preferences = serializer.preferences(_preferences(request.user))
        notification_preferences_update(actor=request.user, user=request.user, preferences=preferences)
        return Response(PreferencesOutputSerializer(_preferences(request.user)).data)


class NotificationOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    event = serializers.ChoiceField(choices=events.CHOICES, source="event.kind")
    summary = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    emailed_at = serializers.DateTimeField(allow_null=True)

    def get_summary(self, notification) -> str:
        return events.subject(notification.event.kind, notification.event.data)

    def get_url(self, notification) -> str | None:
        return events.url(notification.event.data) or None


class NotificationListApi(Api, ListAPIView):
    """What you were told, newest first."""

    queryset = Notification.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = NotificationOutputSerializer
    filterset_fields: list[str] = []
    ordering_fields: list[str] = []

    def get_queryset(self):
        return notification_list(user=self.request.user)


class WebhookOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    organisation = serializers.CharField(source="organisation.slug")
    name = serializers.CharField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField(), help_text="The kinds it receives; empty: all.")
    active = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class WebhookCreatedSerializer(WebhookOutputSerializer):
    secret = serializers.CharField(help_text="The key of X-Calculet-Signature: shown this once, never again.")


class WebhookInputSerializer(StrictSerializer):
    organisation = serializers.CharField(
        help_text="The slug of the organisation whose events it carries: the integration team's for all, a "
        "vendor's for that vendor's alone."
    )
    name = serializers.CharField(max_length=WEBHOOK_NAME_MAX_CHARS)
    url = serializers.CharField(max_length=WEBHOOK_URL_MAX_CHARS, help_text="An http:// or https:// address.")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=events.CHOOSABLE), required=False, max_length=len(events.CHOOSABLE)
    )
    active = serializers.BooleanField(required=False)

    # The address's form is checked as the typed input is built, after the organisation is found, so that a
    # refusal names the field it named before: `webhook_url` raises DomainError on "url".
    def draft(self, organisation: Organisation) -> WebhookDraft:
        """The new hook as the service takes it; call only after `is_valid()` held."""
        data = self.validated_data
        return WebhookDraft(
            organisation=organisation,
            name=data["name"],
            url=webhook_url(data["url"]),
            events=event_kinds(data.get("events", []), field="events"),
        )

    def changes(self) -> WebhookChanges:
        """The fields given (a partial body), as the service takes them; call only after `is_valid()` held."""
        data = self.validated_data
        return WebhookChanges(
            name=data.get("name", KEEP),
            url=webhook_url(data["url"]) if "url" in data else KEEP,
            events=event_kinds(data["events"], field="events") if "events" in data else KEEP,
            active=data.get("active", KEEP),
        )


class WebhookDeliveryOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    event = serializers.ChoiceField(choices=events.CHOICES, source="event.kind")
    state = serializers.ChoiceField(choices=WebhookDelivery.STATES)
    attempts = serializers.IntegerField()
    log = serializers.JSONField(help_text='Every attempt: {"at", "status", "error", "ms"}.')
    body = serializers.CharField(help_text="The exact JSON that was signed and sent.")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


def _check(user) -> None:
    if not may_manage_webhooks(user):
        raise ForbiddenError(gettext_noop("Only a PM manages webhooks."))


def _hook(user, hook_id) -> Webhook:
    _check(user)
    return get_object_or_404(webhook_list(), pk=hook_id)


def _organisation(slug: str) -> Organisation:
    organisation = organisations().filter(slug=slug).first()
    if organisation is None:
        raise DomainError(
            gettext_noop("Organisation %(organisation)s not found."),
            field="organisation",
            code="not_found",
            params={"organisation": slug},
        )
    return organisation


class WebhookListApi(Api, ListAPIView):
    """Outgoing webhooks (PMs only)."""

    queryset = Webhook.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = WebhookOutputSerializer
    filterset_fields: list[str] = []
    ordering_fields: list[str] = []

    def get_queryset(self):
        _check(self.request.user)
        return webhook_list()

    @extend_schema(request=WebhookInputSerializer, responses={201: WebhookCreatedSerializer})
    def post(self, request):
        """A new hook. The response holds its secret, never shown again."""
        _check(request.user)
        serializer = WebhookInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        draft = serializer.draft(_organisation(serializer.validated_data["organisation"]))
        hook = webhook_create(actor=request.user, draft=draft)
        if serializer.validated_data.get("active") is False:
            hook = webhook_update(actor=request.user, hook=hook, changes=WebhookChanges(active=False))
        return Response(WebhookCreatedSerializer(hook).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(Api):
    @extend_schema(responses=WebhookOutputSerializer)
    def get(self, request, hook_id):
        return Response(WebhookOutputSerializer(_hook(request.user, hook_id)).data)

    @extend_schema(request=WebhookInputSerializer(partial=True), responses=WebhookOutputSerializer)
    def patch(self, request, hook_id):
        """Change its name, address, event kinds or whether it is active; its organisation stays."""
        hook = _hook(request.user, hook_id)
        serializer = WebhookInputSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        if "organisation" in serializer.validated_data:
            raise DomainError(
                gettext_noop("A hook's organisation does not change; make another hook."),
                field="organisation",
            )
        hook = webhook_update(actor=request.user, hook=hook, changes=serializer.changes())
        return Response(WebhookOutputSerializer(hook).data)


class WebhookTestApi(Api):
    @extend_schema(request=None, responses={202: WebhookDeliveryOutputSerializer})
    def post(self, request, hook_id):
        """Send the hook a test event; its delivery is logged like any other."""
        delivery = webhook_test(actor=request.user, hook=_hook(request.user, hook_id))
        return Response(WebhookDeliveryOutputSerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


class WebhookDeliveryListApi(Api, ListAPIView):
    """A hook's deliveries, newest first, with every attempt."""

    queryset = WebhookDelivery.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = WebhookDeliveryOutputSerializer
    filterset_fields = ["state"]
    ordering_fields: list[str] = []

    def get_queryset(self):
        return webhook_deliveries(_hook(self.request.user, self.kwargs["hook_id"]))
