from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("vendor", "0007_document_reviews_and_schema_artifacts"),
    ]

    operations = [
        migrations.AddField(
            model_name="documentreview",
            name="elements",
            field=models.JSONField(default=dict),
        ),
    ]
