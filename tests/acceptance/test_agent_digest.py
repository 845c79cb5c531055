"""The runner digest covers what the runner command runs on the host, not only its first word: a changed runner
script or module is a changed digest, and so a registration held for a PM's or operator's approval."""

import hashlib
import shutil
import sys
from pathlib import Path

import pytest
from calculet_agent import digest as agent_digest
from calculet_agent.digest import runner_digest, runner_files

from acceptance.services import target_registration_approve
from tests.acceptance.test_agent_api import board_agent, register_board

PYTHON = Path(sys.executable).resolve()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(*paths: Path) -> str:
    return hashlib.sha256("".join(f"{sha256(path)} {path}\n" for path in paths).encode()).hexdigest()


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    """A directory on the runner's PYTHONPATH holding a module and a package the runner may run with -m."""
    modules = tmp_path / "site"
    (modules / "board_pkg").mkdir(parents=True)
    (modules / "board_pkg" / "__init__.py").write_text("")
    (modules / "board_pkg" / "__main__.py").write_text("from board_pkg.runner import run\nrun()\n")
    (modules / "board_pkg" / "runner.py").write_text("def run():\n    print('board')\n")
    (modules / "board_pkg" / "__pycache__").mkdir()
    (modules / "board_pkg" / "__pycache__" / "runner.cpython-312.pyc").write_bytes(b"compiled v1")
    (modules / "board_runner.py").write_text("print('runner')\n")
    real = agent_digest.scrubbed_environment
    monkeypatch.setattr(agent_digest, "scrubbed_environment", lambda: real(python_path=[str(modules)]))
    return modules


def test_a_runner_binary_alone_keeps_the_digest_of_its_file(tmp_path):
    runner = tmp_path / "board-runner"
    runner.write_bytes(b"\x7fELF board runner v1")
    runner.chmod(0o755)
    assert runner_files(f"{runner} --fast") == [runner]
    assert runner_digest(f"{runner} --fast") == sha256(runner)
    assert runner_digest("no-such-runner-on-this-host --fast") == ""


def test_a_script_given_to_an_interpreter_is_in_the_digest_and_a_changed_script_changes_it(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text("print('v1')\n")
    command = f"{sys.executable} {script} --device /dev/null relative.py {tmp_path / 'missing.py'}"
    # A relative path names nothing the runner sees (it runs in its run's directory); a device is no file.
    assert runner_files(command) == [PYTHON, script]
    first = runner_digest(command)
    assert first == manifest(PYTHON, script) and first != sha256(PYTHON)  # not only the interpreter's
    script.write_text("print('v2')\n")
    assert runner_digest(command) != first


def test_a_module_run_with_dash_m_is_in_the_digest_as_the_runner_s_interpreter_resolves_it(module_dir):
    package = f"{sys.executable} -m board_pkg run"
    # A package's own files, in the order of their paths; its compiled bytecode is not its runner.
    in_package = [module_dir / "board_pkg" / name for name in ("__init__.py", "__main__.py", "runner.py")]
    assert runner_files(package) == [PYTHON, *in_package]
    module = f"{sys.executable} -m board_runner"
    assert runner_files(module) == [PYTHON, module_dir / "board_runner.py"]
    first = runner_digest(module)
    (module_dir / "board_runner.py").write_text("print('changed')\n")
    assert runner_digest(module) != first
    # A module that does not resolve leaves the interpreter alone in the digest.
    assert runner_digest(f"{sys.executable} -m no_such_module") == sha256(PYTHON)


@pytest.mark.django_db
def test_a_changed_runner_script_is_a_registration_held_for_approval(tmp_path, pm_user):
    board, agent = board_agent()
    script = tmp_path / "runner.py"
    script.write_text("print('v1')\n")
    command = f"{shutil.which('python3') or sys.executable} {script}"
    register_board(agent, runner_command=command, runner_digest=runner_digest(command))
    target_registration_approve(actor=pm_user, target=board)
    board.refresh_from_db()
    approved = board.runner_digest
    assert board.registration_pending == {} and approved
    register_board(agent, runner_command=command, runner_digest=runner_digest(command))
    board.refresh_from_db()
    assert board.registration_pending == {}  # the same script: nothing waits

    script.write_text("print('v2: measures something else')\n")
    register_board(agent, runner_command=command, runner_digest=runner_digest(command))
    board.refresh_from_db()
    assert board.registration_pending["changes"] == {"runner_digest": [approved, runner_digest(command)]}
    assert board.runner_digest == approved  # not applied until approved


def test_a_changed_module_of_a_package_run_with_dash_m_changes_the_digest_and_its_bytecode_does_not(module_dir):
    package = f"{sys.executable} -m board_pkg run"
    first = runner_digest(package)
    assert first == manifest(PYTHON, *sorted(path for path in (module_dir / "board_pkg").glob("*.py")))
    # What __main__ imports is the runner as much as __main__ is.
    (module_dir / "board_pkg" / "runner.py").write_text("def run():\n    print('measures something else')\n")
    changed = runner_digest(package)
    assert changed != first
    # A module of the package named after -m covers the same package.
    assert runner_digest(f"{sys.executable} -m board_pkg.runner") == changed
    # Bytecode the interpreter rewrites from the sources changes nothing, in __pycache__ or beside them.
    (module_dir / "board_pkg" / "__pycache__" / "runner.cpython-312.pyc").write_bytes(b"compiled v2")
    (module_dir / "board_pkg" / "stale.pyc").write_bytes(b"compiled")
    assert runner_digest(package) == changed
    # Every other file of the package is in it, in a subpackage too.
    (module_dir / "board_pkg" / "tables").mkdir()
    (module_dir / "board_pkg" / "tables" / "limits.json").write_text("{}")
    assert runner_digest(package) != changed
