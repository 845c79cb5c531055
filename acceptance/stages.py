"""The acceptance chain of section 13 as data: its stages, run states, and how a stage's state follows
from its latest run. No ORM here."""

from collections.abc import Sequence

from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

CLAIM = "claim"
ARTIFACT = "artifact"
RUNNER = "runner"
GOLDEN = "golden"
FAILURE = "failure"
INTEGRATION = "integration"
SOAK = "soak"
HEALTH = "health"

CHAIN_STAGES = [CLAIM, ARTIFACT, RUNNER, GOLDEN, FAILURE, INTEGRATION, SOAK]
# Checked by services inside the worker; the others are executed by a runner through the runner protocol.
SERVICE_STAGES = [CLAIM, ARTIFACT]
RUNNER_STAGES = [RUNNER, GOLDEN, FAILURE, INTEGRATION, SOAK]
# What calculet-agent runs on a pulled target's host; the other stages are the server's own checks.
PULLED_STAGES = [*RUNNER_STAGES, HEALTH]
# A target's periodic health job runs a known-good package through the same protocol; it belongs to no chain.
RUN_STAGES = [*CHAIN_STAGES, HEALTH]

STAGE_LABELS = {
    CLAIM: _("Claim"),
    ARTIFACT: _("Versioned artifact"),
    RUNNER: _("Isolated runner"),
    GOLDEN: _("Numerical golden"),
    FAILURE: _("Failure and recovery"),
    INTEGRATION: _("Service integration"),
    SOAK: _("Load, soak and performance"),
    HEALTH: _("Target health check"),
}


PENDING = "pending"
QUEUED = "queued"
RUNNING = "running"
PASSED = "passed"
FAILED = "failed"
ERROR = "error"
STALE = "stale"
STATE_LABELS = {
    PENDING: pgettext_lazy("run state", "Pending"),
    QUEUED: pgettext_lazy("run state", "Queued"),
    RUNNING: pgettext_lazy("run state", "Running"),
    PASSED: pgettext_lazy("run state", "Passed"),
    FAILED: pgettext_lazy("run state", "Failed"),
    ERROR: pgettext_lazy("run state", "Error"),
    STALE: pgettext_lazy("run state", "Stale"),
}
# The same states inside a sentence ("Numerical golden (golden) is failed on …").
STATE_WORDS = {
    PENDING: pgettext_lazy("run state in a sentence", "pending"),
    QUEUED: pgettext_lazy("run state in a sentence", "queued"),
    RUNNING: pgettext_lazy("run state in a sentence", "running"),
    PASSED: pgettext_lazy("run state in a sentence", "passed"),
    FAILED: pgettext_lazy("run state in a sentence", "failed"),
    ERROR: pgettext_lazy("run state in a sentence", "in error"),
    STALE: pgettext_lazy("run state in a sentence", "stale"),
}
STATES = list(STATE_LABELS)
ACTIVE_STATES = [PENDING, QUEUED, RUNNING]
WAITING_STATES = [PENDING, QUEUED]
FINISHED_STATES = [PASSED, FAILED, ERROR, STALE]

# Which waiting run of a target is taken first, lowest first (Redis serves priority steps 0, 3, 6, 9 so): its
# health check, then a PM's re-run or the automatic retry of an infrastructure error, then the backlog.
PRIORITY_HEALTH = 0
PRIORITY_RERUN = 3
PRIORITY_BACKLOG = 6

PASS = "pass"
FAIL = "fail"
VERDICTS = [PASS, FAIL, ERROR]
VERDICT_STATES = {PASS: PASSED, FAIL: FAILED, ERROR: ERROR}


def stage_before(stage: str) -> str | None:
    index = CHAIN_STAGES.index(stage)
    return CHAIN_STAGES[index - 1] if index else None


def stage_state(latest_run_state: str | None, latest_run_digest: str | None, current_digest: str) -> str:
    """A stage's state: its latest run's, unless that run ran on other inputs than the chain's current ones."""
    if latest_run_state is None:
        return PENDING
    if latest_run_digest != current_digest:
        return STALE
    return latest_run_state


WAIT = "wait"
RUN = "run"
STOPPED = "stopped"
DONE = "done"


# Where a chain stands: its first stage that has not passed, or DONE once all seven have.
POSITIONS = [*CHAIN_STAGES, DONE]
DONE_LABEL = _("Every stage passed")


def chain_next(rows: Sequence[tuple[str, str, object | None]]) -> tuple[str, str | None]:
    """What a chain does next, from its (stage, state, latest run) rows in chain order.

    (RUN, stage) when the first stage that has not passed has no run on the current inputs (none, or a
    stale one); (WAIT, stage) while that run is pending, queued or running; (STOPPED, stage) when it failed
    or errored — a person re-runs it or a new answer replaces the inputs; (DONE, None) when every stage
    passed.
    """
    for stage, state, run in rows:
        if state == PASSED:
            continue
        if run is None or state == STALE:
            return RUN, stage
        if state in ACTIVE_STATES:
            return WAIT, stage
        return STOPPED, stage
    return DONE, None


def chain_position(rows: Sequence[tuple[str, str, object | None]]) -> str:
    """Where a chain stands: its first stage that has not passed, or DONE when all seven have."""
    for stage, state, _run in rows:
        if state != PASSED:
            return stage
    return DONE


# How bad a chain's standing is, worst first: a stage that failed or errored, then one whose run is on old inputs,
# then one still to run or running, then a chain whose every stage passed.
STANDING_SEVERITY = {FAILED: 0, ERROR: 0, STALE: 1, PENDING: 2, QUEUED: 2, RUNNING: 2, DONE: 3}


def chain_standing(rows: Sequence[tuple[str, str, object | None]]) -> tuple[str, str]:
    """(position, state) of a chain: its first stage that has not passed and that stage's state, or (DONE, DONE)."""
    for stage, state, _run in rows:
        if state != PASSED:
            return stage, state
    return DONE, DONE


def worst_standing(standings: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """Of a question's chains, the one to show first: the worst state, then the furthest position — a failed soak
    on one chain reads before every stage passed on another."""
    return min(standings, key=lambda standing: (STANDING_SEVERITY[standing[1]], -POSITIONS.index(standing[0])))


def standing_label(standing: tuple[str, str] | None) -> str:
    """A chain's standing as the lists show it: "Every stage passed", or the stage it stopped at and its state."""
    if standing is None:
        return ""
    position, state = standing
    if position == DONE:
        return str(DONE_LABEL)
    return _("%(stage)s: %(state)s") % {"stage": STAGE_LABELS[position], "state": STATE_WORDS[state]}
