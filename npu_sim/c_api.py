"""The C API's calling convention (I13): every call returns an int from the error table (never raises),
outputs land in places the caller provides; blocking infer, non-blocking infer, and wait."""

from collections.abc import Mapping, Sequence

import numpy as np

from npu_sim.device import BufferStatus, OutputBuffer, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import SubModel


def calrt_infer_nonblocking(
    device: VirtualDevice,
    submodel: SubModel,
    kv: KvManager,
    tokens: Mapping[int, Sequence[int]],
    handle_out: list[OutputBuffer],
) -> int:
    """Submit and return at once; the job's handle is appended to `handle_out`."""
    try:
        handle_out.append(device.infer(submodel, kv, tokens))
    except CalrtError as error:
        return int(error.code)
    return int(ErrorCode.SUCCESS)


def calrt_wait(handle: OutputBuffer, timeout_ms: float) -> int:
    try:
        return int(handle.wait(timeout_ms))
    except CalrtError as error:
        return int(error.code)


def calrt_get_output(handle: OutputBuffer, seq_id: int, out: np.ndarray) -> int:
    """Copy a done job's BF16 logits for one sequence, as uint16 bit patterns, into `out`."""
    if handle.status != BufferStatus.DONE:
        return int(ErrorCode.INVALID_ARGUMENT)
    logits = handle.logits.get(seq_id)
    if logits is None or out.shape != logits.shape or out.dtype != np.uint16:
        return int(ErrorCode.INVALID_ARGUMENT)
    out[:] = logits.view(np.uint16)
    return int(ErrorCode.SUCCESS)


def calrt_infer_blocking(
    device: VirtualDevice,
    submodel: SubModel,
    kv: KvManager,
    tokens: Mapping[int, Sequence[int]],
    timeout_ms: float,
    out: Mapping[int, np.ndarray],
) -> int:
    """Submit, wait up to `timeout_ms`, and copy each sequence's logits into `out[seq_id]`."""
    handles: list[OutputBuffer] = []
    code = calrt_infer_nonblocking(device, submodel, kv, tokens, handles)
    if code != ErrorCode.SUCCESS:
        return code
    code = calrt_wait(handles[0], timeout_ms)
    for seq_id, target in out.items():
        if code == ErrorCode.SUCCESS:
            code = calrt_get_output(handles[0], seq_id, target)
    return code
