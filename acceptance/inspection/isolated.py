"""One command in agent/calculet_agent/sandbox.py's sandbox, its output kept to a bounded tail."""

from dataclasses import dataclass
from pathlib import Path

from calculet_agent.sandbox import Limits, Outcome, run_sandboxed, scrubbed_environment

TAIL_BYTES = 8192
# Generous for a compiler or a build script; every one still ends the run with a reason when crossed.
DEFAULT_LIMITS = Limits(
    wall_seconds=600,
    memory_bytes=4 * 1024**3,
    output_bytes=16 * 1024**2,
    file_bytes=1024**3,
    workdir_bytes=4 * 1024**3,
    open_files=1024,
)


@dataclass
class Ran:
    outcome: Outcome
    output_tail: str  # the last TAIL_BYTES of stdout and stderr, interleaved as they came

    @property
    def record(self) -> dict:
        return {**self.outcome.sandbox_record(), "reason": self.outcome.reason, "output_tail": self.output_tail}


def run_isolated(argv: list[str], *, workdir: Path, limits: Limits, env: dict[str, str] | None = None) -> Ran:
    tail = bytearray()

    def keep(_stream: str, chunk: bytes) -> None:
        tail.extend(chunk)
        del tail[:-TAIL_BYTES]

    outcome = run_sandboxed(
        argv, workdir=workdir, env=scrubbed_environment(env), limits=limits, on_output=keep, tick_seconds=0.5
    )
    return Ran(outcome, tail.decode("utf-8", errors="replace"))
