import numpy as np
import pytest

from npu_sim.client import recover, run_request
from npu_sim.device import BufferStatus, DeviceStatus, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import EXPECTED_CODES, Fault, FaultKind
from npu_sim.golden import compare


def golden_request(device, calbin, kv, steps=4):
    g = calbin.goldens
    return run_request(device, calbin, kv, 1, g.prompt_ids.tolist(), steps, g.decode_input_ids[:steps].tolist())


def matches_goldens(calbin, result) -> bool:
    rows, g = result.logits_rows(), calbin.goldens
    prefill_ok = compare(g.prefill_logits, rows[:1])["passed"]
    return prefill_ok and compare(g.decode_logits[: len(rows) - 1], rows[1:])["passed"]


@pytest.mark.parametrize("kind", list(FaultKind), ids=str)
def test_each_fault_gives_its_code_and_service_recovers(loaded, kind: FaultKind):
    device, calbin, kv = loaded
    device.inject(Fault(kind, at_step=2))
    failed = golden_request(device, calbin, kv)
    device.disarm_faults()
    assert failed.code == EXPECTED_CODES[kind]
    if kind == FaultKind.CORRUPTED_OUTPUT:
        assert failed.ok and not matches_goldens(calbin, failed)
    else:
        assert len(failed.decode_logits) == 1  # the prefill and one decode step ran before the fault
    recover(device, calbin, failed.code)
    after = golden_request(device, calbin, kv)
    assert after.ok and matches_goldens(calbin, after)
    assert device.status == DeviceStatus.READY
    assert kv.used_tokens == 0
    assert device.chiplets[0].dynamic_bytes == 0


def test_core_exception_fires_at_step_k_only(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=5))
    result = golden_request(device, calbin, kv, steps=8)
    assert result.code == ErrorCode.CORE_EXCEPTION
    assert len(result.decode_logits) == 4  # calls 0 (prefill) to 4 succeeded


def test_a_core_exception_blocks_the_device_until_its_core_is_reset(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.CORE_EXCEPTION, chiplet=1, core=1))
    assert golden_request(device, calbin, kv).code == ErrorCode.CORE_EXCEPTION
    assert device.status == DeviceStatus.FAULT
    assert golden_request(device, calbin, kv).code == ErrorCode.DEVICE_NEEDS_RESET
    device.reset_core(0, 1)
    assert device.status == DeviceStatus.FAULT
    device.reset_core(1, 1)
    assert device.status == DeviceStatus.READY
    assert golden_request(device, calbin, kv).ok


def test_a_hung_job_times_out_until_a_reset_aborts_it(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.TIMEOUT))
    kv.allocate(1, 3)
    buffer = device.infer(calbin.get_model_by_name("prefill"), kv, {1: [1, 2, 3]})
    assert buffer.wait(1_000.0) == ErrorCode.TIMEOUT
    assert buffer.wait(1_000_000.0) == ErrorCode.TIMEOUT
    assert buffer.status == BufferStatus.RUNNING
    device.reset_core(0, 0)
    assert buffer.status == BufferStatus.CORE_EXCEPTION
    assert buffer.wait(1.0) == ErrorCode.JOB_ABORTED
    # The aborted job's tokens are still allocated: the same job can be submitted again.
    retry = device.infer(calbin.get_model_by_name("prefill"), kv, {1: [1, 2, 3]})
    assert retry.wait(1_000.0) == ErrorCode.SUCCESS


def test_a_slow_device_that_finishes_within_the_wait_only_takes_longer(loaded):
    device, calbin, kv = loaded
    assert golden_request(device, calbin, kv, steps=1).ok
    device.inject(Fault(FaultKind.SLOW_DEVICE, at_step=1, slow_factor=3.0))
    assert golden_request(device, calbin, kv, steps=1).ok
    prefill, decode, slow_prefill, slow_decode = (r.time.total_ms for r in device.call_log)
    assert slow_prefill == pytest.approx(prefill)
    assert slow_decode == pytest.approx(3 * decode)


def test_busy_is_retried_without_a_reset(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.BUSY, count=2))
    kv.allocate(1, 3)
    attempts = []
    for _ in range(3):
        try:
            buffer = device.infer(calbin.get_model_by_name("prefill"), kv, {1: [1, 2, 3]})
        except CalrtError as error:
            attempts.append(error.code)
        else:
            attempts.append(buffer.wait(1_000.0))
    assert attempts == [ErrorCode.BUSY, ErrorCode.BUSY, ErrorCode.SUCCESS]


def test_memory_exhaustion_lasts_until_dynamic_memory_is_cleared(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.MEMORY_EXHAUSTION))
    assert golden_request(device, calbin, kv).code == ErrorCode.OUT_OF_MEMORY
    assert golden_request(device, calbin, kv).code == ErrorCode.OUT_OF_MEMORY
    assert recover(device, calbin, ErrorCode.OUT_OF_MEMORY) == ["clear dynamic memory"]
    assert golden_request(device, calbin, kv).ok


def test_a_crash_needs_a_device_reset_and_a_new_configure(loaded):
    device, calbin, kv = loaded
    kv.allocate(7, 2)
    device.inject(Fault(FaultKind.DEVICE_CRASH))
    assert golden_request(device, calbin, kv).code == ErrorCode.DEVICE_CRASHED
    assert device.status == DeviceStatus.CRASHED
    for action in (lambda: device.configure(calbin), lambda: device.reset_core(0, 0)):
        with pytest.raises(CalrtError) as raised:
            action()
        assert raised.value.code == ErrorCode.DEVICE_CRASHED
    device.reset_device()
    assert kv.sequences() == []  # device memory, KV included, is gone
    assert golden_request(device, calbin, kv).code == ErrorCode.NOT_CONFIGURED
    device.configure(calbin)
    assert golden_request(device, calbin, kv).ok


def test_kv_apply_failure_returns_an_error_instead_of_spinning_or_aborting(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.KV_APPLY_FAILURE, at_step=0))
    kv.allocate(1, 3)
    buffer = device.infer(calbin.get_model_by_name("prefill"), kv, {1: [1, 2, 3]})
    assert buffer.wait(1_000.0) == ErrorCode.SUCCESS
    with pytest.raises(CalrtError) as raised:
        kv.apply(1)
    assert raised.value.code == ErrorCode.KV_APPLY_FAILED
    assert (kv.length(1), kv.pending(1)) == (0, 0)


def test_corruption_flips_exponent_bits_of_the_output(loaded):
    device, calbin, kv = loaded
    device.inject(Fault(FaultKind.CORRUPTED_OUTPUT, at_step=0, flipped_bits=3))
    kv.allocate(1, 3)
    corrupted = device.infer(calbin.get_model_by_name("prefill"), kv, {1: [1, 2, 3]})
    corrupted.wait(1_000.0)
    kv.free(1)
    kv.allocate(1, 3)
    clean = device.infer(calbin.get_model_by_name("prefill"), kv, {1: [1, 2, 3]})
    clean.wait(1_000.0)
    differs = corrupted.logits[1].view(np.uint16) ^ clean.logits[1].view(np.uint16)
    assert sorted(set(differs.tolist())) == [0, 1 << 14]
    assert np.count_nonzero(differs) == 3


def test_faults_can_be_part_of_the_device_configuration(built_calbin):
    device = VirtualDevice(faults=[Fault(FaultKind.BUSY, at_step=1)])
    calbin = device.create_calbin(built_calbin)
    device.configure(calbin)
    kv = device.create_kv_manager(calbin)
    assert golden_request(device, calbin, kv).code == ErrorCode.BUSY
    assert golden_request(device, calbin, kv).ok
