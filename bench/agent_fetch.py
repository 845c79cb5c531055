"""calculet-agent's input fetch against curl of the same file from the same server: gunicorn as deployed
(gunicorn.conf.py, 2 workers) over loopback, the file a health job's known-good package of --mib MiB of random
bytes (served by the same `GET /api/v1/agent/runs/<id>/inputs/<sha256>/` and `calculet.downloads` as an
artifact).

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/agent_fetch.py [--mib 512] [--rounds 3]

Creates a throw-away database (benchapi_<name>), a hardware target with a token, registers an agent and claims
the health job through the API as calculet-agent does. Each round fetches the input once with the agent's own
code (`calculet_agent.cache.Cache.fetch` over `Client.download`: written to its cache and its SHA-256 checked)
into an empty cache, and once with `curl -o` into the same directory; the lease is renewed between fetches.
Prints each round's MB/s and the ratio of the agent's best to curl's best (goal: at least 0.8). Removes the
database.
"""

import argparse
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
import api_upload  # noqa: E402, F401  (sets Django up, as every bench does)
from api_upload import free_port, start_gunicorn, write_random_file  # noqa: E402
from calculet_agent.cache import Cache  # noqa: E402
from calculet_agent.client import Client  # noqa: E402
from calculet_agent.signing import public_key_text  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from acceptance.models import Target  # noqa: E402
from acceptance.services import (  # noqa: E402
    target_health_check_start,
    target_register,
    target_registration_approve,
)
from acceptance.services.agents import target_token_create  # noqa: E402
from tests.factories import make_user  # noqa: E402

MB = 1_000_000


def claimed_health_job(url: str, key: str) -> dict:
    client = Client(url, key)
    public_key = public_key_text(Ed25519PrivateKey.generate())
    agent = client.post("register/", {"host": "bench", "public_key": public_key, "agent_version": "bench"}).json()
    assert client.post("claim/", {"agent": agent["agent"]}).status == 204  # the first poll: the target is served
    board = Target.objects.get(slug="bench-board")
    # A first registration keeps the target out of rotation until a PM approves it.
    target_registration_approve(actor=make_user("bench-pm", "team", "pm"), target=board)
    target_health_check_start(board)
    connection.close()
    return client.post("claim/", {"agent": agent["agent"]}).json()


def agent_fetch(client: Client, claimed: dict, directory: Path) -> float:
    item = claimed["job"]["inputs"][0]
    cache = Cache(directory / "cache")
    started = time.perf_counter()
    cache.fetch(
        item["sha256"], functools.partial(client.download, claimed["run"], claimed["run_token"], item["sha256"])
    )
    return time.perf_counter() - started


def curl_fetch(url: str, claimed: dict, directory: Path) -> float:
    item = claimed["job"]["inputs"][0]
    address = f"{url}/api/v1/agent/runs/{claimed['run']}/inputs/{item['sha256']}/"
    started = time.perf_counter()
    subprocess.run(
        [
            "curl",
            "-sSf",
            "-o",
            str(directory / "curl.bin"),
            "-H",
            f"Authorization: Run {claimed['run_token']}",
            address,
        ],
        check=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings.DATABASES["default"]["TEST"]["NAME"] = "benchapi_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = None
    try:
        with tempfile.TemporaryDirectory(prefix="calculet-bench-fetch-") as tmp:
            work = Path(tmp)
            package = work / "known-good.tar"
            write_random_file(package, args.mib * 1024 * 1024)
            os.environ["ACCEPTANCE_HEALTH_PACKAGE"] = str(package)
            target = target_register(
                actor="bench", slug="bench-board", kind=Target.HARDWARE, calrt_version="0.7.6",
                driver_version="2.3.0", firmware_version="1.8.0", chip="calculet-2c", runner_command="/bin/true",
            )  # fmt: skip
            key = target_token_create(actor="bench", target=target, name="bench")[1]
            connection.close()
            port = free_port()
            server = start_gunicorn(port, work / "storage")
            url = f"http://127.0.0.1:{port}"
            claimed = claimed_health_job(url, key)
            client = Client(url, key)
            size_mb = args.mib * 1024 * 1024 / MB
            print(f"{args.mib} MiB over loopback, gunicorn.conf.py with 2 workers, {os.cpu_count()} CPUs shared")
            print(f"{'round':>6}{'agent MB/s':>12}{'curl MB/s':>11}")
            agent_times: list[float] = []
            curl_times: list[float] = []
            fetches = (
                (lambda directory: agent_fetch(client, claimed, directory), agent_times),
                (lambda directory: curl_fetch(url, claimed, directory), curl_times),
            )
            for number in range(1, args.rounds + 1):
                for fetch, times in fetches:
                    # Renew the lease, so the run token holds for the whole bench.
                    client.post(f"runs/{claimed['run']}/heartbeat/", {"chunks": []}, run_token=claimed["run_token"])
                    with tempfile.TemporaryDirectory(dir=work) as directory:
                        times.append(fetch(Path(directory)))
                print(f"{number:>6}{size_mb / agent_times[-1]:>12.0f}{size_mb / curl_times[-1]:>11.0f}", flush=True)
            agent_best, curl_best = size_mb / min(agent_times), size_mb / min(curl_times)
            print(f"best: agent {agent_best:.0f} MB/s, curl {curl_best:.0f} MB/s, ratio {agent_best / curl_best:.2f}")
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
