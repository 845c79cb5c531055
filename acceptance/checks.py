"""System checks for acceptance settings that would otherwise fail only under load."""

from django.conf import settings
from django.core.checks import Error, register

from acceptance.policy import policy_check


@register()
def acceptance_settings_check(app_configs, **kwargs):
    errors = []
    if settings.ACCEPTANCE_PROMOTION_POLICY is not None:
        try:
            policy_check(settings.ACCEPTANCE_PROMOTION_POLICY)
        except ValueError as error:
            errors.append(Error(f"ACCEPTANCE_PROMOTION_POLICY: {error}", id="acceptance.E001"))
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 3600)
    if visibility <= settings.ACCEPTANCE_RUNNER_WALL_SECONDS + 600:
        errors.append(
            Error(
                "CELERY_VISIBILITY_TIMEOUT must exceed the longest run (ACCEPTANCE_RUNNER_WALL_SECONDS + 600): "
                "Redis re-delivers an unacknowledged message after it, to a second worker.",
                id="acceptance.E002",
            )
        )
    if settings.ACCEPTANCE_RUN_LEASE_SECONDS <= 2 * settings.ACCEPTANCE_RUN_HEARTBEAT_SECONDS:
        errors.append(
            Error(
                "ACCEPTANCE_RUN_LEASE_SECONDS must be more than twice ACCEPTANCE_RUN_HEARTBEAT_SECONDS, or a "
                "live run loses its lease between two renewals.",
                id="acceptance.E003",
            )
        )
    return errors
