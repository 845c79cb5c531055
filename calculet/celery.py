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


def task_send(name: str, args: list, **options) -> None:
    """Send the task registered as `name` with `args` (and `apply_async` options: queue, priority, countdown).
    Senders name a task rather than import it: a tasks module imports the services it calls, and those
    services are what send it. `send_task` ignores `task_always_eager`, so where tasks run in the sending
    process (the suite's `tasks_in_process`) the registered task is applied instead, the apps' tasks modules
    imported first if they are not yet."""
    if not app.conf.task_always_eager:
        app.send_task(name, args=args, **options)
        return
    if name not in app.tasks:
        app.loader.import_default_modules()
    app.tasks[name].apply_async(args=args, **options)
