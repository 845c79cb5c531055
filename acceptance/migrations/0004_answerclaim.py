# The capability an answer names moves from vendor.Answer to acceptance (vendor sits below evidence and
# acceptance, docs/architecture.md); existing answers keep their claim.

import django.db.models.deletion
from django.db import migrations, models


def copy_claims(apps, schema_editor):
    Answer = apps.get_model("vendor", "Answer")
    AnswerClaim = apps.get_model("acceptance", "AnswerClaim")
    AnswerClaim.objects.bulk_create(
        AnswerClaim(answer_id=answer_id, capability_id=capability_id)
        for answer_id, capability_id in Answer.objects.filter(capability__isnull=False).values_list(
            "id", "capability_id"
        )
    )


def copy_claims_back(apps, schema_editor):
    Answer = apps.get_model("vendor", "Answer")
    AnswerClaim = apps.get_model("acceptance", "AnswerClaim")
    for claim in AnswerClaim.objects.all():
        Answer.objects.filter(pk=claim.answer_id).update(capability_id=claim.capability_id)


class Migration(migrations.Migration):

    dependencies = [
        ('acceptance', '0003_audit_moved_to_calculet'),
        ('evidence', '0002_initial'),
        ('vendor', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='AnswerClaim',
            fields=[
                ('answer', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, primary_key=True, related_name='claim', serialize=False, to='vendor.answer')),
                ('capability', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='claims', to='evidence.capability')),
            ],
        ),
        migrations.RunPython(copy_claims, copy_claims_back),
    ]
