"""Faults the virtual device can be configured to produce, and what each looks like to a caller."""

from dataclasses import dataclass
from enum import StrEnum

from npu_sim.errors import ErrorCode


class FaultKind(StrEnum):
    KV_APPLY_FAILURE = "kv_apply_failure"
    CORE_EXCEPTION = "core_exception"
    TIMEOUT = "timeout"
    BUSY = "busy"
    CORRUPTED_OUTPUT = "corrupted_output"
    SLOW_DEVICE = "slow_device"
    MEMORY_EXHAUSTION = "memory_exhaustion"
    DEVICE_CRASH = "device_crash"


# The code a request sees when the fault fires. Corrupted output is silent: the runtime reports
# success and only a golden comparison catches it. A slow device is reported as a time-out once the
# slowed job outlasts the caller's wait.
EXPECTED_CODES: dict[FaultKind, ErrorCode] = {
    FaultKind.KV_APPLY_FAILURE: ErrorCode.KV_APPLY_FAILED,
    FaultKind.CORE_EXCEPTION: ErrorCode.CORE_EXCEPTION,
    FaultKind.TIMEOUT: ErrorCode.TIMEOUT,
    FaultKind.BUSY: ErrorCode.BUSY,
    FaultKind.CORRUPTED_OUTPUT: ErrorCode.SUCCESS,
    FaultKind.SLOW_DEVICE: ErrorCode.TIMEOUT,
    FaultKind.MEMORY_EXHAUSTION: ErrorCode.OUT_OF_MEMORY,
    FaultKind.DEVICE_CRASH: ErrorCode.DEVICE_CRASHED,
}


@dataclass
class Fault:
    """A fault armed on a device.

    It fires on infer calls at_step .. at_step + count - 1, counted from 0 at the first infer call
    after it was armed (calls refused before they reach the device do not count).
    """

    kind: FaultKind
    at_step: int = 0
    count: int = 1
    slow_factor: float = 20.0  # slow_device: multiplies the call's modelled time
    flipped_bits: int = 8  # corrupted_output: logits that get their top exponent bit flipped
    chiplet: int = 0  # core_exception: the core that raises it
    core: int = 0

    def __post_init__(self) -> None:
        self.kind = FaultKind(self.kind)
        if self.at_step < 0 or self.count < 1 or self.slow_factor <= 0 or self.flipped_bits < 1:
            raise ValueError("at_step >= 0, count >= 1, slow_factor > 0 and flipped_bits >= 1 are required")
