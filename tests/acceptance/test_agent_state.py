"""What an agent leaves in its state directory: a killed agent's run directories (each with a full copy of its
inputs) are removed when an agent starts there again, which only one agent at a time may."""

import os

import pytest
from calculet_agent.cli import state_lock
from calculet_agent.runner import runs_left_over_remove


def test_a_killed_agents_run_directories_are_removed_at_the_next_start(tmp_path):
    runs = tmp_path / "runs"
    left = runs / "calculet-agent-run-17-k2j4"
    left.mkdir(parents=True)
    (left / "package.calbin").write_bytes(b"x" * 1024)
    other = runs / "notes"
    other.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the agent's")
    (runs / "calculet-agent-run-18-link").symlink_to(outside)
    assert runs_left_over_remove(runs) == 1
    assert not left.exists()
    assert other.is_dir() and (outside / "keep").exists() and (runs / "calculet-agent-run-18-link").is_symlink()


def test_a_second_agent_on_the_same_state_directory_is_refused(tmp_path):
    """Without this an agent starting would remove the directory of the run another agent on it is running."""
    held = state_lock(tmp_path / "state")
    try:
        with pytest.raises(SystemExit, match="another agent is running with the state directory"):
            state_lock(tmp_path / "state")
        os.close(state_lock(tmp_path / "another"))  # another directory is another agent
    finally:
        os.close(held)
