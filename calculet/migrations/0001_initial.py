# The audit log's tables were created by acceptance's first migration; this takes them over without
# touching the database, and 0002 gives them the core's table names.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('acceptance', '0002_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='AuditHead',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('last_hash', models.CharField(max_length=64)),
                    ],
                    options={'db_table': 'acceptance_audithead'},
                ),
                migrations.CreateModel(
                    name='AuditEntry',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField()),
                        ('actor_label', models.CharField(max_length=150)),
                        ('action', models.CharField(db_index=True, max_length=60)),
                        ('object_type', models.CharField(db_index=True, max_length=60)),
                        ('object_id', models.CharField(db_index=True, max_length=100)),
                        ('object_repr', models.CharField(max_length=300)),
                        ('before', models.JSONField(blank=True, null=True)),
                        ('after', models.JSONField(blank=True, null=True)),
                        ('prev_hash', models.CharField(max_length=64, unique=True)),
                        ('hash', models.CharField(max_length=64, unique=True)),
                        ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'verbose_name_plural': 'audit entries',
                        'ordering': ['-id'],
                        'db_table': 'acceptance_auditentry',
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
