"""The forms of the notification and webhook pages' posts: each parses what a page posts into the typed input
its service takes (`vendor.inputs.NotificationPreferences`, `WebhookDraft`, `WebhookChanges`), once, with the
same parse and the same words as the API. The services check the rules (which hosts a hook may post to, who
may)."""

from collections.abc import Callable

from django import forms
from django.utils.translation import gettext_lazy as _

from calculet.errors import DomainError
from vendor.inputs import (
    NotificationPreferences,
    WebhookChanges,
    WebhookDraft,
    event_kinds,
    notification_preferences,
    webhook_name,
    webhook_url,
)
from vendor.selectors import organisations

CHOOSE_ORGANISATION = _("Choose an organisation from the list.")


class TextListField(forms.Field):
    """The values posted under one name, one each (ticked boxes); which of them exist is the form's clean."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[str]:
        return [str(item) for item in value or []]


def _parsed(parse: Callable, *args, **kwargs):
    """What `vendor.inputs`' parse makes of the value, its refusal as the field's error."""
    try:
        return parse(*args, **kwargs)
    except DomainError as error:
        raise forms.ValidationError(error.message) from None


class NotificationPreferencesForm(forms.Form):
    """A person's own preferences: the address, the language, and the kinds ticked (those not ticked, of the
    kinds the person may be told of, are muted)."""

    email = forms.CharField(required=False, strip=False)  # stripped by the parse, which checks its length
    language = forms.CharField(required=False, strip=False)
    events = TextListField(required=False)

    def __init__(self, data, *, kinds: list[str]):
        super().__init__(data)
        self.kinds = kinds

    def clean(self):
        data = super().clean()
        wanted = set(data.get("events", []))
        try:
            self.preferences: NotificationPreferences = notification_preferences(
                email=data.get("email", ""),
                language=data.get("language", ""),
                muted=[kind for kind in self.kinds if kind not in wanted],
            )
        except DomainError as error:
            # The muted kinds are the kinds not ticked: their error is the ticked boxes'.
            self.add_error("events" if error.field == "muted" else error.field, error.message)
        return data

    def shown(self) -> dict:
        """What was posted, as the page shows it again."""
        wanted = set(self.data.getlist("events"))
        return {
            "email": self.data.get("email", ""),
            "language": self.data.get("language", ""),
            "muted": [kind for kind in self.kinds if kind not in wanted],
        }


class WebhookForm(forms.Form):
    """A hook changed on its page: its name, address, event kinds (none ticked: all) and whether it is active."""

    name = forms.CharField(required=False, strip=False)  # stripped by the parse, which checks its length
    url = forms.CharField(required=False, strip=False)
    events = TextListField(required=False)
    active = forms.BooleanField(required=False)

    def clean_name(self) -> str:
        return _parsed(webhook_name, self.cleaned_data["name"])

    def clean_url(self) -> str:
        return _parsed(webhook_url, self.cleaned_data["url"])

    def clean_events(self) -> tuple[str, ...]:
        return _parsed(event_kinds, self.cleaned_data["events"], field="events")

    def shown(self) -> dict:
        """What was posted, as the page shows it again."""
        data = self.data
        return {
            "organisation": data.get("organisation", ""),
            "name": data.get("name", ""),
            "url": data.get("url", ""),
            "kinds": data.getlist("events"),
            "active": data.get("active") == "on",
        }

    def changes(self) -> WebhookChanges:
        """The hook's fields as posted; call only after `is_valid()` held."""
        data = self.cleaned_data
        return WebhookChanges(name=data["name"], url=data["url"], events=data["events"], active=data["active"])


class WebhookCreateForm(WebhookForm):
    """A new hook: a hook's fields and the organisation whose events it may carry (by slug)."""

    organisation = forms.ModelChoiceField(
        queryset=organisations(),
        to_field_name="slug",
        error_messages={"required": CHOOSE_ORGANISATION, "invalid_choice": CHOOSE_ORGANISATION},
    )

    def draft(self) -> WebhookDraft:
        """The new hook as posted; call only after `is_valid()` held."""
        data = self.cleaned_data
        return WebhookDraft(
            organisation=data["organisation"], name=data["name"], url=data["url"], events=data["events"]
        )
