from django.apps import AppConfig


class EvidenceConfig(AppConfig):
    name = "evidence"
    verbose_name = "Evidence and capabilities"

    def ready(self):
        from calculet import labels
        from evidence.grades import GRADE_MEANINGS, STATUS_MEANINGS

        labels.register("grade", GRADE_MEANINGS.items())
        labels.register("status", STATUS_MEANINGS.items())
