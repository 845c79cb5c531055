from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("vendor", "0009_deliverable_alternatives_and_versioned_schema"),
    ]

    operations = [
        migrations.AddField(
            model_name="deliverable",
            name="image_sbom_components",
            field=models.BooleanField(default=False),
        ),
    ]
