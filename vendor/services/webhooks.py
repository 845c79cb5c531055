"""Outgoing webhooks: made and changed by PMs (audited); each event POSTed as JSON, the exact body signed with
HMAC-SHA256 under the hook's own secret, tried again with exponential backoff, every attempt logged.

Deliveries are at least once: a receiver tells a repeat by its X-Calculet-Delivery header.
"""

import datetime
import hashlib
import hmac
import http.client
import ipaddress
import json
import secrets
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext_noop

from calculet.actors import Actor, actor_label, actor_user
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError
from calculet.sentences import english, sentence
from vendor import events
from vendor.access import may_manage_webhooks
from vendor.inputs import WebhookChanges, WebhookDraft
from vendor.models import NotificationEvent, Organisation, Webhook, WebhookDelivery
from vendor.services.dispatch import webhook_delivery_queue

SIGNATURE_HEADER = "X-Calculet-Signature"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new address to post the event to."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _pinned(connection_class, address: str | None, host: str, **kwargs):
    """An HTTP(S) connection to `host` that connects to `address`, the one checked, when given: looking the
    name up again to connect would let it point elsewhere by then (DNS rebinding). TLS still checks the
    certificate against `host`, and Host names it."""
    connection = connection_class(host, **kwargs)
    if address is not None:
        connection._create_connection = lambda where, *args: socket.create_connection((address, where[1]), *args)
    return connection


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, address: str | None):
        super().__init__()
        self.address = address

    def http_open(self, req):
        return self.do_open(partial(_pinned, http.client.HTTPConnection, self.address), req)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, address: str | None):
        super().__init__()
        self.address = address

    def https_open(self, req):
        return self.do_open(partial(_pinned, http.client.HTTPSConnection, self.address), req, context=self._context)


def webhook_signature(secret: str, body: bytes) -> str:
    """What X-Calculet-Signature carries: "sha256=" and the hex HMAC-SHA256 of the body under the hook's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _snapshot(hook: Webhook) -> dict:
    return {
        "organisation": hook.organisation.slug,
        "name": hook.name,
        "url": hook.url,
        "events": hook.events,
        "active": hook.active,
    }


# NAT64's well-known prefix (RFC 6052): a gateway on the way turns such an address into the IPv4 address in its
# last 32 bits. The local-use prefix (RFC 8215) is one network's own, never a public address.
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")


def _is_public(address: str) -> bool:
    """Whether the address is a public one, and so is any IPv4 address it carries: IPv4-mapped, 6to4
    (`2002:7f00:1::` is 127.0.0.1), Teredo or NAT64 (`64:ff9b::7f00:1`), each of which reaches that IPv4."""
    ip = ipaddress.ip_address(address.split("%")[0])  # an IPv6 address's zone says nothing of its kind
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL_USE:
            return False
        carried = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        if ip in NAT64_PREFIX:
            carried.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if any(embedded is not None and not _is_public(str(embedded)) for embedded in carried):
            return False
        if ip.ipv4_mapped:
            return True  # the mapped IPv4 is public
    return ip.is_global and not ip.is_multicast


def webhook_address_check(url: str, *, resolve: bool) -> tuple[dict | None, str | None]:
    """Why calculet may not post to `url`'s host, as a sentence (calculet.sentences; None when it may), and the
    address it checked (None when none was: a name not looked up, or WEBHOOK_ALLOW_PRIVATE_ADDRESSES). A
    loopback, link-local, private or other non-public address would let a hook reach the server's own network.
    With `resolve`, a host name is looked up and every address it has is checked, as at delivery, which then
    connects to the first of them."""
    if settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        return None, None
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            return (
                sentence(gettext_noop("%(host)s is this machine; webhooks go to public addresses only."), host=host),
                None,
            )
        if not resolve:
            return None, None
        try:
            addresses = list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, None)))
        except OSError as error:
            return (
                sentence(
                    gettext_noop("%(host)s does not resolve (%(error)s)."),
                    host=host,
                    error=str(error.strerror or error),
                ),
                None,
            )
        if not addresses:
            return sentence(gettext_noop("%(host)s does not resolve."), host=host), None
    private = sorted(address for address in addresses if not _is_public(address))
    if private:
        refusal = sentence(
            gettext_noop(
                "%(host)s is %(address)s, a loopback, link-local or private address; webhooks go to public "
                "addresses only."
            ),
            host=host,
            address=private[0],
        )
        return refusal, None
    return None, addresses[0]


def _allowed_url(url: str) -> str:
    refusal, _ = webhook_address_check(url, resolve=False)
    if refusal:
        raise DomainError(refusal["template"], field="url", params=refusal["params"])
    return url


def _check_actor(actor: Actor) -> None:
    if not may_manage_webhooks(actor):
        raise ForbiddenError(gettext_noop("Only a PM manages webhooks."))


def webhook_create(*, actor: Actor, draft: WebhookDraft) -> Webhook:
    """A new active hook (`vendor.inputs.WebhookDraft`) with a fresh secret (shown to the PM once, on the page
    that made it).

    Preconditions: a PM acts (ForbiddenError); the address's host is public (`webhook_address_check`;
    DomainError on "url"). The organisation decides what the hook may carry: the integration team's hook every
    event, a vendor's hook only those about that vendor. One audit row (without the secret).
    """
    _check_actor(actor)
    hook = Webhook(
        organisation=draft.organisation,
        name=draft.name,
        url=_allowed_url(draft.url),
        events=list(draft.events),
        secret=secrets.token_hex(32),
        created_by=actor_user(actor),
    )
    with transaction.atomic():
        hook.save()
        audit_record(actor=actor, action="webhook.create", obj=hook, after=_snapshot(hook))
    return hook


def webhook_update(*, actor: Actor, hook: Webhook, changes: WebhookChanges) -> Webhook:
    """Change a hook's name, address, event kinds or whether it is active (`vendor.inputs.WebhookChanges`);
    the preconditions of `webhook_create`. One audit row with before and after; nothing when nothing changed."""
    _check_actor(actor)
    cleaned = changes.given()
    if "url" in cleaned:
        _allowed_url(cleaned["url"])
    if "events" in cleaned:
        cleaned["events"] = list(cleaned["events"])
    with transaction.atomic():
        locked = lock_rows(Webhook.objects).get(pk=hook.pk)
        locked.organisation = hook.organisation
        cleaned = {name: value for name, value in cleaned.items() if getattr(locked, name) != value}
        if not cleaned:
            return locked
        before = _snapshot(locked)
        for name, value in cleaned.items():
            setattr(locked, name, value)
        locked.save(update_fields=[*cleaned, "updated_at"])
        audit_record(actor=actor, action="webhook.update", obj=locked, before=before, after=_snapshot(locked))
    return locked


def _body(event: NotificationEvent) -> str:
    """The JSON a hook receives for an event; its summary in English, whatever the people told read."""
    with translation.override("en"):
        summary = events.subject(event.kind, event.data)
    return json.dumps(
        {
            "event": event.kind,
            "id": event.pk,
            "created_at": event.created_at.isoformat(),
            "organisation": event.organisation.slug if event.organisation else None,
            "question": event.data.get("question"),
            "actor": event.actor_label,
            "summary": summary,
            "url": events.url(event.data) or None,
            "data": {key: value for key, value in event.data.items() if key != "path"},
        },
        ensure_ascii=False,
        sort_keys=True,
    )


def _may_carry(hook: Webhook, event: NotificationEvent) -> bool:
    if hook.events and event.kind not in hook.events:
        return False
    return hook.organisation.kind == Organisation.INTEGRATOR or hook.organisation_id == event.organisation_id


def webhook_deliveries_create(event: NotificationEvent) -> list[WebhookDelivery]:
    """A delivery of the event to every active hook that subscribes to it and may carry it, sent after commit.
    Runs in the caller's transaction."""
    hooks = [
        hook for hook in Webhook.objects.filter(active=True).select_related("organisation") if _may_carry(hook, event)
    ]
    body = _body(event) if hooks else ""
    deliveries = WebhookDelivery.objects.bulk_create(
        [WebhookDelivery(hook=hook, event=event, body=body) for hook in hooks]
    )
    for delivery in deliveries:
        transaction.on_commit(partial(webhook_delivery_queue, delivery.pk))
    return deliveries


def webhook_test(*, actor: Actor, hook: Webhook) -> WebhookDelivery:
    """Send the hook a test event, logged like any other delivery. A PM acts (ForbiddenError); one audit row."""
    _check_actor(actor)
    with transaction.atomic():
        event = NotificationEvent.objects.create(
            kind=events.TEST,
            organisation=hook.organisation if hook.organisation.kind == Organisation.VENDOR else None,
            actor_label=actor_label(actor),
            data={"actor": actor_label(actor), "hook": hook.name, "path": "/notifications/"},
        )
        delivery = WebhookDelivery.objects.create(hook=hook, event=event, body=_body(event))
        audit_record(actor=actor, action="webhook.test", obj=hook, after={"delivery": delivery.pk})
        transaction.on_commit(partial(webhook_delivery_queue, delivery.pk))
    return delivery


# A message that has not arrived this long after it was due was lost (a broker restarted or flushed, or down
# when it was queued): the e-mail or delivery is queued again (`webhook_deliveries_resend`,
# `notifications.notification_emails_resend`, both from Celery beat).
RESEND_AFTER = datetime.timedelta(minutes=30)


def _next_attempt_due(delivery: WebhookDelivery) -> datetime.datetime:
    """When the delivery's next attempt was to be made: at once, or its back-off after the last attempt."""
    if not delivery.log:
        return delivery.created_at
    last = datetime.datetime.fromisoformat(delivery.log[-1]["at"])
    return last + datetime.timedelta(seconds=_back_off(delivery.attempts))


def _back_off(attempts: int) -> float:
    """Seconds to wait before the next attempt of a delivery tried `attempts` times."""
    return settings.WEBHOOK_RETRY_SECONDS * 2 ** (attempts - 1)


def webhook_deliveries_resend(*, now: datetime.datetime | None = None) -> int:
    """Queue again every pending delivery whose next attempt is RESEND_AFTER overdue; returns how many. A
    message that was only late, not lost, makes one attempt more: receivers tell a repeat by its
    X-Calculet-Delivery."""
    now = now or timezone.now()
    pending = WebhookDelivery.objects.filter(state=WebhookDelivery.PENDING, created_at__lte=now - RESEND_AFTER)
    overdue = [
        delivery.pk
        for delivery in pending.only("pk", "created_at", "attempts", "log").order_by("pk")
        if _next_attempt_due(delivery) + RESEND_AFTER <= now
    ]
    for delivery_id in overdue:
        webhook_delivery_queue(delivery_id)
    return len(overdue)


def _post(url: str, address: str | None, body: bytes, headers: dict) -> tuple[int | None, str]:
    """POST to `url`, connecting to `address` when given (see `_pinned`)."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirects, _PinnedHTTPHandler(address), _PinnedHTTPSHandler(address))
    try:
        with opener.open(request, timeout=settings.WEBHOOK_TIMEOUT_SECONDS) as response:
            return response.status, ""
    except urllib.error.HTTPError as error:
        return error.code, f"HTTP {error.code} {error.reason}"
    except (urllib.error.URLError, OSError, ValueError) as error:
        return None, str(getattr(error, "reason", error))[:500]


def webhook_deliver(delivery_id: int) -> float | None:
    """Try one delivery once: POST its body, signed; log the attempt. Returns the seconds to wait before the
    next attempt, or None when it is done (delivered, or failed for good after WEBHOOK_MAX_ATTEMPTS, or its
    hook deactivated)."""
    delivery = WebhookDelivery.objects.select_related("hook", "event").get(pk=delivery_id)
    if delivery.state != WebhookDelivery.PENDING:
        return None
    hook = delivery.hook
    started = time.monotonic()
    # Checked again after DNS: a public name may have come to point at a private address since it was given.
    # The post connects to the address checked, not to what the name points at a moment later.
    refusal, address = webhook_address_check(hook.url, resolve=True) if hook.active else (None, None)
    if refusal:
        status, error, delivered = None, english(refusal), False
    elif hook.active:
        body = delivery.body.encode()
        status, error = _post(
            hook.url,
            address,
            body,
            {
                "Content-Type": "application/json",
                "User-Agent": "calculet-webhooks/1",
                "X-Calculet-Event": delivery.event.kind,
                "X-Calculet-Delivery": str(delivery.pk),
                SIGNATURE_HEADER: webhook_signature(hook.secret, body),
            },
        )
        delivered = status is not None and 200 <= status < 300
    else:
        status, error, delivered = None, "the hook was deactivated", False
    attempt = {"at": timezone.now().isoformat(), "status": status, "error": error}
    attempt["ms"] = round((time.monotonic() - started) * 1000)
    with transaction.atomic():
        locked = lock_rows(WebhookDelivery.objects).get(pk=delivery.pk)
        locked.attempts += 1
        locked.log = [*locked.log, attempt]
        if delivered:
            locked.state = WebhookDelivery.DELIVERED
        elif not hook.active or locked.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
            locked.state = WebhookDelivery.FAILED
        if locked.state != WebhookDelivery.PENDING:
            locked.finished_at = timezone.now()
        locked.save(update_fields=["attempts", "log", "state", "finished_at"])
    if locked.state != WebhookDelivery.PENDING:
        return None
    return _back_off(locked.attempts)
