"""scripts/dev.py's choice made before anything is installed: `run`'s port."""

import socket
import subprocess
import sys

import pytest

from tests.acceptance.workers import ROOT, dev_script
from tests.laptop.run import laptop_env

DEV = ROOT / "scripts" / "dev.py"


@pytest.fixture
def busy_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.mark.parametrize("how", ["--port", "PORT"])
def test_run_on_a_busy_port_stops_before_installing_or_migrating(busy_port, how, tmp_path):
    env = laptop_env(tmp_path / "data")  # were the port not checked, nothing of this suite's would be touched
    args = ["--port", str(busy_port)] if how == "--port" else []
    if how == "PORT":
        env["PORT"] = str(busy_port)
    result = subprocess.run(
        [sys.executable, str(DEV), "run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert f"port {busy_port} is in use on 127.0.0.1" in result.stderr and "--port N or PORT=N" in result.stderr
    assert "+ " not in result.stdout  # no step began: dev.py prints each command it runs
    assert not (tmp_path / "data").exists()  # nothing migrated, no secret key made


def test_a_free_port_is_taken_from_port_and_the_option_wins(monkeypatch, busy_port):
    dev = dev_script()
    monkeypatch.setenv("PORT", str(busy_port))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert dev.run_port(["--port", str(free)]) == free
    with pytest.raises(SystemExit, match=f"port {busy_port} is in use"):
        dev.run_port([])
    monkeypatch.setenv("PORT", str(free))
    assert dev.run_port([]) == free
