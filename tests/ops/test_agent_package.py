"""calculet-agent installs on a board's host by itself: `pip install ./agent` into a fresh venv brings only
`cryptography` (and what it needs), and the program starts there without Django or any of the server's code."""

import subprocess
import venv

from tests.acceptance.workers import ROOT

# cryptography's own dependencies, and what every venv holds.
ALLOWED = {"calculet-agent", "cryptography", "cffi", "pycparser", "pip", "setuptools"}


def test_the_agent_installs_alone_with_only_its_few_dependencies(tmp_path):
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(ROOT / "agent")], check=True, capture_output=True, timeout=600
    )
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "freeze"], check=True, capture_output=True, text=True
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.split()}
    assert "calculet-agent" in installed and "cryptography" in installed
    assert installed <= ALLOWED, installed - ALLOWED
    declared = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.requires('calculet-agent'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert declared == "['cryptography>=42']"
    started = subprocess.run(
        [tmp_path / "venv" / "bin" / "calculet-agent", "--help"], capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 0 and "--runner-command" in started.stdout, started.stderr
    # Without a token the agent refuses to start, saying what it needs.
    bare = subprocess.run([python, "-m", "calculet_agent", "--server", "http://x"], capture_output=True, text=True)
    assert bare.returncode == 2 and "the target token" in bare.stderr
