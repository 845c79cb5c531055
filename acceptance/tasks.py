"""Celery tasks: each takes ids and calls a service. Run tasks are sent to their target's queue."""

import logging
import time

from celery import shared_task
from celery.exceptions import Reject
from django import db
from django.conf import settings

from acceptance import worker  # noqa: F401 - connects the worker heartbeat to Celery's signals
from acceptance.services import runs_sweep, targets_health_check
from acceptance.services.deliverable_checks import deliverable_check_answer, deliverable_checks_resend
from acceptance.services.runs.claiming import worker_label
from acceptance.services.runs.execute import run_execute
from calculet.logs import run_id_var

# The sandbox ends a runner at ACCEPTANCE_RUNNER_WALL_SECONDS; these limits only catch a task stuck elsewhere
# (copying artifacts, the database). A hard kill is handled like a lost worker: the lease expires and the
# sweeper sends the run again.
RUN_SOFT_TIME_LIMIT = settings.ACCEPTANCE_RUNNER_WALL_SECONDS + 600
RUN_TIME_LIMIT = RUN_SOFT_TIME_LIMIT + 60
# A worker that cannot reach PostgreSQL hands the message back to the broker after this pause (so it does
# not spin), to be delivered again once the database is back: dropping it would leave the run to the sweeper.
DATABASE_OUTAGE_PAUSE_SECONDS = 5

logger = logging.getLogger(__name__)


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
    except (db.OperationalError, db.InterfaceError) as error:
        logger.error("run %s: the database is unreachable (%s); the message goes back to the broker", run_id, error)
        db.close_old_connections()
        time.sleep(DATABASE_OUTAGE_PAUSE_SECONDS)
        raise Reject(error, requeue=True) from error
    finally:
        run_id_var.reset(token)


@shared_task(name="acceptance.runs_sweep", acks_late=True)
def runs_sweep_task() -> None:
    runs_sweep()


@shared_task(name="acceptance.targets_health_check", acks_late=True)
def targets_health_check_task() -> None:
    targets_health_check()


@shared_task(name="acceptance.deliverable_check", acks_late=True, soft_time_limit=900, time_limit=960)
def deliverable_check_task(answer_id: int) -> None:
    deliverable_check_answer(answer_id)


@shared_task(name="acceptance.deliverable_checks_resend", acks_late=True)
def deliverable_checks_resend_task() -> None:
    deliverable_checks_resend()
