import ipaddress

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions, throttling

from vendor.models import ApiToken
from vendor.tokens import token_hash

# Failures of keys whose prefix names no token are counted together per address: a guesser varying the
# whole key lands there, while a good key (its prefix is a real token's) is judged in its own bucket.
UNKNOWN_PREFIX = "unknown"


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address, an IPv4-mapped IPv6 one (`::ffff:203.0.113.7`, from a dual-stack socket) as its IPv4."""
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _client(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """How the throttles name a client: an IPv4 address, or an IPv6 address's /64. One IPv6 client is given a
    whole /64, so counting its addresses apart would let it guess from 2**64 of them."""
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _trusted(address) -> bool:
    return any(address in network for network in settings.TRUSTED_PROXIES)


def client_address(request) -> str:
    """The client that sent the request, as the throttles count it (`_client`: an IPv6 one by its /64): the
    connection's peer, or, when that peer is one of TRUSTED_PROXIES, the right-most address in X-Forwarded-For
    that is not a trusted proxy. Only a trusted proxy's header is believed, and a proxy appends the address it
    saw, so a client cannot choose its own."""
    peer = request.META.get("REMOTE_ADDR", "")
    peer_address = _address(peer)
    if peer_address is None:
        return peer
    if not _trusted(peer_address):
        return _client(peer_address)
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        address = _address(hop)
        if address is None:  # not an address: what came before it cannot be believed either
            break
        if not _trusted(address):
            return _client(address)
    return _client(peer_address)


class FailedAuthenticationThrottle(throttling.SimpleRateThrottle):
    """Failed token checks counted per client address and per token prefix (in the shared cache when CACHE_URL
    names one). Past API_AUTH_FAILURE_RATE a bucket is refused with 429 until its oldest failure leaves the
    window, so keys cannot be guessed at request speed. A failed key counts in its prefix's bucket when that
    prefix is a real token's, otherwise in the address's bucket of unknown prefixes: guessing keys locks out
    the guesses, never the good tokens sent from the same address."""

    scope = "auth_failure"

    def __init__(self, request, key: str):
        super().__init__()
        self.address = client_address(request)
        self.prefix = key[:12]
        self.now = self.timer()

    def _history(self, bucket: str) -> list[float]:
        history = self.cache.get(self._cache_key(bucket), [])
        return [moment for moment in history if moment > self.now - self.duration]

    def _cache_key(self, bucket: str) -> str:
        return self.cache_format % {"scope": self.scope, "ident": f"{self.address}:{bucket}"}

    def _refuse_if_full(self, history: list[float]) -> None:
        if len(history) >= self.num_requests:
            self.history = history
            raise exceptions.Throttled(wait=self.wait())

    def check_token(self) -> None:
        """A good key is refused only while its own prefix's bucket is full."""
        self._refuse_if_full(self._history(self.prefix))

    def check_failure(self, prefix_known: bool) -> None:
        """Refuse a failed key with 429 while its bucket, or the address's bucket of unknown prefixes, is full
        (so a full bucket does not tell which prefixes are real); otherwise count it."""
        bucket = self.prefix if prefix_known else UNKNOWN_PREFIX
        history = self._history(bucket)
        self._refuse_if_full(history)
        self._refuse_if_full(self._history(UNKNOWN_PREFIX))
        self.cache.set(self._cache_key(bucket), [self.now, *history], self.duration)


class FailedLoginThrottle(FailedAuthenticationThrottle):
    """Failed sign-ins of the login pages, held to the same limit as failed tokens, so a password cannot be
    guessed there and the API then used with the session: counted per client address and user name, and for
    every name together in the address's bucket that unknown token prefixes share. A good password is refused
    only while its own name is under attack from that address."""

    def __init__(self, request, username: str):
        super().__init__(request, "")
        # At most a user name's length: the name is the client's, the cache key is ours.
        self.prefix = f"login:{username.strip().lower()[:150]}"

    def refusal(self, *, succeeded: bool) -> int | None:
        """Seconds until the sign-in may be tried again, or None: it may go on. A failure that may go on is
        counted."""
        try:
            if succeeded:
                self.check_token()
            else:
                self.check_failure(prefix_known=True)
                # Counted for the address too: guessing many names' passwords is held to the same limit.
                every_name = self._history(UNKNOWN_PREFIX)
                self.cache.set(self._cache_key(UNKNOWN_PREFIX), [self.now, *every_name], self.duration)
        except exceptions.Throttled as refused:
            return max(1, int(refused.wait or 1))
        return None


class TokenAuthentication(authentication.TokenAuthentication):
    """`Authorization: Token <key>` against hashed, revocable, expiring tokens."""

    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != b"token":
            return None
        key = header[1].decode(errors="replace") if len(header) == 2 else ""
        throttle = FailedAuthenticationThrottle(request, key)
        try:
            authenticated = super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.check_failure(prefix_known=bool(key) and ApiToken.objects.filter(prefix=key[:12]).exists())
            raise
        throttle.check_token()
        return authenticated

    def authenticate_credentials(self, key):
        token = ApiToken.objects.select_related("user").filter(key_hash=token_hash(key)).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("Token revoked.")
        now = timezone.now()
        if token.expires_at is not None and token.expires_at <= now:
            raise exceptions.AuthenticationFailed("Token expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        # One write per minute at most keeps last_used_at useful without a write per request.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return (token.user, token)


class TokenRateThrottle(throttling.SimpleRateThrottle):
    """Per-token rate (per user for browser sessions, per client address otherwise)."""

    scope = "token"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = client_address(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
