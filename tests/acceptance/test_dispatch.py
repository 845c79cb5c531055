"""A run whose worker was lost goes to the front of its target's queue, on the real broker."""

import json
import uuid

import pytest
from celery.exceptions import Reject
from django.db import connection

from acceptance import tasks
from acceptance.services.dispatch import LOST_WORKER_PRIORITY, SEND_PRIORITY, _send
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
        _send(run_id, queue_name, declare=True, priority=SEND_PRIORITY)
    _send(99, queue_name, declare=True, priority=LOST_WORKER_PRIORITY)
    _send(4, queue_name, declare=True, priority=SEND_PRIORITY)

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
