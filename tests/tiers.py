"""The suite's tiers. The fast tier (`pytest --fast`, which `scripts/dev.py test --fast` runs in parallel) leaves
out the tests that start real processes, serve the app or drive a browser. Those are marked by what they use
(tests/conftest.py), never by hand, and a process started by a test without its mark is refused, so no slow
test can land in the fast tier unmarked."""

# A test using one of these fixtures (directly or through another fixture) gets its mark.
SLOW_FIXTURES = {
    "workers": "worker",
    "live_server": "live_server",
    "gunicorn_server": "live_server",
    "browser": "browser",
    "laptop": "laptop",
}
# The marks the fast tier leaves out (`laptop`: tests/laptop/'s `dev.py run`).
SLOW_MARKS = frozenset({"worker", "live_server", "browser", "laptop"})

# The marks of the test running now; None outside pytest (the benchmarks start workers too).
running_test_marks: frozenset[str] | None = None


def require_slow_mark(what: str) -> None:
    """Refuse to start the process `what` in a test of the fast tier (one without a slow mark)."""
    if running_test_marks is not None and not running_test_marks & SLOW_MARKS:
        raise RuntimeError(
            f"this test starts a process ({what}) but carries none of the marks {sorted(SLOW_MARKS)}: build it on "
            "a fixture of SLOW_FIXTURES (tests/tiers.py) or mark it, so that `pytest --fast` leaves it out"
        )
