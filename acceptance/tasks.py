"""Celery tasks: each takes ids and calls a service. Run tasks are sent to their target's queue."""

from celery import shared_task
from django.conf import settings

from acceptance import worker  # noqa: F401 - connects the worker heartbeat to Celery's signals
from acceptance.services import runs_sweep, targets_health_check
from acceptance.services.runs.claiming import worker_label
from acceptance.services.runs.execute import run_execute
from calculet.logs import run_id_var

# The sandbox ends a runner at ACCEPTANCE_RUNNER_WALL_SECONDS; these limits only catch a task stuck elsewhere
# (copying artifacts, the database). A hard kill is handled like a lost worker: the lease expires and the
# sweeper sends the run again.
RUN_SOFT_TIME_LIMIT = settings.ACCEPTANCE_RUNNER_WALL_SECONDS + 600
RUN_TIME_LIMIT = RUN_SOFT_TIME_LIMIT + 60


@shared_task(
    name="acceptance.run_execute",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=RUN_SOFT_TIME_LIMIT,
    time_limit=RUN_TIME_LIMIT,
)
def run_execute_task(run_id: int) -> None:
    token = run_id_var.set(str(run_id))
    try:
        run_execute(run_id, worker=worker_label())
    finally:
        run_id_var.reset(token)


@shared_task(name="acceptance.runs_sweep", acks_late=True)
def runs_sweep_task() -> None:
    runs_sweep()


@shared_task(name="acceptance.targets_health_check", acks_late=True)
def targets_health_check_task() -> None:
    targets_health_check()
