from django.apps import AppConfig
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

# The audit log's actions that evidence's services record, as the audit page lists them.
AUDIT_ACTIONS = [
    ("checklist.add", _("checklist row added")),
    ("checklist.change", _("checklist row changed")),
    ("checklist.remove", _("checklist row removed")),
    ("checklist.link", _("checklist links changed")),
    ("evidence.record", _("evidence recorded")),
    ("evidence.lapse", _("evidence lapsed")),
    ("capability.update", _("capability changed")),
]


class EvidenceConfig(AppConfig):
    name = "evidence"
    verbose_name = "Evidence and capabilities"

    def ready(self):
        from calculet import audit, labels
        from evidence import selectors
        from evidence.grades import GRADE_MEANINGS, STATUS_MEANINGS
        from evidence.models import Capability

        labels.register("grade", GRADE_MEANINGS.items())
        labels.register("status", STATUS_MEANINGS.items())
        labels.extend("audit_action", AUDIT_ACTIONS)
        # The seed's deliverable titles are marked for the catalogue (evidence/seed/deliverables.py); a title
        # a PM wrote reads as written.
        labels.register_phrases("deliverable_title", gettext)

        audit.register_subject("capability", selectors.capability_by_slug)
        audit.register_subject_scope(
            "capability",
            lambda capability: audit.entries_about(Capability, Capability.objects.filter(pk=capability.pk)),
        )
