from django.apps import AppConfig


class VendorConfig(AppConfig):
    name = "vendor"
    verbose_name = "Vendors and questions"
