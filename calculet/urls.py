from django.contrib import admin
from django.urls import include, path

from calculet import health
from vendor.views.login import AdminSignInForm

# The admin's login is held to the same failed sign-in limit as the login page.
admin.site.login_form = AdminSignInForm

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("calculet.api_urls")),
    path("", include("calculet.web_urls")),
]
