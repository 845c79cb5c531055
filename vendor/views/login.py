"""The login page, with failed sign-ins held to the failed-token limit (`vendor.authentication.FailedLoginThrottle`)."""

from django.contrib.auth import views as auth_views
from django.utils.translation import gettext

from vendor.authentication import FailedLoginThrottle


class LoginView(auth_views.LoginView):
    template_name = "auth/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        form = self.get_form()
        succeeded = form.is_valid()
        wait = FailedLoginThrottle(request, request.POST.get("username", "")).refusal(succeeded=succeeded)
        if wait is not None:
            form.errors.clear()
            form.add_error(
                None, gettext("Too many failed sign-ins; try again in %(seconds)s seconds.") % {"seconds": wait}
            )
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(wait)
            return response
        return self.form_valid(form) if succeeded else self.form_invalid(form)
