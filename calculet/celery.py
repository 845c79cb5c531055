import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

app = Celery("calculet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_task_tokens: dict[str, object] = {}


@task_prerun.connect
def _bind_task_id(task_id=None, **kwargs):
    from calculet.logs import task_id_var

    _task_tokens[task_id] = task_id_var.set(task_id or "")


@task_postrun.connect
def _unbind_task_id(task_id=None, **kwargs):
    from calculet.logs import task_id_var

    token = _task_tokens.pop(task_id, None)
    if token is not None:
        task_id_var.reset(token)
