# A static check's findings and what it looked at are stored whole as JSON in `detail`: in `explanation` they
# were cut at 2,000 characters, which made the JSON invalid exactly when a check failed with long output. Rows
# whose explanation still parses are copied over; a cut one stays as text.

import json

from django.db import migrations, models


def copy_check_details(apps, schema_editor):
    EvidenceItem = apps.get_model("evidence", "EvidenceItem")
    for item in EvidenceItem.objects.filter(origin="check").only("pk", "explanation"):
        try:
            detail = json.loads(item.explanation)
        except ValueError:
            continue
        if isinstance(detail, dict):
            EvidenceItem.objects.filter(pk=item.pk).update(detail=detail)


class Migration(migrations.Migration):
    dependencies = [
        ("evidence", "0004_evidence_item_answer"),
    ]

    operations = [
        migrations.AddField(
            model_name="evidenceitem",
            name="detail",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(copy_check_details, migrations.RunPython.noop),
    ]
