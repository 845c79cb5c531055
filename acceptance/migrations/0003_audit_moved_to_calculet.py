# The audit log belongs to the core now (calculet 0001 takes over its tables); only the state changes here.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('acceptance', '0002_initial'),
        ('calculet', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name='auditentry', name='actor'),
                migrations.DeleteModel(name='AuditHead'),
                migrations.DeleteModel(name='AuditEntry'),
            ],
            database_operations=[],
        ),
    ]
