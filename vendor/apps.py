from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

# The audit log's actions that vendor's services record, as the audit page lists them.
AUDIT_ACTIONS = [
    ("organisation.create", _("organisation created")),
    ("organisation.rename", _("organisation renamed")),
    ("membership.create", _("member added")),
    ("token.create", _("API token created")),
    ("token.revoke", _("API token revoked")),
    ("question.update", _("question edited")),
    ("question.state", _("question state changed")),
    ("answer.submit", _("answer submitted")),
    ("artifact.receive", _("artifact received")),
    ("artifact.verify", _("artifact verified")),
    ("artifact.reject", _("artifact rejected")),
    ("upload.create", _("upload started")),
    ("upload.terminate", _("upload cancelled")),
    ("upload.expire", _("upload expired")),
    ("comment.create", _("comment written")),
    ("comment.edit", _("comment edited")),
    ("notification.preferences", _("notification choices changed")),
    ("webhook.create", _("webhook created")),
    ("webhook.update", _("webhook changed")),
    ("webhook.test", _("webhook test sent")),
    ("deliverable.reset", _("deliverable owed again after a reassignment")),
]


class VendorConfig(AppConfig):
    name = "vendor"
    verbose_name = "Vendors and questions"

    def ready(self):
        from calculet import audit, labels
        from vendor import due, selectors, states
        from vendor.claim import ELEMENT_LABELS
        from vendor.models import (
            Answer,
            Artifact,
            Comment,
            Deliverable,
            Membership,
            Organisation,
            Question,
            WebhookDelivery,
        )

        labels.register("role", Membership.ROLES)
        labels.register("state", states.QUESTION_STATES)
        labels.register("priority", states.PRIORITIES)
        labels.register("due", due.DUE_STATUSES)
        labels.register("artifact_kind", Artifact.KINDS)
        labels.register("artifact_state", Artifact.STATES)
        labels.register("deliverable_kind", Deliverable.KINDS)
        labels.register("deliverable_state", Deliverable.STATES)
        labels.register("element", ELEMENT_LABELS.items())
        labels.register("organisation_kind", Organisation.KINDS)
        labels.register("delivery_state", WebhookDelivery.STATES)
        labels.extend("audit_action", AUDIT_ACTIONS)

        audit.register_subject("question", selectors.question_by_code)
        audit.register_subject_scope(
            "question",
            lambda question: (
                audit.entries_about(Question, Question.objects.filter(pk=question.pk))
                | audit.entries_about(Answer, Answer.objects.filter(question=question))
                | audit.entries_about(Comment, Comment.objects.filter(question=question))
            ),
        )
