from django.apps import AppConfig


class AcceptanceConfig(AppConfig):
    name = "acceptance"
    verbose_name = "Acceptance chain"

    def ready(self):
        from acceptance import (
            checks,  # noqa: F401 - registers the system checks
            stages,
        )
        from acceptance.models import Target
        from calculet import labels

        labels.register("stage", {**stages.STAGE_LABELS, stages.DONE: stages.DONE_LABEL}.items())
        labels.register("run_state", stages.STATE_LABELS.items())
        labels.register("target_kind", Target.KINDS)
        labels.register("health", Target.HEALTH_STATES)
