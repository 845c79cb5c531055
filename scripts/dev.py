#!/usr/bin/env python3
"""Set-up and the two everyday commands, needing nothing but Python 3.11+.

python3 scripts/dev.py run    # venv, install, migrate, import the seed, demo, serve on 127.0.0.1:8000
python3 scripts/dev.py test   # venv, install, lint, checks, the whole test suite
"""

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
INSTALL_STAMP = VENV / ".calculet-installed"


def sh(*args: str | Path, env: dict | None = None) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], cwd=ROOT, env=env, check=True)


def ensure_venv() -> None:
    """Create .venv and install the project with its test extra, again whenever pyproject.toml changes."""
    if not PYTHON.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if INSTALL_STAMP.exists() and INSTALL_STAMP.read_text() == wanted:
        return
    sh(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    sh(PYTHON, "-m", "pip", "install", "--quiet", "-e", ".[test]")
    INSTALL_STAMP.write_text(wanted)


def run() -> None:
    env = {**os.environ, "DEBUG": os.environ.get("DEBUG", "1")}
    manage = [PYTHON, "manage.py"]
    sh(*manage, "migrate", "--no-input", env=env)
    sh(*manage, "import_checklist", env=env)
    sh(*manage, "seed_demo", env=env)
    os.execve(str(PYTHON), [str(PYTHON), "manage.py", "runserver", "127.0.0.1:8000"], env)


def test() -> None:
    # The suite runs on the real services; a machine without them fails here rather than skipping.
    env = {
        **os.environ,
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/calculet"),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "test-only-secret-key"),
    }
    sh(PYTHON, "-m", "ruff", "check", ".", env=env)
    sh(PYTHON, "-m", "mypy", env=env)
    sh(VENV / "bin" / "lint-imports", env=env)
    sh(PYTHON, "manage.py", "check", env=env)
    sh(PYTHON, "manage.py", "makemigrations", "--check", "--dry-run", env=env)
    sh(PYTHON, "-m", "pytest", *sys.argv[2:], env=env)


def main() -> None:
    commands = {"run": run, "test": test}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    ensure_venv()
    commands[sys.argv[1]]()


if __name__ == "__main__":
    main()
