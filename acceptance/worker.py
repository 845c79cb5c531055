"""Worker heartbeats: a worker consuming a target's queue reports every ACCEPTANCE_TARGET_HEARTBEAT_SECONDS,
from a thread in the worker's main process, so a target's health shows whether anything serves it. The same
thread removes the working directories lost attempts left on the worker's host, which the sweeper on the
beat's host cannot reach."""

import logging
import threading

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import connection

from acceptance.services.sweeper import run_dirs_sweep
from acceptance.services.targets import target_heartbeat

logger = logging.getLogger(__name__)

_stop = threading.Event()


def _beat(queues: list[str], worker: str) -> None:
    while True:
        try:
            target_heartbeat(queues=queues, worker=worker)
            run_dirs_sweep()
        except Exception:  # the database may be briefly unreachable; the next beat tries again
            logger.exception("target heartbeat failed")
        finally:
            # No connection stays open between beats, so a pool child forked meanwhile inherits none.
            connection.close()
        if _stop.wait(settings.ACCEPTANCE_TARGET_HEARTBEAT_SECONDS):
            return


@worker_ready.connect
def _start_heartbeat(sender, **kwargs) -> None:
    queues = sorted(sender.app.amqp.queues.consume_from)
    _stop.clear()
    threading.Thread(target=_beat, args=(queues, sender.hostname), name="target-heartbeat", daemon=True).start()


@worker_shutdown.connect
def _stop_heartbeat(sender, **kwargs) -> None:
    _stop.set()
