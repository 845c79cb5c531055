from django.utils import timezone
from rest_framework import authentication, exceptions, throttling

from vendor.models import ApiToken
from vendor.tokens import token_hash


class FailedAuthenticationThrottle(throttling.SimpleRateThrottle):
    """Failed token checks counted per client address (in the shared cache when CACHE_URL names one): past
    API_AUTH_FAILURE_RATE, the address is refused with 429 until the oldest failure leaves the window, so
    keys cannot be guessed at request speed."""

    scope = "auth_failure"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def check(self, request) -> None:
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) >= self.num_requests:
            raise exceptions.Throttled(wait=self.wait())

    def record_failure(self) -> None:
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


class TokenAuthentication(authentication.TokenAuthentication):
    """`Authorization: Token <key>` against hashed, revocable, expiring tokens."""

    keyword = "Token"

    def authenticate(self, request):
        if not authentication.get_authorization_header(request).lower().startswith(b"token"):
            return None
        throttle = FailedAuthenticationThrottle()
        throttle.check(request)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure()
            raise

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
    """Per-token rate (per user for browser sessions)."""

    scope = "token"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
