"""The acceptance chain of section 13 as data: its stages, run states, and how a stage's state follows
from its latest run. No ORM here."""

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
# A target's periodic health job runs a known-good package through the same protocol; it belongs to no chain.
RUN_STAGES = [*CHAIN_STAGES, HEALTH]

STAGE_LABELS = {
    CLAIM: "Claim",
    ARTIFACT: "Versioned artifact",
    RUNNER: "Isolated runner",
    GOLDEN: "Numerical golden",
    FAILURE: "Failure and recovery",
    INTEGRATION: "Service integration",
    SOAK: "Load, soak and performance",
    HEALTH: "Target health check",
}

PENDING = "pending"
QUEUED = "queued"
RUNNING = "running"
PASSED = "passed"
FAILED = "failed"
ERROR = "error"
STALE = "stale"
STATES = [PENDING, QUEUED, RUNNING, PASSED, FAILED, ERROR, STALE]
ACTIVE_STATES = [PENDING, QUEUED, RUNNING]
FINISHED_STATES = [PASSED, FAILED, ERROR, STALE]

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


def chain_next(stages: list[tuple[str, str, bool]]) -> tuple[str, str | None]:
    """What a chain does next, from (stage, state, has a run on the current inputs) in chain order.

    (RUN, stage) when the first stage that has not passed has no run on the current inputs; (WAIT, stage)
    while that run is pending, queued or running; (STOPPED, stage) when it failed or errored — a person
    re-runs it or a new answer replaces the inputs; (DONE, None) when every stage passed.
    """
    for stage, state, has_current_run in stages:
        if state == PASSED:
            continue
        if not has_current_run:
            return RUN, stage
        if state in ACTIVE_STATES:
            return WAIT, stage
        return STOPPED, stage
    return DONE, None
