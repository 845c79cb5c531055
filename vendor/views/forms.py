"""The forms of the notification and webhook pages' posts: each parses what a page posts into the values its
service takes, once. The services check the rules (which event kinds and languages exist, a valid address,
who may)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from vendor.selectors import organisations

CHOOSE_ORGANISATION = _("Choose an organisation from the list.")


class TextListField(forms.Field):
    """The values posted under one name, one each (ticked boxes); which of them exist is the service's to say."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[str]:
        return [str(item) for item in value or []]


class NotificationPreferencesForm(forms.Form):
    """A person's own preferences: the address, the language, and the kinds ticked (those not ticked, of the
    kinds the person may be told of, are muted)."""

    email = forms.CharField(required=False, strip=False)
    language = forms.CharField(required=False, strip=False)
    events = TextListField(required=False)

    def __init__(self, data, *, kinds: list[str]):
        super().__init__(data)
        self.kinds = kinds

    def preferences(self) -> dict:
        """The service's arguments, and what the page shows again; call only after `is_valid()` held."""
        wanted = set(self.cleaned_data["events"])
        return {
            "email": self.cleaned_data["email"],
            "language": self.cleaned_data["language"],
            "muted": [kind for kind in self.kinds if kind not in wanted],
        }


class WebhookForm(forms.Form):
    """A hook changed on its page: its name, address, event kinds (none ticked: all) and whether it is active."""

    name = forms.CharField(required=False, strip=False)
    url = forms.CharField(required=False, strip=False)
    events = TextListField(required=False)
    active = forms.BooleanField(required=False)

    def changes(self) -> dict:
        """The service's arguments; call only after `is_valid()` held."""
        data = self.cleaned_data
        return {"name": data["name"], "url": data["url"], "kinds": data["events"], "active": data["active"]}


class WebhookCreateForm(WebhookForm):
    """A new hook: a hook's fields and the organisation whose events it may carry (by slug)."""

    organisation = forms.ModelChoiceField(
        queryset=organisations(),
        to_field_name="slug",
        error_messages={"required": CHOOSE_ORGANISATION, "invalid_choice": CHOOSE_ORGANISATION},
    )

    def typed(self) -> dict:
        """What was posted, as the page shows it again."""
        data = self.data
        return {
            "organisation": data.get("organisation", ""),
            "name": data.get("name", ""),
            "url": data.get("url", ""),
            "kinds": data.getlist("events"),
            "active": data.get("active") == "on",
        }
