"""Sending tasks by name; a run whose worker was lost goes to the front of its target's queue, on the real broker."""

import json
import uuid

import pytest
from celery.exceptions import Reject
from django.db import connection

from acceptance import stages, tasks
from acceptance.services.dispatch import LOST_WORKER_PRIORITY, _send
from calculet.celery import app


def _drain(queue_name: str) -> list[int]:
    """The run ids of the queue's messages, in the order a worker would receive them."""
    order = []
    with app.connection_for_read() as connection:
        channel = connection.default_channel
        while (message := channel.basic_get(queue_name, no_ack=True)) is not None:
            args, _kwargs, _embed = json.loads(message.body)
            order.append(args[0])
    return order


def test_a_run_whose_worker_was_lost_overtakes_the_backlog():
    queue_name = f"dispatch-test-{uuid.uuid4().hex}"
    for run_id in (1, 2, 3):
        _send(run_id, queue_name, declare=True, priority=stages.PRIORITY_BACKLOG)
    _send(99, queue_name, declare=True, priority=LOST_WORKER_PRIORITY)
    _send(4, queue_name, declare=True, priority=stages.PRIORITY_BACKLOG)

    assert _drain(queue_name) == [99, 1, 2, 3, 4]


def test_a_worker_without_its_database_hands_the_message_back(db, monkeypatch):
    """Acknowledging the message would leave the run to the sweeper; Reject(requeue) redelivers it."""
    monkeypatch.setattr(tasks, "DATABASE_OUTAGE_PAUSE_SECONDS", 0)
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"  # nobody listens there: the database is really unreachable
    try:
        with pytest.raises(Reject) as refused:
            tasks.run_execute_task.run(12345)
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert refused.value.requeue is True


def test_the_dispatch_modules_send_the_names_the_tasks_are_registered_under(monkeypatch):
    """Services send tasks by name: a name no task is registered under would be dropped by every worker."""
    from acceptance.services import dispatch as acceptance_dispatch
    from vendor.services import dispatch as vendor_dispatch

    sent: list[str] = []
    monkeypatch.setattr(app, "send_task", lambda name, **options: sent.append(name))
    acceptance_dispatch._send(1, "simulator", declare=False, priority=stages.PRIORITY_BACKLOG)
    acceptance_dispatch.deliverable_check_send(1)
    vendor_dispatch.artifact_check_queue(1)
    vendor_dispatch.notification_email_queue(1)
    vendor_dispatch.webhook_delivery_queue(1)

    app.loader.import_default_modules()
    assert len(sent) == 5
    assert set(sent) <= set(app.tasks), set(sent) - set(app.tasks)
