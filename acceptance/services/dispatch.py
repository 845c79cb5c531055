"""Sending the acceptance app's tasks, by name (`acceptance/tasks.py` imports the services, so no service
imports it): a run to its target's queue once the transaction that wrote it `queued` has committed, and an
answer's deliverable check.

PostgreSQL holds the truth; a message is only a wake-up call. A lost message costs a sweep interval, never
the run: the sweeper re-sends runs left queued when their queue is empty, and `deliverable_checks_resend`
the checks still owed.
"""

import logging

from django.db import transaction
from kombu.exceptions import ChannelError

from acceptance import stages
from acceptance.models import Run
from calculet.celery import app, task_send

logger = logging.getLogger(__name__)

# Redis serves the lowest number first: a run is sent with its own priority (stages.PRIORITY_*). A run whose
# worker was lost has waited its turn once already, so it goes ahead of everything its target has waiting.
LOST_WORKER_PRIORITY = 0


def _send(run_id: int, queue_name: str, *, declare: bool, priority: int) -> None:
    try:
        if declare:
            # A connection declares a queue once and caches it; after a broker restart or flush the queue's
            # binding is gone and a cached declaration would route the message nowhere. A re-send declares.
            with app.producer_or_acquire() as producer:
                app.amqp.queues[queue_name].bind(producer.channel).declare()
        task_send("acceptance.run_execute", [run_id], queue=queue_name, priority=priority)
    except Exception:  # the broker is down: the run stays queued in PostgreSQL and the sweeper re-sends it
        logger.exception("could not send run %s to queue %s; the sweeper will re-send it", run_id, queue_name)


def run_send(run: Run, *, resend: bool = False, lost_worker: bool = False) -> None:
    """Send the run's task after commit. Precondition: the run was just written `queued` in this transaction.
    `resend` for the sweeper: the broker may have lost its queues since this process last declared them.
    `lost_worker`: the run's last attempt lost its worker, so it goes to the front of its target's queue."""
    run_id, queue_name = run.pk, run.target.queue
    if run.target.pulled:
        if run.stage in stages.PULLED_STAGES:
            return  # the target's agent claims it over the API (acceptance.services.agents)
        queue_name = "default"  # the server's own checks of a pulled target's chain
    priority = LOST_WORKER_PRIORITY if lost_worker else run.priority
    transaction.on_commit(lambda: _send(run_id, queue_name, declare=resend, priority=priority))


def queue_length(queue_name: str) -> int:
    """Messages waiting in a queue (0 when the broker does not know the queue, e.g. after a flush)."""
    with app.connection_for_read() as connection:
        try:
            return connection.default_channel.queue_declare(queue=queue_name, passive=True).message_count
        except ChannelError:
            return 0


def deliverable_check_send(answer_id: int) -> None:
    """Send the answer's check to a worker. When the broker is down nothing is lost: the answer still owes
    its check, and `deliverable_checks_resend` sends it again."""
    try:
        task_send("acceptance.deliverable_check", [answer_id])
    except Exception:
        logger.exception("could not send the check of answer %s; it will be sent again", answer_id)
