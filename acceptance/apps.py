from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

# The audit log's actions that acceptance's services record, as the audit page lists them.
AUDIT_ACTIONS = [
    ("answer.claim", _("capability claimed by an answer")),
    ("document.review", _("document reviewed")),
    ("chain.start", _("chain started")),
    ("chain.answer", _("chain moved to a new answer")),
    ("run.create", _("run queued")),
    ("run.finish", _("run finished")),
    ("run.retry", _("run retried after an infrastructure error")),
    ("capability.promote", _("capability promoted")),
    ("capability.demote", _("capability demoted")),
    ("capability.promotion_blocked", _("promotion blocked")),
    ("capability.approve", _("move approved")),
    ("capability.approval_revoke", _("approval revoked")),
    ("target.register", _("target registered")),
    ("target.update", _("target changed")),
    ("target.maintenance", _("target maintenance set")),
    ("target.health_check", _("target health check")),
    ("target.health", _("target health changed")),
    ("target.health_schedule", _("target health check schedule set")),
    ("target.agent_register", _("target agent registered")),
    ("target.registration_pending", _("target registration awaits approval")),
    ("target.registration_withdrawn", _("target registration no longer awaits approval")),
    ("target.registration_approve", _("target registration approved")),
    ("target_token.create", _("target token created")),
    ("target_token.revoke", _("target token revoked")),
    ("run.result_refused", _("run result refused")),
]


class AcceptanceConfig(AppConfig):
    name = "acceptance"
    verbose_name = "Acceptance chain"

    def ready(self):
        from acceptance import (
            checks,  # noqa: F401 - registers the system checks
            stages,
        )
        from acceptance.finding_labels import FINDING_LABELS, GATE_REASON_LABELS
        from acceptance.models import Chain, Run, Target
        from acceptance.selectors import PROGRESS_LABELS
        from acceptance.services.targets import SIMULATOR_NAME
        from acceptance.summaries import deliverable_reason, evidence_conclusion, health_reason, run_summary
        from calculet import audit, labels

        labels.register("stage", {**stages.STAGE_LABELS, stages.DONE: stages.DONE_LABEL}.items())
        labels.register("run_state", stages.STATE_LABELS.items())
        labels.register("run_state_word", stages.STATE_WORDS.items())
        labels.register("target_kind", Target.KINDS)
        labels.register("health", Target.HEALTH_STATES)
        labels.register("deliverable_progress", PROGRESS_LABELS.items())
        labels.register(
            "verdict",
            [
                (stages.PASS, pgettext_lazy("verdict", "passed")),
                (stages.FAIL, pgettext_lazy("verdict", "failed")),
                (stages.ERROR, pgettext_lazy("verdict", "in error")),
            ],
        )
        labels.register("finding", FINDING_LABELS.items())
        labels.register("gate_reason", GATE_REASON_LABELS.items())
        labels.register("target_name", [(SIMULATOR_NAME, _("Bundled NPU simulator"))])
        labels.register_phrases("run_summary", run_summary)
        labels.register_phrases("health_reason", health_reason)
        labels.register_phrases("evidence_conclusion", evidence_conclusion)
        labels.register_phrases("deliverable_reason", deliverable_reason)
        labels.extend("audit_action", AUDIT_ACTIONS)

        # A question's history holds its chains and their runs.
        audit.register_subject_scope(
            "question",
            lambda question: (
                audit.entries_about(Chain, Chain.objects.filter(question=question))
                | audit.entries_about(Run, Run.objects.filter(chain__question=question))
            ),
        )
