"""Outgoing webhooks against a real HTTP server this test starts: signed bodies, retries with backoff through real
Celery workers, a log per hook, the test button, and a vendor's hook carrying only that vendor's events."""

import datetime
import hashlib
import hmac
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import timezone

from calculet.actors import SYSTEM
from calculet.errors import DomainError, ForbiddenError
from calculet.models import AuditEntry
from tests.acceptance.workers import wait_until
from tests.factories import db_snapshot, make_account
from vendor.inputs import (
    CommentDraft,
    QuestionChanges,
    WebhookChanges,
    WebhookDraft,
    event_kinds,
    webhook_name,
    webhook_url,
)
from vendor.models import NotificationEvent, Organisation, WebhookDelivery
from vendor.services.comments import comment_create
from vendor.services.notifications import notify
from vendor.services.questions import question_update
from vendor.services.webhooks import (
    RESEND_AFTER,
    webhook_create,
    webhook_deliver,
    webhook_deliveries_resend,
    webhook_test,
    webhook_update,
)


class Receiver:
    """A local HTTP endpoint that answers with the statuses it is given, in turn, and keeps what it got."""

    def __init__(self, statuses=(204,)):
        self.statuses = list(statuses)
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"at": time.monotonic(), "headers": dict(self.headers), "body": body})
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings):
    """A receiver on this machine, which only WEBHOOK_ALLOW_PRIVATE_ADDRESSES lets hooks reach."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    made = []

    def start(*statuses):
        made.append(Receiver(statuses or (204,)))
        return made[-1]

    yield start
    for one in made:
        one.close()


def signed_by(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def team(pm):
    return pm.user.membership.organisation


def tell(kind, question, **data):
    return notify(kind, actor=SYSTEM, organisation_id=question.organisation_id, question_id=question.pk, data=data)


def test_a_delivery_is_signed_with_the_hooks_secret(pm, question_a, receiver):
    endpoint = receiver()
    hook = webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="chat", url=endpoint.url))
    event = tell("overdue", question_a, due_date="2026-01-01")
    delivery = WebhookDelivery.objects.get(event=event)
    assert webhook_deliver(delivery.pk) is None
    (request,) = endpoint.received
    assert request["headers"]["X-Calculet-Signature"] == signed_by(hook.secret, request["body"])
    assert request["headers"]["X-Calculet-Event"] == "overdue"
    assert request["headers"]["X-Calculet-Delivery"] == str(delivery.pk)
    body = json.loads(request["body"])
    assert (body["event"], body["question"], body["organisation"], body["summary"]) == (
        "overdue",
        "V18",
        "acme",
        "V18 is overdue: it was due on 2026-01-01",
    )
    assert body["url"] == "http://127.0.0.1:8000/questions/V18/"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.log[0]["status"]) == ("delivered", 1, 204)


def test_a_failing_endpoint_is_tried_again_later_then_given_up(pm, question_a, receiver, settings):
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    settings.WEBHOOK_RETRY_SECONDS = 5
    endpoint = receiver(500)
    webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="down", url=endpoint.url))
    delivery = WebhookDelivery.objects.get(event=tell("overdue", question_a))
    assert [webhook_deliver(delivery.pk) for _ in range(3)] == [5, 10, None]
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, [a["status"] for a in delivery.log]) == ("failed", 3, [500] * 3)
    assert delivery.finished_at is not None
    assert webhook_deliver(delivery.pk) is None and len(endpoint.received) == 3


def test_a_delivery_whose_message_was_lost_is_sent_again(pm, question_a, receiver, tasks_in_process):
    endpoint = receiver()
    webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="chat", url=endpoint.url))
    # No commit in this test, so the delivery's message was never queued: as if the broker had been down.
    delivery = WebhookDelivery.objects.get(event=tell("overdue", question_a))
    assert webhook_deliveries_resend() == 0  # its message may still be on its way
    later = timezone.now() + RESEND_AFTER + datetime.timedelta(seconds=1)
    assert webhook_deliveries_resend(now=later) == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, len(endpoint.received)) == ("delivered", 1, 1)
    assert webhook_deliveries_resend(now=later) == 0


def test_a_retrying_delivery_is_sent_again_only_once_its_back_off_is_long_past(
    pm, question_a, receiver, settings, tasks_in_process
):
    settings.WEBHOOK_RETRY_SECONDS = 60
    endpoint = receiver(500, 204)
    webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="flaky", url=endpoint.url))
    delivery = WebhookDelivery.objects.get(event=tell("overdue", question_a))
    assert webhook_deliver(delivery.pk) == 60  # its retry is due a minute after this attempt
    after_back_off = timezone.now() + datetime.timedelta(seconds=60) + RESEND_AFTER
    assert webhook_deliveries_resend(now=after_back_off - datetime.timedelta(seconds=5)) == 0
    assert webhook_deliveries_resend(now=after_back_off + datetime.timedelta(seconds=5)) == 1
    delivery.refresh_from_db()
    assert (delivery.state, [attempt["status"] for attempt in delivery.log]) == ("delivered", [500, 204])


def test_an_unreachable_address_and_a_redirect_count_as_failures(pm, question_a, receiver):
    endpoint = receiver(302)
    webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="moved", url=endpoint.url))
    webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="gone", url="http://127.0.0.1:9/nothing")
    )
    event = tell("overdue", question_a)
    for delivery in WebhookDelivery.objects.filter(event=event):
        assert webhook_deliver(delivery.pk) is not None
        delivery.refresh_from_db()
        assert delivery.state == "pending" and delivery.log[0]["error"]
    assert len(endpoint.received) == 1


def test_hooks_receive_the_kinds_they_subscribe_to_and_a_vendors_hook_only_its_own(
    pm, vendor_a, vendor_b, question_a, question_b, receiver
):
    endpoint = receiver()
    bolt = vendor_b.user.membership.organisation
    everything = webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="all", url=endpoint.url))
    overdue_only = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="late", url=endpoint.url, events=("overdue",))
    )
    bolts = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=bolt, name="bolt's tracker", url=endpoint.url)
    )
    switched_off = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="off", url=endpoint.url)
    )
    webhook_update(actor=pm.user, hook=switched_off, changes=WebhookChanges(active=False))
    tell("overdue", question_a)
    tell("overdue", question_b)
    tell("comment", question_b)
    notify("promotion_blocked", actor=SYSTEM, organisation_id=None, data={})
    carried = {
        hook.name: sorted(
            f"{d.event.kind}:{d.event.question.code if d.event.question else '-'}" for d in hook.deliveries.all()
        )
        for hook in (everything, overdue_only, bolts, switched_off)
    }
    assert carried == {
        "all": ["comment:V19", "overdue:V18", "overdue:V19", "promotion_blocked:-"],
        "late": ["overdue:V18", "overdue:V19"],
        "bolt's tracker": ["comment:V19", "overdue:V19"],
        "off": [],
    }


@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"name": " "}, "name", "Give the hook a name."),
        ({"name": "n" * 101}, "name", "A name holds at most 100 characters."),
        ({"url": "ftp://example.org/"}, "url", "Give an http:// or https:// address."),
        ({"url": "not a url"}, "url", "Give an http:// or https:// address."),
        ({"url": "https://example.org/" + "a" * 500}, "url", "An address holds at most 500 characters."),
        ({"events": ["everything"]}, "events", "Unknown event kind &#x27;everything&#x27;"),
    ],
)
def test_bad_hooks_name_the_field_on_the_page_and_in_the_api_and_change_nothing(client, pm, changes, field, said):
    before = db_snapshot()
    posted = {"organisation": team(pm).slug, "name": "chat", "url": "https://example.org/hook", "events": []}
    posted |= changes
    response = pm.client().post("/api/v1/webhooks/", posted, format="json")
    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == ["events[0]" if field == "events" else field]
    client.force_login(pm.user)
    page = client.post(reverse("webhook-list"), posted)
    assert page.status_code == 400
    assert f'<p class="field-error" role="alert">{said}' in page.content.decode()
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("parse", "value", "field"),
    [
        (webhook_name, "", "name"),
        (webhook_name, "n" * 101, "name"),
        (webhook_url, "ftp://example.org/", "url"),
        (webhook_url, "https://example.org/" + "a" * 500, "url"),
        (lambda kinds: event_kinds(kinds, field="events"), ["test"], "events"),  # the test event is no choice
    ],
)
def test_a_hook_s_fields_are_parsed_once_naming_the_field(parse, value, field):
    with pytest.raises(DomainError) as error:
        parse(value)
    assert error.value.field == field


def test_a_hook_s_parsed_fields_are_stripped_and_its_kinds_put_in_order():
    assert webhook_name("  chat ") == "chat"
    assert webhook_url(" https://example.org/hook ") == "https://example.org/hook"
    assert event_kinds(["overdue", "assigned", "overdue"], field="events") == ("assigned", "overdue")


def test_only_a_pm_manages_hooks_and_every_change_is_audited_without_the_secret(pm, viewer, vendor_a):
    with pytest.raises(ForbiddenError):
        webhook_create(
            actor=viewer.user, draft=WebhookDraft(organisation=team(pm), name="x", url="https://example.org")
        )
    with pytest.raises(ForbiddenError):
        webhook_create(
            actor=vendor_a.user, draft=WebhookDraft(organisation=team(pm), name="x", url="https://example.org")
        )
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="chat", url="https://example.org/a")
    )
    webhook_update(actor=pm.user, hook=hook, changes=WebhookChanges(url="https://example.org/b", events=("mention",)))
    with pytest.raises(ForbiddenError):
        webhook_update(actor=viewer.user, hook=hook, changes=WebhookChanges(active=False))
    entries = list(AuditEntry.objects.filter(object_type="vendor.webhook").order_by("id"))
    assert [entry.action for entry in entries] == ["webhook.create", "webhook.update"]
    assert entries[1].before["url"] == "https://example.org/a" and entries[1].after["events"] == ["mention"]
    assert all(hook.secret not in json.dumps([e.before, e.after]) for e in entries)


def test_the_test_button_sends_a_logged_test_delivery(client, pm, receiver):
    endpoint = receiver()
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="chat", url=endpoint.url, events=("overdue",))
    )
    client.force_login(pm.user)
    response = client.post(reverse("webhook-test", args=[hook.pk]))
    assert response.status_code == 302
    delivery = WebhookDelivery.objects.get(hook=hook)
    assert delivery.event.kind == "test" and json.loads(delivery.body)["summary"] == "A test delivery from calculet"
    webhook_deliver(delivery.pk)
    page = client.get(reverse("webhook-detail", args=[hook.pk])).content.decode()
    assert f'id="delivery-{delivery.pk}"' in page and "HTTP 204" in page and "Delivered" in page
    assert AuditEntry.objects.filter(action="webhook.test").count() == 1
    with pytest.raises(ForbiddenError):
        webhook_test(actor=make_account("vic", "team", "viewer").user, hook=hook)


@pytest.fixture
def celery_worker(workers):
    """A real worker on the default queue, with short backoff; killed with its process group at the end."""
    # The receivers listen on this machine: the worker checks each address again at delivery.
    return workers.celery(
        "default",
        "notifications",
        WEBHOOK_RETRY_SECONDS=1,
        WEBHOOK_MAX_ATTEMPTS=4,
        WEBHOOK_ALLOW_PRIVATE_ADDRESSES=True,
    )


@pytest.mark.django_db(transaction=True)
def test_a_worker_delivers_and_backs_off_exponentially(pm, vendor_a, question_a, receiver, celery_worker):
    endpoint = receiver(503, 500, 200)
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="flaky", url=endpoint.url, events=("assigned",))
    )
    question_update(
        actor=pm.user, question=question_a, changes=QuestionChanges(assignee=vendor_a.user)
    )  # commits: the event is told
    event = NotificationEvent.objects.get(kind="assigned")
    delivery = WebhookDelivery.objects.get(hook=hook, event=event)
    wait_until(
        lambda: WebhookDelivery.objects.get(pk=delivery.pk).state == "delivered",
        timeout=60,
        what="delivery",
        workers=[celery_worker],
        sweep=False,
    )
    delivery.refresh_from_db()
    assert [attempt["status"] for attempt in delivery.log] == [503, 500, 200]
    first, second, third = (request["at"] for request in endpoint.received)
    assert second - first >= 1 and third - second >= 2  # 1 s, then twice as long
    for request in endpoint.received:
        assert request["headers"]["X-Calculet-Signature"] == signed_by(hook.secret, request["body"])
    assert json.loads(endpoint.received[-1]["body"])["data"]["assignee"] == "alice"


@pytest.mark.django_db(transaction=True)
def test_a_vendors_hook_hears_only_its_own_organisation_through_the_worker(
    pm, vendor_a, vendor_b, question_a, question_b, receiver, celery_worker
):
    endpoint = receiver()
    bolt = Organisation.objects.get(slug="bolt")
    hook = webhook_create(actor=pm.user, draft=WebhookDraft(organisation=bolt, name="bolt", url=endpoint.url))
    comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body="for acme"))
    comment_create(actor=pm.user, question=question_b, draft=CommentDraft(body="for bolt"))
    # The deliveries are made as the events are told, before a worker sends any: only V19's is the hook's.
    deliveries = WebhookDelivery.objects.filter(hook=hook)
    assert [delivery.event.question.code for delivery in deliveries] == ["V19"]
    wait_until(
        lambda: not deliveries.exclude(state="delivered").exists(),
        timeout=60,
        what="delivery",
        workers=[celery_worker],
        sweep=False,
    )
    assert [json.loads(request["body"])["question"] for request in endpoint.received] == ["V19"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://10.0.0.5/hook",
        "http://192.168.1.20/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:8000/hook",
        "http://[fe80::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://localhost:8000/hook",
        "http://0.0.0.0/hook",
        # IPv6 addresses that carry a private IPv4 one: NAT64, 6to4, Teredo (they used to pass as global).
        "http://[64:ff9b::7f00:1]/hook",
        "http://[64:ff9b:1::a00:5]/hook",
        "http://[2002:7f00:1::]/hook",
        "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook",
    ],
)
def test_a_hook_to_a_loopback_link_local_or_private_address_is_refused(pm, url):
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        webhook_create(actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="inside", url=url))
    assert error.value.field == "url"
    assert "public addresses only" in error.value.english
    assert db_snapshot() == before


def test_the_setting_lets_a_hook_reach_a_private_address(pm, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="lan", url="http://10.0.0.5/hook")
    )
    assert hook.url == "http://10.0.0.5/hook"


def test_the_api_and_the_page_refuse_a_private_address_naming_the_field(client, pm):
    before = db_snapshot()
    response = pm.client().post(
        "/api/v1/webhooks/",
        {"organisation": team(pm).slug, "name": "inside", "url": "http://127.0.0.1:9/", "events": []},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert [error["field"] for error in response.json()["errors"]] == ["url"]
    client.force_login(pm.user)
    page = client.post("/webhooks/", {"organisation": team(pm).slug, "name": "inside", "url": "http://127.0.0.1:9/"})
    assert page.status_code == 400
    assert "public addresses only" in page.content.decode()
    assert db_snapshot() == before


def test_the_form_defaults_to_the_team(client, pm, vendor_a):
    client.force_login(pm.user)
    page = client.get("/webhooks/").content.decode()
    assert f'<option value="{team(pm).slug}" selected>' in page
    assert f'<option value="{vendor_a.user.membership.organisation.slug}" >' in page


def test_a_delivery_is_refused_when_the_name_has_come_to_point_inside(pm, question_a, monkeypatch):
    """Checked again after DNS: the name was public when the hook was made."""
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="rebound", url="https://hooks.example.org/in")
    )
    monkeypatch.setattr(
        "vendor.services.webhooks.socket.getaddrinfo",
        lambda host, port: [(2, 1, 6, "", ("10.1.2.3", 0))] if host == "hooks.example.org" else [],
    )
    posted = []
    monkeypatch.setattr("vendor.services.webhooks._post", lambda *args: posted.append(args) or (204, ""))
    [delivery] = WebhookDelivery.objects.filter(event=tell("overdue", question_a), hook=hook)
    assert webhook_deliver(delivery.pk) is not None
    delivery.refresh_from_db()
    assert posted == []
    assert delivery.state == "pending"
    assert "10.1.2.3, a loopback, link-local or private address" in delivery.log[0]["error"]


def test_a_delivery_connects_to_the_address_it_checked_not_to_a_later_answer(pm, question_a, monkeypatch):
    """DNS rebinding: the name answers a public address to the check and another one a moment later. The post
    goes to the checked one (here the local receiver, counted as public for the test), with the name as Host."""
    endpoint = Receiver()
    port = endpoint.server.server_port
    hook = webhook_create(
        actor=pm.user,
        draft=WebhookDraft(organisation=team(pm), name="rebinding", url=f"http://hooks.example.org:{port}/in"),
    )
    real_getaddrinfo = socket.getaddrinfo
    answers = iter(["127.0.0.1"])  # the first answer; every later one is 127.0.0.2, where nothing listens

    def getaddrinfo(host, *args, **kwargs):
        if host != "hooks.example.org":
            return real_getaddrinfo(host, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers, "127.0.0.2"), args[0] if args else 0))]

    monkeypatch.setattr("vendor.services.webhooks.socket.getaddrinfo", getaddrinfo)
    monkeypatch.setattr("vendor.services.webhooks._is_public", lambda address: address == "127.0.0.1")
    try:
        [delivery] = WebhookDelivery.objects.filter(event=tell("overdue", question_a), hook=hook)
        assert webhook_deliver(delivery.pk) is None
        delivery.refresh_from_db()
        assert (delivery.state, delivery.log[0]["status"]) == ("delivered", 204)
        [received] = endpoint.received
        assert received["headers"]["Host"] == f"hooks.example.org:{port}"
    finally:
        endpoint.close()


def test_a_name_that_does_not_resolve_at_delivery_is_no_post(pm, question_a, monkeypatch):
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team(pm), name="gone", url="https://hooks.example.org/in")
    )

    def getaddrinfo(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr("vendor.services.webhooks.socket.getaddrinfo", getaddrinfo)
    posted = []
    monkeypatch.setattr("vendor.services.webhooks._post", lambda *args: posted.append(args) or (204, ""))
    [delivery] = WebhookDelivery.objects.filter(event=tell("overdue", question_a), hook=hook)
    assert webhook_deliver(delivery.pk) is not None
    delivery.refresh_from_db()
    assert posted == [] and delivery.state == "pending"
    assert delivery.log[0]["error"] == "hooks.example.org does not resolve (Name or service not known)."
