"""Every code of the table is either produced by the simulator (a trigger below) or marked reserved."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from npu_sim.calbin.package import MANIFEST
from npu_sim.client import run_request
from npu_sim.device import VirtualDevice
from npu_sim.errors import ERROR_TABLE, CalrtError, ErrorCode, describe
from npu_sim.faults import Fault, FaultKind


def test_the_table_has_thirty_codes_numbered_0_to_29():
    assert sorted(int(code) for code in ERROR_TABLE) == list(range(30))
    assert all(info.description and info.category and info.recovery for info in ERROR_TABLE.values())
    assert describe(18) == {
        "code": 18,
        "name": "TIMEOUT",
        "category": "timeout",
        "description": ERROR_TABLE[ErrorCode.TIMEOUT].description,
        "recovery": ERROR_TABLE[ErrorCode.TIMEOUT].recovery,
        "reserved": False,
    }


def test_the_table_covers_the_categories_the_seed_lists():
    categories = {info.category for info in ERROR_TABLE.values()}
    assert {"version", "configuration", "timeout", "busy", "crash", "shape", "kv", "memory"} <= categories


def code_of(action: Callable[[], object]) -> ErrorCode:
    """The code an action fails with: raised as CalrtError, or returned (wait, run_request)."""
    try:
        outcome = action()
    except CalrtError as error:
        return error.code
    if isinstance(outcome, ErrorCode):
        return outcome
    code = getattr(outcome, "code", None)
    assert isinstance(code, ErrorCode), f"no code from {outcome!r}"
    return code


def fresh(path: Path, **device_options):
    device = VirtualDevice(**device_options)
    calbin = device.create_calbin(path)
    device.configure(calbin)
    return device, calbin, device.create_kv_manager(calbin)


def golden_request(device, calbin, kv, steps=3):
    g = calbin.goldens
    return run_request(device, calbin, kv, 1, g["prompt_ids"].tolist(), steps, g["decode_input_ids"][:steps].tolist())


def submit(device, calbin, kv, seq_id=1, tokens=(1, 2, 3)):
    kv.allocate(seq_id, len(tokens))
    return device.infer(calbin.get_model_by_name("prefill"), kv, {seq_id: list(tokens)})


def decode(device, calbin, kv, tokens):
    kv.allocate(1, 1)
    return device.infer(calbin.get_model_by_name("decode"), kv, {1: tokens})


def load_edited(path: Path, tmp: Path, edit: Callable[[Path], None]) -> ErrorCode:
    copy = Path(shutil.copytree(path, tmp / "edited"))
    edit(copy)
    return code_of(lambda: VirtualDevice().create_calbin(copy))


def without_schema_version(path: Path) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    del manifest["schema_version"]
    (path / MANIFEST).write_text(json.dumps(manifest))


def flip_a_weight_byte(path: Path) -> None:
    weight = path / "weights" / "final_norm.npy"
    data = bytearray(weight.read_bytes())
    data[-1] ^= 0xFF
    weight.write_bytes(bytes(data))


def on_a_device(**device_options):
    return lambda path, tmp: code_of(lambda: VirtualDevice(**device_options).create_calbin(path))


def success(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: golden_request(*fresh(path)))


def not_configured(path: Path, tmp: Path) -> ErrorCode:
    device = VirtualDevice()
    calbin = device.create_calbin(path)
    return code_of(lambda: submit(device, calbin, device.create_kv_manager(calbin)))


def already_configured(path: Path, tmp: Path) -> ErrorCode:
    device, calbin, _ = fresh(path)
    return code_of(lambda: device.configure(calbin))


def model_not_found(path: Path, tmp: Path) -> ErrorCode:
    # "dec" is a substring of "decode": the lookup is by exact name (R07).
    return code_of(lambda: fresh(path)[1].get_model_by_name("dec"))


def token_out_of_vocabulary(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: submit(*fresh(path), tokens=(1, 99999)))


def two_tokens_in_one_decode_lane(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: decode(*fresh(path), [1, 2]))


def float_token(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: decode(*fresh(path), [1.5]))


def too_little_dram(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: fresh(path, dram_bytes_per_chiplet=1024))


def kv_past_capacity(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: fresh(path)[2].allocate(1, 10_000))


def kv_unknown_sequence(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: fresh(path)[2].free(42))


def kv_shift_too_far(path: Path, tmp: Path) -> ErrorCode:
    kv = fresh(path)[2]
    kv.allocate(1, 4)
    kv.apply(1)
    return code_of(lambda: kv.shift(1, 5))


def wait_without_time(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: submit(*fresh(path)).wait(0.0))


def second_job_in_flight(path: Path, tmp: Path) -> ErrorCode:
    device, calbin, kv = fresh(path)
    submit(device, calbin, kv, 1)
    return code_of(lambda: submit(device, calbin, kv, 2))


def with_fault(kind: FaultKind, action: Callable) -> Callable[[Path, Path], ErrorCode]:
    def trigger(path: Path, tmp: Path) -> ErrorCode:
        device, calbin, kv = fresh(path)
        device.inject(Fault(kind))
        return code_of(lambda: action(device, calbin, kv))

    return trigger


def infer_after_core_exception(path: Path, tmp: Path) -> ErrorCode:
    device, calbin, kv = fresh(path)
    device.inject(Fault(FaultKind.CORE_EXCEPTION))
    golden_request(device, calbin, kv)
    return code_of(lambda: submit(device, calbin, kv))


def wait_on_a_job_a_reset_aborted(path: Path, tmp: Path) -> ErrorCode:
    device, calbin, kv = fresh(path)
    device.inject(Fault(FaultKind.TIMEOUT))
    buffer = submit(device, calbin, kv)
    device.reset_core(1, 0)
    return code_of(lambda: buffer.wait(1000.0))


def two_physical_devices(path: Path, tmp: Path) -> ErrorCode:
    return code_of(lambda: VirtualDevice(physical_devices=2))


# Each reachable code and a way to reach it from a built calbin and a scratch directory.
TRIGGERS: dict[ErrorCode, Callable[[Path, Path], ErrorCode]] = {
    ErrorCode.SUCCESS: success,
    ErrorCode.CALRT_VERSION_INCOMPATIBLE: on_a_device(calrt_version="0.8.0"),
    ErrorCode.DRIVER_VERSION_INCOMPATIBLE: on_a_device(driver_version="3.0"),
    ErrorCode.FIRMWARE_VERSION_INCOMPATIBLE: on_a_device(firmware_version="2.0"),
    ErrorCode.CHIP_INCOMPATIBLE: on_a_device(chip="calculet-4c"),
    ErrorCode.CALBIN_INVALID: lambda path, tmp: load_edited(path, tmp, without_schema_version),
    ErrorCode.CALBIN_DIGEST_MISMATCH: lambda path, tmp: load_edited(path, tmp, flip_a_weight_byte),
    ErrorCode.NOT_CONFIGURED: not_configured,
    ErrorCode.ALREADY_CONFIGURED: already_configured,
    ErrorCode.MODEL_NOT_FOUND: model_not_found,
    ErrorCode.INVALID_ARGUMENT: token_out_of_vocabulary,
    ErrorCode.SHAPE_MISMATCH: two_tokens_in_one_decode_lane,
    ErrorCode.DTYPE_MISMATCH: float_token,
    ErrorCode.OUT_OF_MEMORY: too_little_dram,
    ErrorCode.KV_NO_CAPACITY: kv_past_capacity,
    ErrorCode.KV_APPLY_FAILED: with_fault(FaultKind.KV_APPLY_FAILURE, golden_request),
    ErrorCode.KV_SEQUENCE_UNKNOWN: kv_unknown_sequence,
    ErrorCode.KV_SHIFT_INVALID: kv_shift_too_far,
    ErrorCode.TIMEOUT: wait_without_time,
    ErrorCode.BUSY: with_fault(FaultKind.BUSY, submit),
    ErrorCode.QUEUE_FULL: second_job_in_flight,
    ErrorCode.CORE_EXCEPTION: with_fault(FaultKind.CORE_EXCEPTION, golden_request),
    ErrorCode.DEVICE_NEEDS_RESET: infer_after_core_exception,
    ErrorCode.DEVICE_CRASHED: with_fault(FaultKind.DEVICE_CRASH, submit),
    ErrorCode.JOB_ABORTED: wait_on_a_job_a_reset_aborted,
    ErrorCode.MULTI_DEVICE_UNSUPPORTED: two_physical_devices,
}


def test_every_code_is_reachable_or_reserved():
    for code, info in ERROR_TABLE.items():
        assert info.reserved == (code not in TRIGGERS), code.name
    assert {code.name for code, info in ERROR_TABLE.items() if info.reserved} == {
        "DMA_ERROR",
        "THERMAL_THROTTLE",
        "FIRMWARE_FAULT",
        "INTERNAL",
    }


@pytest.mark.parametrize("code", list(TRIGGERS), ids=lambda code: code.name)
def test_the_trigger_produces_its_code(code: ErrorCode, built_calbin: Path, tmp_path: Path):
    assert TRIGGERS[code](built_calbin, tmp_path) == code


def test_token_ids_must_be_integers_in_the_vocabulary(built_calbin: Path):
    device, calbin, kv = fresh(built_calbin)
    kv.allocate(1, 2)
    prefill = calbin.get_model_by_name("prefill")
    assert code_of(lambda: device.infer(prefill, kv, {1: np.array([1.0, 2.0])})) == ErrorCode.DTYPE_MISMATCH
    assert code_of(lambda: device.infer(prefill, kv, {1: [-1, 2]})) == ErrorCode.INVALID_ARGUMENT
    assert code_of(lambda: device.infer(prefill, kv, {1: [1, 2, 3]})) == ErrorCode.INVALID_ARGUMENT


def test_docs_list_every_code_with_its_category():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    for code, info in ERROR_TABLE.items():
        row = f"| {int(code)} | `{code.name}` | {info.category} |"
        assert row in doc, row
        assert (f"{row} reserved |" in doc) == info.reserved, row
