from django.apps import AppConfig


class VendorConfig(AppConfig):
    name = "vendor"
    verbose_name = "Vendors and questions"

    def ready(self):
        from calculet import labels
        from vendor import due, states
        from vendor.claim import ELEMENT_LABELS
        from vendor.models import Artifact, Membership, Organisation, WebhookDelivery

        labels.register("role", Membership.ROLES)
        labels.register("state", states.QUESTION_STATES)
        labels.register("priority", states.PRIORITIES)
        labels.register("due", due.DUE_STATUSES)
        labels.register("artifact_kind", Artifact.KINDS)
        labels.register("artifact_state", Artifact.STATES)
        labels.register("element", ELEMENT_LABELS.items())
        labels.register("organisation_kind", Organisation.KINDS)
        labels.register("delivery_state", WebhookDelivery.STATES)
