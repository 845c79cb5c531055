"""Signing in, on the login page and the admin's, with failed sign-ins held to the failed-token limit
(`vendor.authentication.FailedLoginThrottle`): a password guessed there could be used with the API's session."""

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.utils.translation import gettext

from vendor.authentication import FailedLoginThrottle


class ThrottledSignIn:
    """A sign-in form refused ("throttled", `retry_after` seconds) past the limit: a failure while its name or
    its address is under attack, a good password while its own name is under attack from that address."""

    retry_after: int | None = None

    def clean(self):
        throttle = FailedLoginThrottle(self.request, self.data.get("username", ""))
        try:
            cleaned = super().clean()
        except ValidationError:
            self._refuse_if(throttle.refusal(succeeded=False))
            raise
        self._refuse_if(throttle.refusal(succeeded=True))
        return cleaned

    def _refuse_if(self, wait: int | None) -> None:
        if wait is not None:
            self.retry_after = wait
            raise ValidationError(
                gettext("Too many failed sign-ins; try again in %(seconds)s seconds.") % {"seconds": wait},
                code="throttled",
            )


class SignInForm(ThrottledSignIn, AuthenticationForm):
    pass


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    pass


class LoginView(auth_views.LoginView):
    template_name = "auth/login.html"
    redirect_authenticated_user = True
    authentication_form = SignInForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.retry_after is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response
