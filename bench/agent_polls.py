"""The server's CPU per agent poll, with 1 and then 20 targets each polled by its own client as calculet-agent
polls (`POST /api/v1/agent/claim/`, nothing queued: 204), against gunicorn as deployed (gunicorn.conf.py, 2
workers) over loopback.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/agent_polls.py [--seconds 20] [--every 1]

Creates a throw-away database (benchapi_<name>), N hardware targets each with a token and a registered agent,
starts gunicorn, and for each N runs one thread per target that claims every --every seconds for --seconds.
Prints the polls answered, the gunicorn workers' CPU seconds (from /proc/<pid>/stat) and the CPU
milliseconds per poll; a constant figure across N is what "constant per poll" means. Removes the database.
"""

import argparse
import base64
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import api_upload  # noqa: E402, F401  (sets Django up, as every bench does)
from api_upload import cpu_seconds, free_port, start_gunicorn, worker_pids  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from acceptance.models import Target  # noqa: E402
from acceptance.services import target_register  # noqa: E402
from acceptance.services.agents import target_token_create  # noqa: E402

COUNTS = (1, 20)


def targets_with_tokens(count: int) -> list[str]:
    keys = []
    for number in range(count):
        slug = f"bench-board-{number}"
        target = Target.objects.filter(slug=slug).first() or target_register(
            actor="bench", slug=slug, kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
            firmware_version="1.8.0", chip="calculet-2c", runner_command="/bin/true",
        )  # fmt: skip
        keys.append(target_token_create(actor="bench", target=target, name="bench")[1])
    return keys


def registered(url: str, key: str) -> tuple[requests.Session, int]:
    session = requests.Session()
    session.headers["Authorization"] = f"Target {key}"
    public_key = base64.b64encode(os.urandom(32)).decode()  # any 32 bytes are an Ed25519 public key's encoding
    agent = session.post(f"{url}/api/v1/agent/register/", json={"host": "bench", "public_key": public_key,
                         "agent_version": "bench"}, timeout=30).json()["agent"]  # fmt: skip
    return session, agent


def poller(url: str, session: requests.Session, agent: int, stop_at: float, every: float, counts: list[int]) -> None:
    while time.monotonic() < stop_at:
        started = time.monotonic()
        answer = session.post(f"{url}/api/v1/agent/claim/", json={"agent": agent}, timeout=30)
        if answer.status_code == 204:
            counts.append(1)
        time.sleep(max(0.0, every - (time.monotonic() - started)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between one agent's polls")
    args = parser.parse_args()
    settings.DATABASES["default"]["TEST"]["NAME"] = "benchapi_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = None
    try:
        keys = targets_with_tokens(max(COUNTS))
        connection.close()
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="calculet-bench-polls-") as storage:
            server = start_gunicorn(port, Path(storage))
            url = f"http://127.0.0.1:{port}"
            print(f"gunicorn.conf.py, 2 workers over loopback, {os.cpu_count()} CPUs shared with the pollers")
            print(f"{'agents':>7}{'polls':>8}{'polls/s':>9}{'server CPU s':>14}{'CPU ms/poll':>13}")
            for count in COUNTS:
                counts: list[int] = []
                agents = [registered(url, key) for key in keys[:count]]
                pids = worker_pids(server)
                before = sum(cpu_seconds(pid) for pid in pids)
                stop_at = time.monotonic() + args.seconds
                threads = [
                    threading.Thread(target=poller, args=(url, session, agent, stop_at, args.every, counts))
                    for session, agent in agents
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                used = sum(cpu_seconds(pid) for pid in pids) - before
                polls = len(counts)
                per_poll = 1000 * used / max(polls, 1)
                print(f"{count:>7}{polls:>8}{polls / args.seconds:>9.1f}{used:>14.2f}{per_poll:>13.2f}", flush=True)
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
