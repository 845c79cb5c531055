# The evidence a static check records names the answer it examined, so "has this answer been checked?" is a
# query. Existing check evidence named the answer only in its text ("static check of answer <id> (r<n>) of
# <organisation>"): it is linked from there, or every answer already checked would be checked again.

import re

import django.db.models.deletion
from django.db import migrations, models

CHECKED_ANSWER = re.compile(r"^static check of answer (\d+) \(")


def link_checked_answers(apps, schema_editor):
    Answer = apps.get_model("vendor", "Answer")
    EvidenceItem = apps.get_model("evidence", "EvidenceItem")
    for item in EvidenceItem.objects.filter(origin="check", answer__isnull=True):
        found = CHECKED_ANSWER.match(item.source_text)
        if found and Answer.objects.filter(pk=int(found[1])).exists():
            item.answer_id = int(found[1])
            item.save(update_fields=["answer"])


class Migration(migrations.Migration):

    dependencies = [
        ('evidence', '0003_deliverables_and_evidence_scope'),
        ('vendor', '0007_document_reviews_and_schema_artifacts'),
    ]

    operations = [
        migrations.AddField(
            model_name='evidenceitem',
            name='answer',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='evidence_items', to='vendor.answer'),
        ),
        migrations.RunPython(link_checked_answers, migrations.RunPython.noop),
    ]
