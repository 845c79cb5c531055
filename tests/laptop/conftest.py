"""The laptop default as a newcomer meets it: `python3 scripts/dev.py run` (README.md) on a fresh data folder,
with SQLite, the embedded broker, the two workers `run` starts and the demo, started once a session; the tests
then read its pages and API over HTTP as the demo's people, in both languages."""

import contextlib
import os
import re
import signal
import subprocess
import sys

import pytest
import requests

from tests.acceptance.workers import ROOT, Worker, wait_until
from tests.laptop.run import (
    START_SECONDS,
    VIEWER,
    WEBHOOK,
    Laptop,
    demo_ids,
    free_port,
    laptop_env,
    log_in,
    make_viewer,
    post_form,
    serving,
)


@pytest.fixture(scope="session")
def laptop(tmp_path_factory) -> Laptop:
    """`python3 scripts/dev.py run --port N` on a fresh data folder, serving once the demo is built, with a
    session for each role: the demo's PM (pm), operator (omar) and vendor engineer (acme-engineer, whose API
    calls use the token `run` prints), a viewer made as a PM would (create_api_user), and nobody logged in."""
    base = tmp_path_factory.mktemp("laptop")
    data_dir = base / "data"
    env = laptop_env(data_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(ROOT / "scripts" / "dev.py"), "run", "--port", str(port)]
    run = Worker(command, env, base / "run.log")
    try:
        wait_until(
            lambda: "vendor token:" in run.log_text() and serving(url),
            timeout=START_SECONDS,
            what="`dev.py run` to build the demo and serve",
            workers=[run],
            sweep=False,
        )
        output = run.log_text()
        vendor_token = re.search(r"vendor token:\s+(\S+)", output).group(1)
        make_viewer(env, VIEWER)
        laptop = Laptop(url=url, vendor_token=vendor_token, output=output, data_dir=data_dir)
        for role, username in (("pm", "pm"), ("operator", "omar"), ("viewer", VIEWER), ("vendor", "acme-engineer")):
            laptop.sessions[role] = log_in(url, username)
        laptop.sessions["nobody"] = requests.Session()
        hook = post_form(
            laptop.sessions["pm"],
            url,
            "/webhooks/",
            {"organisation": "acme-npu", "name": WEBHOOK, "url": "https://tracker.example.com/calculet"},
        )
        assert hook.status_code == 302, hook.text
        laptop.ids.update(demo_ids(laptop, webhook=int(hook.headers["Location"].rstrip("/").rsplit("/", 1)[1])))
        yield laptop
    finally:
        # Stopped as Ctrl-C stops it, so `run` ends its workers; whatever is left is killed with its group.
        os.kill(run.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.process.wait(timeout=60)
        run.stop()
