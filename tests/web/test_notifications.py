"""The notification pages: each person's preferences and what they were told; the PMs' webhooks."""

import pytest
from django.urls import reverse

from calculet.actors import SYSTEM
from calculet.models import AuditEntry
from tests.factories import make_user, put_to
from vendor.inputs import WebhookDraft
from vendor.models import NotificationPreference, Question, Webhook
from vendor.services.notifications import notify
from vendor.services.webhooks import webhook_create


@pytest.mark.django_db
def test_preferences_are_saved_and_shown(pm_client, pm):
    page = pm_client.get(reverse("notifications")).content.decode()
    assert 'name="events" value="assigned" checked' in page and 'value="promotion_blocked"' in page
    response = pm_client.post(
        reverse("notifications"),
        {"email": "ada@example.org", "language": "zh-hans", "events": ["assigned", "mention"]},
    )
    assert response.status_code == 302 and response["Location"] == reverse("notifications")
    preference = NotificationPreference.objects.get(user=pm)
    assert preference.language == "zh-hans" and "comment" in preference.muted and "assigned" not in preference.muted
    pm.refresh_from_db()
    assert pm.email == "ada@example.org"
    page = pm_client.get(reverse("notifications")).content.decode()
    assert 'value="comment" >' in page or 'value="comment"' in page
    assert "Your notification preferences are saved." in page


@pytest.mark.django_db
def test_a_bad_address_is_refused_and_nothing_changes(pm_client, pm):
    audit_rows = AuditEntry.objects.count()
    response = pm_client.post(reverse("notifications"), {"email": "not-an-address", "language": "en"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Enter a valid e-mail address." in body and 'value="not-an-address"' in body
    assert 'data-for="notify-email" data-limit="254"' in body
    assert not NotificationPreference.objects.exists() and AuditEntry.objects.count() == audit_rows


@pytest.mark.django_db
def test_an_unknown_language_is_refused_under_its_field_and_nothing_changes(pm_client, pm):
    audit_rows = AuditEntry.objects.count()
    response = pm_client.post(reverse("notifications"), {"email": "", "language": "fr", "events": ["assigned"]})
    assert response.status_code == 400
    body = response.content.decode()
    assert '<p class="field-error" role="alert">The language is one of: en, zh-hans.</p>' in body
    assert 'name="events" value="assigned" checked' in body and 'name="events" value="comment" >' in body
    assert not NotificationPreference.objects.exists() and AuditEntry.objects.count() == audit_rows


@pytest.mark.django_db
def test_a_vendor_chooses_only_what_it_can_be_told_and_sees_what_it_was_told(
    client, pm, acme, acme_engineer, checklist
):
    put_to(pm, acme, "V18")
    notify(
        "overdue",
        actor=SYSTEM,
        organisation_id=acme.pk,
        question_id=Question.objects.get(code="V18").pk,
        named_ids=[],
        data={"due_date": "2026-01-02"},
    )
    Question.objects.filter(code="V18").update(assignee=acme_engineer)
    notify(
        "overdue",
        actor=SYSTEM,
        organisation_id=acme.pk,
        question_id=Question.objects.get(code="V18").pk,
        data={"due_date": "2026-01-03"},
    )
    client.force_login(acme_engineer)
    page = client.get(reverse("notifications")).content.decode()
    assert 'value="promotion_blocked"' not in page and 'value="mention"' in page
    assert "V18 is overdue: it was due on 2026-01-03" in page and 'href="/questions/V18/"' in page
    assert "not e-mailed: no address" in page
    assert reverse("webhook-list") not in page


@pytest.mark.django_db
def test_a_pm_makes_a_webhook_and_sees_its_secret_once(pm_client, pm):
    team = pm.membership.organisation
    response = pm_client.post(
        reverse("webhook-list"),
        {"organisation": team.slug, "name": "chat", "url": "https://chat.example.org/in", "events": ["overdue"]},
    )
    hook = Webhook.objects.get()
    assert response["Location"] == reverse("webhook-detail", args=[hook.pk])
    first = pm_client.get(response["Location"]).content.decode()
    assert hook.secret in first
    assert hook.secret not in pm_client.get(response["Location"]).content.decode()
    assert hook.events == ["overdue"] and hook.active


@pytest.mark.django_db
def test_a_bad_webhook_is_refused_naming_the_field(pm_client, pm):
    team = pm.membership.organisation
    response = pm_client.post(reverse("webhook-list"), {"organisation": team.slug, "name": "chat", "url": "ftp://x"})
    assert response.status_code == 400
    assert "Give an http:// or https:// address." in response.content.decode()
    response = pm_client.post(
        reverse("webhook-list"), {"organisation": "nowhere", "name": "chat", "url": "https://x.org"}
    )
    assert "Choose an organisation from the list." in response.content.decode()
    for posted in ({"name": "chat", "url": "https://x.org"}, {"organisation": "", "name": "chat"}):  # none chosen
        response = pm_client.post(reverse("webhook-list"), posted)
        assert response.status_code == 400 and "Choose an organisation from the list." in response.content.decode()
    assert not Webhook.objects.exists()


@pytest.mark.django_db
def test_a_webhook_is_changed_on_its_page(pm_client, pm):
    hook = webhook_create(
        actor=pm, draft=WebhookDraft(organisation=pm.membership.organisation, name="chat", url="https://x.org/a")
    )
    url = reverse("webhook-detail", args=[hook.pk])
    response = pm_client.post(url, {"name": "chat 2", "url": "https://x.org/b", "events": ["mention"]})
    assert response.status_code == 302
    hook.refresh_from_db()
    assert (hook.name, hook.url, hook.events, hook.active) == ("chat 2", "https://x.org/b", ["mention"], False)
    refused = pm_client.post(url, {"name": "", "url": "https://x.org/b", "active": "on"})
    assert refused.status_code == 400 and "Give the hook a name." in refused.content.decode()


@pytest.mark.django_db
def test_only_a_pm_opens_the_webhook_pages(client, pm, viewer, acme_engineer):
    hook = webhook_create(
        actor=pm, draft=WebhookDraft(organisation=pm.membership.organisation, name="chat", url="https://x.org/a")
    )
    for user in (viewer, acme_engineer):
        client.force_login(user)
        assert client.get(reverse("webhook-list")).status_code == 404
        assert client.get(reverse("webhook-detail", args=[hook.pk])).status_code == 404
        assert client.post(reverse("webhook-test", args=[hook.pk])).status_code == 404
        assert client.get(reverse("notifications")).status_code == 200
    assert not hook.deliveries.exists()


@pytest.mark.django_db
def test_the_pages_speak_chinese(pm_client, pm):
    make_user("cleo", "team", "pm")
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    page = pm_client.get(reverse("notifications")).content.decode()
    assert "通知" in page and "问题分配给我时" in page
    assert "新建 Webhook" in pm_client.get(reverse("webhook-list")).content.decode()
