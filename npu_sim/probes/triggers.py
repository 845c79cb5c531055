"""A documented way to reach every error code the simulator produces (I15: codes 0-29).

Each trigger takes a package and a scratch directory and returns the code it ended with: raised as
CalrtError, returned by wait, or carried by a request's result. Codes no trigger reaches are the
table's reserved ones.
"""

import hashlib
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from npu_sim.calbin.layout import CHECKSUMS, PACKAGE_INFO
from npu_sim.client import run_request
from npu_sim.device import OutputBuffer, VirtualDevice
from npu_sim.errors import ErrorCode, code_of
from npu_sim.faults import Fault, FaultKind
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin

Trigger = Callable[[Path, Path], ErrorCode]


def editable_copy(path: Path, scratch: Path) -> Path:
    """The package as a directory in `scratch`: copied, or extracted through tarfile's data filter."""
    target = scratch / "edited"
    if target.exists():
        shutil.rmtree(target)
    if path.is_dir():
        shutil.copytree(path, target)
    else:
        with tarfile.open(path) as tar:
            tar.extractall(target, filter="data")
    return target


def write_checksums(root: Path) -> None:
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    (root / CHECKSUMS).write_text(
        "".join(f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    )


def fresh(path: Path, **device_options: Any) -> tuple[VirtualDevice, Calbin, KvManager]:
    device = VirtualDevice(**device_options)
    calbin = device.create_calbin(path)
    device.configure(calbin)
    return device, calbin, device.create_kv_manager(calbin)


def golden_request(device: VirtualDevice, calbin: Calbin, kv: KvManager, steps: int = 3) -> Any:
    g = calbin.goldens
    return run_request(device, calbin, kv, 1, g.prompt_ids.tolist(), steps, g.decode_input_ids[:steps].tolist())


def submit(
    device: VirtualDevice, calbin: Calbin, kv: KvManager, seq_id: int = 1, tokens: tuple[int, ...] = (1, 2, 3)
) -> OutputBuffer:
    kv.allocate(seq_id, len(tokens))
    return device.infer(calbin.model_of_type("llm_prefill"), kv, {seq_id: list(tokens)})


def decode(device: VirtualDevice, calbin: Calbin, kv: KvManager, tokens: list[Any]) -> OutputBuffer:
    kv.allocate(1, 1)
    return device.infer(calbin.model_of_type("llm_decode"), kv, {1: tokens})


def _load_edited(edit: Callable[[Path], None]) -> Trigger:
    def trigger(path: Path, scratch: Path) -> ErrorCode:
        copy = editable_copy(path, scratch)
        edit(copy)
        return code_of(lambda: VirtualDevice().create_calbin(copy))

    return trigger


def _without_schema_version(root: Path) -> None:
    info = root / PACKAGE_INFO
    info.write_text(
        "".join(line for line in info.read_text().splitlines(keepends=True) if not line.startswith("schema_version"))
    )
    write_checksums(root)


def _flip_a_parameter_byte(root: Path) -> None:
    block = root / "param_blk0.bin"
    data = bytearray(block.read_bytes())
    data[-1] ^= 0xFF
    block.write_bytes(bytes(data))


def _on_a_device(**device_options: Any) -> Trigger:
    return lambda path, scratch: code_of(lambda: VirtualDevice(**device_options).create_calbin(path))


def _success(path: Path, scratch: Path) -> ErrorCode:
    return code_of(lambda: golden_request(*fresh(path)))


def _not_configured(path: Path, scratch: Path) -> ErrorCode:
    device = VirtualDevice()
    calbin = device.create_calbin(path)
    return code_of(lambda: submit(device, calbin, device.create_kv_manager(calbin)))


def _already_configured(path: Path, scratch: Path) -> ErrorCode:
    device, calbin, _ = fresh(path)
    return code_of(lambda: device.configure(calbin))


def _model_not_found(path: Path, scratch: Path) -> ErrorCode:
    # "dec" is a substring of "decode": the lookup is by exact name (R07).
    return code_of(lambda: fresh(path)[1].get_model_by_name("dec"))


def _kv_shift_too_far(path: Path, scratch: Path) -> ErrorCode:
    kv = fresh(path)[2]
    kv.allocate(1, 4)
    kv.apply(1)
    return code_of(lambda: kv.shift(1, 5))


def _second_job_in_flight(path: Path, scratch: Path) -> ErrorCode:
    device, calbin, kv = fresh(path)
    submit(device, calbin, kv, 1)
    return code_of(lambda: submit(device, calbin, kv, 2))


def _with_fault(kind: FaultKind, action: Callable[..., object]) -> Trigger:
    def trigger(path: Path, scratch: Path) -> ErrorCode:
        device, calbin, kv = fresh(path)
        device.inject(Fault(kind))
        return code_of(lambda: action(device, calbin, kv))

    return trigger


def _infer_after_core_exception(path: Path, scratch: Path) -> ErrorCode:
    device, calbin, kv = fresh(path)
    device.inject(Fault(FaultKind.CORE_EXCEPTION))
    golden_request(device, calbin, kv)
    return code_of(lambda: submit(device, calbin, kv))


def _wait_on_a_job_a_reset_aborted(path: Path, scratch: Path) -> ErrorCode:
    device, calbin, kv = fresh(path)
    device.inject(Fault(FaultKind.TIMEOUT))
    buffer = submit(device, calbin, kv)
    device.reset_core(1, 0)
    return code_of(lambda: buffer.wait(1000.0))


# Each reachable code and a way to reach it from a package and a scratch directory.
TRIGGERS: dict[ErrorCode, Trigger] = {
    ErrorCode.SUCCESS: _success,
    ErrorCode.CALRT_VERSION_INCOMPATIBLE: _on_a_device(calrt_version="0.8.0"),
    ErrorCode.DRIVER_VERSION_INCOMPATIBLE: _on_a_device(driver_version="3.0"),
    ErrorCode.FIRMWARE_VERSION_INCOMPATIBLE: _on_a_device(firmware_version="2.0"),
    ErrorCode.CHIP_INCOMPATIBLE: _on_a_device(chip="calculet-4c"),
    ErrorCode.CALBIN_INVALID: _load_edited(_without_schema_version),
    ErrorCode.CALBIN_DIGEST_MISMATCH: _load_edited(_flip_a_parameter_byte),
    ErrorCode.NOT_CONFIGURED: _not_configured,
    ErrorCode.ALREADY_CONFIGURED: _already_configured,
    ErrorCode.MODEL_NOT_FOUND: _model_not_found,
    ErrorCode.INVALID_ARGUMENT: lambda path, scratch: code_of(lambda: submit(*fresh(path), tokens=(1, 99999))),
    ErrorCode.SHAPE_MISMATCH: lambda path, scratch: code_of(lambda: decode(*fresh(path), [1, 2])),
    ErrorCode.DTYPE_MISMATCH: lambda path, scratch: code_of(lambda: decode(*fresh(path), [1.5])),
    ErrorCode.OUT_OF_MEMORY: lambda path, scratch: code_of(lambda: fresh(path, dram_bytes_per_chiplet=1024)),
    ErrorCode.KV_NO_CAPACITY: lambda path, scratch: code_of(lambda: fresh(path)[2].allocate(1, 10_000)),
    ErrorCode.KV_APPLY_FAILED: _with_fault(FaultKind.KV_APPLY_FAILURE, golden_request),
    ErrorCode.KV_SEQUENCE_UNKNOWN: lambda path, scratch: code_of(lambda: fresh(path)[2].free(42)),
    ErrorCode.KV_SHIFT_INVALID: _kv_shift_too_far,
    ErrorCode.TIMEOUT: lambda path, scratch: code_of(lambda: submit(*fresh(path)).wait(0.0)),
    ErrorCode.BUSY: _with_fault(FaultKind.BUSY, submit),
    ErrorCode.QUEUE_FULL: _second_job_in_flight,
    ErrorCode.CORE_EXCEPTION: _with_fault(FaultKind.CORE_EXCEPTION, golden_request),
    ErrorCode.DEVICE_NEEDS_RESET: _infer_after_core_exception,
    ErrorCode.DEVICE_CRASHED: _with_fault(FaultKind.DEVICE_CRASH, submit),
    ErrorCode.JOB_ABORTED: _wait_on_a_job_a_reset_aborted,
    ErrorCode.MULTI_DEVICE_UNSUPPORTED: lambda path, scratch: code_of(lambda: VirtualDevice(physical_devices=2)),
}
