"""The slow tiers are known by the fixtures their tests use, and the fast tier (--fast) leaves them out, --slow
keeps only them; a test that starts a process without a slow mark is refused."""

import subprocess
import sys

import pytest

from tests.acceptance.workers import ROOT, Worker

# Tests with real workers, live servers and browsers (none marked by hand), and the fast tests of one module.
SLOW_MODULES = ["tests/acceptance/test_workers.py", "tests/web/test_browser.py", "tests/api/test_tus.py"]
FAST_MODULE = "tests/test_audit.py"


def collected_modules(tier_option: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", tier_option]
        + [*SLOW_MODULES, FAST_MODULE],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deselected" in result.stdout.splitlines()[-1]
    return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}


def test_fast_leaves_out_the_tests_using_workers_live_servers_or_browsers_and_keeps_the_rest():
    assert collected_modules("--fast") == {FAST_MODULE}


def test_slow_keeps_only_the_tests_using_workers_live_servers_or_browsers():
    assert collected_modules("--slow") == set(SLOW_MODULES)


def test_a_process_started_in_a_test_of_the_fast_tier_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="carries none of the marks"):
        Worker([sys.executable, "-c", "pass"], {}, tmp_path / "log")
