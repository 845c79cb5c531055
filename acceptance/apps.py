from django.apps import AppConfig


class AcceptanceConfig(AppConfig):
    name = "acceptance"
    verbose_name = "Acceptance chain"

    def ready(self):
        from acceptance import checks  # noqa: F401 - registers the system checks
