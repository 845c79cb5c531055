"""The simulator's error table: 30 codes, 0-29.

CalRT 0.7.6 ships 30 codes in `calrt_errorlist.def` (seed I15) but their names and numbers are not
in the evidence. These are the simulator's own; a hardware runner maps its codes onto this table.
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, StrEnum


class ErrorCode(IntEnum):
    SUCCESS = 0
    CALRT_VERSION_INCOMPATIBLE = 1
    DRIVER_VERSION_INCOMPATIBLE = 2
    FIRMWARE_VERSION_INCOMPATIBLE = 3
    CHIP_INCOMPATIBLE = 4
    CALBIN_INVALID = 5
    CALBIN_DIGEST_MISMATCH = 6
    NOT_CONFIGURED = 7
    ALREADY_CONFIGURED = 8
    MODEL_NOT_FOUND = 9
    INVALID_ARGUMENT = 10
    SHAPE_MISMATCH = 11
    DTYPE_MISMATCH = 12
    OUT_OF_MEMORY = 13
    KV_NO_CAPACITY = 14
    KV_APPLY_FAILED = 15
    KV_SEQUENCE_UNKNOWN = 16
    KV_SHIFT_INVALID = 17
    TIMEOUT = 18
    BUSY = 19
    QUEUE_FULL = 20
    CORE_EXCEPTION = 21
    DEVICE_NEEDS_RESET = 22
    DEVICE_CRASHED = 23
    JOB_ABORTED = 24
    MULTI_DEVICE_UNSUPPORTED = 25
    DMA_ERROR = 26
    THERMAL_THROTTLE = 27
    FIRMWARE_FAULT = 28
    INTERNAL = 29


@dataclass(frozen=True)
class ErrorInfo:
    code: ErrorCode
    category: str
    description: str
    # What a caller does to get service back; "none" when nothing needs doing.
    recovery: str
    # Reserved codes exist in the table but nothing in the simulator produces them.
    reserved: bool = False


ERROR_TABLE: dict[ErrorCode, ErrorInfo] = {
    info.code: info
    for info in [
        ErrorInfo(ErrorCode.SUCCESS, "ok", "The call succeeded.", "none"),
        ErrorInfo(
            ErrorCode.CALRT_VERSION_INCOMPATIBLE,
            "version",
            "The runtime version is outside the calbin's CalRT range.",
            "use a calbin built for this runtime",
        ),
        ErrorInfo(
            ErrorCode.DRIVER_VERSION_INCOMPATIBLE,
            "version",
            "The driver version is outside the calbin's driver range.",
            "use a calbin built for this driver",
        ),
        ErrorInfo(
            ErrorCode.FIRMWARE_VERSION_INCOMPATIBLE,
            "version",
            "The firmware version is outside the calbin's firmware range.",
            "use a calbin built for this firmware",
        ),
        ErrorInfo(
            ErrorCode.CHIP_INCOMPATIBLE,
            "version",
            "The chip is not in the calbin's chip list.",
            "use a calbin built for this chip",
        ),
        ErrorInfo(
            ErrorCode.CALBIN_INVALID,
            "configuration",
            "The calbin package failed validation or its tensors do not match its manifest.",
            "fix the package",
        ),
        ErrorInfo(
            ErrorCode.CALBIN_DIGEST_MISMATCH,
            "configuration",
            "A file of the calbin does not match the sha256 in its manifest.",
            "fetch the package again",
        ),
        ErrorInfo(
            ErrorCode.NOT_CONFIGURED,
            "configuration",
            "Inference was requested before the calbin was configured on the device.",
            "configure the calbin",
        ),
        ErrorInfo(
            ErrorCode.ALREADY_CONFIGURED,
            "configuration",
            "A calbin is already configured; one resident calbin per device.",
            "reset the configuration first",
        ),
        ErrorInfo(
            ErrorCode.MODEL_NOT_FOUND,
            "configuration",
            "No sub-model has exactly this name.",
            "use the exact sub-model name",
        ),
        ErrorInfo(ErrorCode.INVALID_ARGUMENT, "argument", "An argument is out of range.", "fix the call"),
        ErrorInfo(
            ErrorCode.SHAPE_MISMATCH,
            "shape",
            "The input does not fit the sub-model's shape (tokens, lanes or sequence length).",
            "fix the call",
        ),
        ErrorInfo(ErrorCode.DTYPE_MISMATCH, "shape", "The input has the wrong element type.", "fix the call"),
        ErrorInfo(
            ErrorCode.OUT_OF_MEMORY,
            "memory",
            "Device memory is exhausted (static reservation at configure, dynamic buffers at infer).",
            "clear dynamic memory; for a static reservation, free the device or use a smaller calbin",
        ),
        ErrorInfo(
            ErrorCode.KV_NO_CAPACITY,
            "kv",
            "The KV cache has no lane or no room left for the tokens asked for.",
            "free a sequence or wait for one to finish",
        ),
        ErrorInfo(
            ErrorCode.KV_APPLY_FAILED,
            "kv",
            "Committing a sequence's pending KV failed; the pending tokens were rolled back.",
            "free the sequence and run the request again",
        ),
        ErrorInfo(
            ErrorCode.KV_SEQUENCE_UNKNOWN,
            "kv",
            "The sequence id has no KV allocation.",
            "allocate the sequence first",
        ),
        ErrorInfo(
            ErrorCode.KV_SHIFT_INVALID,
            "kv",
            "The shift is out of range or the sequence has tokens in flight.",
            "fix the call",
        ),
        ErrorInfo(
            ErrorCode.TIMEOUT,
            "timeout",
            "Wait ran out of time before the job finished.",
            "reset the core, which aborts the job",
        ),
        ErrorInfo(ErrorCode.BUSY, "busy", "The device refused the job because it is busy.", "retry later"),
        ErrorInfo(
            ErrorCode.QUEUE_FULL,
            "busy",
            "The number of jobs in flight reached the parallel-mode limit.",
            "wait for a job to finish",
        ),
        ErrorInfo(
            ErrorCode.CORE_EXCEPTION,
            "crash",
            "A core raised an exception while running the job.",
            "reset the core, free the job's sequences and prefill them again",
        ),
        ErrorInfo(
            ErrorCode.DEVICE_NEEDS_RESET,
            "crash",
            "A core exception has not been cleared yet; no job is accepted.",
            "reset the faulted core",
        ),
        ErrorInfo(
            ErrorCode.DEVICE_CRASHED,
            "crash",
            "The device stopped responding; all state on it is lost.",
            "reset the device, configure the calbin again and prefill every sequence again",
        ),
        ErrorInfo(
            ErrorCode.JOB_ABORTED,
            "crash",
            "The job was cancelled by a reset before it finished.",
            "submit the job again",
        ),
        ErrorInfo(
            ErrorCode.MULTI_DEVICE_UNSUPPORTED,
            "configuration",
            "A virtual device spans exactly one physical device on CalRT 0.7.6.",
            "use one physical device",
        ),
        ErrorInfo(
            ErrorCode.DMA_ERROR,
            "transfer",
            "A host-device transfer failed.",
            "reset the device",
            reserved=True,
        ),
        ErrorInfo(
            ErrorCode.THERMAL_THROTTLE,
            "device",
            "The device throttled its clock.",
            "none",
            reserved=True,
        ),
        ErrorInfo(
            ErrorCode.FIRMWARE_FAULT,
            "device",
            "The firmware reported a fault.",
            "reset the device",
            reserved=True,
        ),
        ErrorInfo(ErrorCode.INTERNAL, "internal", "Unclassified runtime error.", "reset the device", reserved=True),
    ]
}


class ServiceAction(StrEnum):
    """What a service does with a request whose call failed with a code (V53)."""

    NONE = "none"  # the call succeeded
    RETRY = "retry"  # transient: back off and run the request again
    RECOVER = "recover"  # apply the code's recovery to the device, then run the request again
    REJECT = "reject"  # the request itself is wrong: answer the client, do not retry
    UNAVAILABLE = "unavailable"  # the target cannot serve until an operator acts


@dataclass(frozen=True)
class ServiceError:
    action: ServiceAction
    http_status: int  # what the client gets when the request finally fails with this code


_RETRY, _RECOVER, _REJECT, _DOWN = (
    ServiceAction.RETRY,
    ServiceAction.RECOVER,
    ServiceAction.REJECT,
    ServiceAction.UNAVAILABLE,
)

# The mapping from runtime codes to what the serving loop does and what a client sees (I15, error mapping).
SERVICE_ERRORS: dict[ErrorCode, ServiceError] = {
    ErrorCode.SUCCESS: ServiceError(ServiceAction.NONE, 200),
    ErrorCode.CALRT_VERSION_INCOMPATIBLE: ServiceError(_DOWN, 503),
    ErrorCode.DRIVER_VERSION_INCOMPATIBLE: ServiceError(_DOWN, 503),
    ErrorCode.FIRMWARE_VERSION_INCOMPATIBLE: ServiceError(_DOWN, 503),
    ErrorCode.CHIP_INCOMPATIBLE: ServiceError(_DOWN, 503),
    ErrorCode.CALBIN_INVALID: ServiceError(_DOWN, 503),
    ErrorCode.CALBIN_DIGEST_MISMATCH: ServiceError(_DOWN, 503),
    ErrorCode.NOT_CONFIGURED: ServiceError(_RECOVER, 503),
    ErrorCode.ALREADY_CONFIGURED: ServiceError(_DOWN, 503),
    ErrorCode.MODEL_NOT_FOUND: ServiceError(_DOWN, 500),
    ErrorCode.INVALID_ARGUMENT: ServiceError(_REJECT, 400),
    ErrorCode.SHAPE_MISMATCH: ServiceError(_REJECT, 400),
    ErrorCode.DTYPE_MISMATCH: ServiceError(_REJECT, 400),
    ErrorCode.OUT_OF_MEMORY: ServiceError(_RECOVER, 503),
    ErrorCode.KV_NO_CAPACITY: ServiceError(_RETRY, 429),
    ErrorCode.KV_APPLY_FAILED: ServiceError(_RECOVER, 503),
    ErrorCode.KV_SEQUENCE_UNKNOWN: ServiceError(_DOWN, 500),
    ErrorCode.KV_SHIFT_INVALID: ServiceError(_DOWN, 500),
    ErrorCode.TIMEOUT: ServiceError(_RECOVER, 504),
    ErrorCode.BUSY: ServiceError(_RETRY, 503),
    ErrorCode.QUEUE_FULL: ServiceError(_RETRY, 503),
    ErrorCode.CORE_EXCEPTION: ServiceError(_RECOVER, 503),
    ErrorCode.DEVICE_NEEDS_RESET: ServiceError(_RECOVER, 503),
    ErrorCode.DEVICE_CRASHED: ServiceError(_RECOVER, 503),
    ErrorCode.JOB_ABORTED: ServiceError(_RETRY, 503),
    ErrorCode.MULTI_DEVICE_UNSUPPORTED: ServiceError(_DOWN, 503),
    ErrorCode.DMA_ERROR: ServiceError(_RECOVER, 503),
    ErrorCode.THERMAL_THROTTLE: ServiceError(_RETRY, 503),
    ErrorCode.FIRMWARE_FAULT: ServiceError(_RECOVER, 503),
    ErrorCode.INTERNAL: ServiceError(_DOWN, 500),
}


class CalrtError(Exception):
    """A runtime call failed with a code from the table."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        self.message = message or ERROR_TABLE[code].description
        super().__init__(f"{code.name} ({int(code)}): {self.message}")


def code_of(action: Callable[[], object]) -> ErrorCode:
    """The code an action ends with: raised as CalrtError, returned (wait) or carried by its outcome
    (a request's), else SUCCESS."""
    try:
        outcome = action()
    except CalrtError as error:
        return error.code
    if isinstance(outcome, ErrorCode):
        return outcome
    code = getattr(outcome, "code", None)
    return code if isinstance(code, ErrorCode) else ErrorCode.SUCCESS


def describe(code: int) -> dict[str, object]:
    """The table row of a code as plain JSON-ready data."""
    info = ERROR_TABLE[ErrorCode(code)]
    return {
        "code": int(info.code),
        "name": info.code.name,
        "category": info.category,
        "description": info.description,
        "recovery": info.recovery,
        "reserved": info.reserved,
    }
