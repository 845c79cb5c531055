from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('calculet', '0001_initial'),
        ('acceptance', '0003_audit_moved_to_calculet'),
    ]

    operations = [
        migrations.AlterModelTable(name='audithead', table=None),
        migrations.AlterModelTable(name='auditentry', table=None),
    ]
