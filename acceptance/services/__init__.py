"""The acceptance app's service layer: chains, runs, targets and the promotion gate. Every entry point (API,
browser, admin, tasks, management commands) calls these."""

from acceptance.services.answers import answer_submit
from acceptance.services.chains import chain_advance, chain_start, chain_start_for_answer, run_create, run_rerun
from acceptance.services.promotion import capability_promote, policy_current
from acceptance.services.registration import target_register, target_registration_approve
from acceptance.services.runs.execute import run_execute
from acceptance.services.sweeper import runs_sweep
from acceptance.services.targets import (
    target_ensure_simulator,
    target_health_check_start,
    target_heartbeat,
    target_set_health_schedule,
    target_set_maintenance,
    targets_health_check,
)

__all__ = [
    "answer_submit",
    "capability_promote",
    "chain_advance",
    "chain_start",
    "chain_start_for_answer",
    "policy_current",
    "run_create",
    "run_execute",
    "run_rerun",
    "runs_sweep",
    "target_ensure_simulator",
    "target_health_check_start",
    "target_heartbeat",
    "target_register",
    "target_registration_approve",
    "target_set_health_schedule",
    "target_set_maintenance",
    "targets_health_check",
]
