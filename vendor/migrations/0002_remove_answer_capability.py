from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('vendor', '0001_initial'),
        ('acceptance', '0004_answerclaim'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='answer',
            name='capability',
        ),
    ]
