from pathlib import Path

import numpy as np
import pytest

from npu_sim.client import run_request
from npu_sim.device import BufferStatus, DeviceStatus, VirtualDevice
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.golden import compare
from tests.npu_sim.packages import resum


def error_code(action) -> ErrorCode:
    with pytest.raises(CalrtError) as raised:
        action()
    return raised.value.code


def prefill(device, calbin, kv, seq_id, tokens=(1, 2, 3)):
    kv.allocate(seq_id, len(tokens))
    return device.infer(calbin.get_model_by_name("prefill"), kv, {seq_id: list(tokens)})


def test_one_device_two_chiplets_two_cores_each():
    device = VirtualDevice()
    assert device.version() == "0.7.6"
    assert device.status == DeviceStatus.READY
    assert [(c.index, c.cores) for c in device.chiplets] == [(0, 2), (1, 2)]
    assert error_code(lambda: VirtualDevice(physical_devices=2)) == ErrorCode.MULTI_DEVICE_UNSUPPORTED


def test_configure_reserves_what_the_calbin_needs(built_calbin: Path):
    device = VirtualDevice()
    calbin = device.create_calbin(built_calbin)
    needed = [calbin.reservations[c][0] for c in (0, 1)]
    device.configure(calbin)
    assert [c.reserved_bytes for c in device.chiplets] == needed
    assert [c.sram_reserved_bytes for c in device.chiplets] == [calbin.reservations[c][1] for c in (0, 1)]
    assert error_code(lambda: device.configure(calbin)) == ErrorCode.ALREADY_CONFIGURED
    device.reset_configuration()
    assert [c.reserved_bytes for c in device.chiplets] == [0, 0]
    small = VirtualDevice(dram_bytes_per_chiplet=max(needed) - 1)
    assert error_code(lambda: small.configure(small.create_calbin(built_calbin))) == ErrorCode.OUT_OF_MEMORY


def test_sub_models_are_found_by_exact_name_only(loaded):
    _, calbin, _ = loaded
    assert calbin.get_model_by_name("decode").smodel_type == "llm_decode"
    assert calbin.get_model_by_name("prefill").smodel_type == "llm_prefill"
    for near_miss in ("dec", "Decode", "decode ", "prefill_decode", "ode"):
        assert error_code(lambda name=near_miss: calbin.get_model_by_name(name)) == ErrorCode.MODEL_NOT_FOUND


def test_batch_and_max_seq_len_come_from_the_calbin(loaded):
    _, calbin, kv = loaded
    assert calbin.get_model_by_name("decode").batch == 8
    assert calbin.get_model_by_name("prefill").batch == 1
    assert (kv.lanes, kv.max_seq_len) == (8, 256)


def test_infer_is_asynchronous_pending_running_done(loaded):
    device, calbin, kv = loaded
    device.enable_parallel_mode(2)
    first, second = prefill(device, calbin, kv, 1), prefill(device, calbin, kv, 2)
    assert (first.status, second.status) == (BufferStatus.RUNNING, BufferStatus.PENDING)
    assert device.counters()["queue_depth"] == 2
    assert error_code(lambda: second.logits) == ErrorCode.INVALID_ARGUMENT
    assert first.wait(1.0) == ErrorCode.TIMEOUT
    assert first.wait(10_000.0) == ErrorCode.SUCCESS
    assert (first.status, second.status) == (BufferStatus.DONE, BufferStatus.RUNNING)
    assert second.wait(10_000.0) == ErrorCode.SUCCESS
    assert second.status == BufferStatus.DONE
    assert second.logits[2].shape == (calbin.config.vocab,)
    assert device.chiplets[0].dynamic_bytes == 0


def test_parallel_mode_limits_jobs_in_flight(loaded):
    device, calbin, kv = loaded
    prefill(device, calbin, kv, 1)
    assert error_code(lambda: prefill(device, calbin, kv, 2)) == ErrorCode.QUEUE_FULL
    device.enable_parallel_mode(3)
    prefill(device, calbin, kv, 3)
    prefill(device, calbin, kv, 4)
    assert device.in_flight() == 3
    assert error_code(lambda: prefill(device, calbin, kv, 5)) == ErrorCode.QUEUE_FULL
    assert error_code(lambda: device.enable_parallel_mode(0)) == ErrorCode.INVALID_ARGUMENT
    assert device.counters()["max_queue_depth"] == 3


def test_calls_are_checked_against_the_sub_model(loaded):
    device, calbin, kv = loaded
    decode, pre = calbin.get_model_by_name("decode"), calbin.get_model_by_name("prefill")
    for seq in range(1, 9):
        kv.allocate(seq, 1)
    nine_lanes = {seq: [1] for seq in range(1, 10)}
    assert error_code(lambda: device.infer(decode, kv, nine_lanes)) == ErrorCode.SHAPE_MISMATCH
    assert error_code(lambda: device.infer(pre, kv, {1: [1], 2: [1]})) == ErrorCode.SHAPE_MISMATCH
    assert error_code(lambda: device.infer(pre, kv, {1: list(range(257))})) == ErrorCode.SHAPE_MISMATCH
    assert error_code(lambda: device.infer(decode, kv, {42: [1]})) == ErrorCode.KV_SEQUENCE_UNKNOWN
    assert device.call_log == []


def test_counters_record_each_call(loaded):
    device, calbin, kv = loaded
    g = calbin.goldens
    result = run_request(device, calbin, kv, 1, g.prompt_ids.tolist(), 3)
    assert result.ok
    log = device.call_log
    assert [r.submodel for r in log] == ["prefill", "decode", "decode", "decode"]
    assert all(r.time.h2d_ms > 0 and r.time.infer_ms > 0 and r.time.d2h_ms > 0 for r in log)
    assert log[0].h2d_bytes == 4 * len(g.prompt_ids) and log[1].d2h_bytes == 2 * calbin.config.vocab
    assert all(r.d2d_bytes > 0 for r in log)
    counters = device.counters()
    assert counters["calls"] == 4
    assert counters["infer_ms"] == pytest.approx(sum(r.time.infer_ms for r in log))
    assert counters["clock_ms"] == pytest.approx(sum(r.time.total_ms for r in log))


def test_the_two_chiplet_device_reproduces_the_goldens(loaded):
    device, calbin, kv = loaded
    g = calbin.goldens
    result = run_request(device, calbin, kv, 1, g.prompt_ids.tolist(), 16, g.decode_input_ids.tolist())
    assert result.ok
    assert compare(g.decode_logits, np.stack(result.decode_logits))["passed"]
    assert compare(g.prefill_logits, result.prefill_logits[None, :])["passed"]
    assert kv.used_tokens == 0


def test_a_short_parameter_block_is_refused_even_with_a_matching_digest(calbin_copy: Path):
    block = calbin_copy / "param_blk1.bin"
    block.write_bytes(block.read_bytes()[:-4])
    resum(calbin_copy)
    assert error_code(lambda: VirtualDevice().create_calbin(calbin_copy)) == ErrorCode.CALBIN_INVALID


def test_replicated_tensors_must_be_identical_in_every_block(calbin_copy: Path):
    """The router is on both chiplets; two different copies are refused at load."""
    table = (calbin_copy / "param_table.txt").read_text().splitlines()
    offset = next(int(line.split()[2]) for line in table if line.startswith("1 layers.0.router "))
    block = bytearray((calbin_copy / "param_blk1.bin").read_bytes())
    block[offset : offset + 4] = np.float32(123.0).tobytes()
    (calbin_copy / "param_blk1.bin").write_bytes(bytes(block))
    resum(calbin_copy)
    with pytest.raises(CalrtError, match="layers.0.router: the copies in different blocks differ"):
        VirtualDevice().create_calbin(calbin_copy)


def test_a_cancelled_job_gives_back_its_cells_and_memory_and_lets_the_next_run(loaded):
    device, calbin, kv = loaded
    device.enable_parallel_mode(2)
    first, second = prefill(device, calbin, kv, 1), prefill(device, calbin, kv, 2)
    queued_start, duration = second.job.start_ms, second.job.end_ms - second.job.start_ms
    device.cancel(first)
    assert second.job.start_ms == device.clock_ms < queued_start  # it moved up to the freed chiplets
    assert first.status == BufferStatus.CANCELLED
    assert first.wait(1.0) == ErrorCode.JOB_ABORTED
    assert error_code(lambda: first.logits) == ErrorCode.INVALID_ARGUMENT
    assert 1 not in kv.sequences()  # its allocated cells rolled back
    assert second.wait(10_000.0) == ErrorCode.SUCCESS
    assert second.job.end_ms - second.job.start_ms == duration
    assert device.chiplets[0].dynamic_bytes == 0
    assert error_code(lambda: device.cancel(second)) == ErrorCode.INVALID_ARGUMENT  # finished: its results stand


def test_a_drain_waits_for_every_job_and_times_out_on_a_hung_one(loaded):
    from npu_sim.faults import Fault, FaultKind

    device, calbin, kv = loaded
    device.enable_parallel_mode(2)
    first, second = prefill(device, calbin, kv, 1), prefill(device, calbin, kv, 2)
    assert device.drain(10_000.0) == ErrorCode.SUCCESS
    assert (first.status, second.status) == (BufferStatus.DONE, BufferStatus.DONE)
    assert device.in_flight() == 0
    device.inject(Fault(FaultKind.TIMEOUT, at_step=0))
    hung = prefill(device, calbin, kv, 3)
    assert device.drain(50.0) == ErrorCode.TIMEOUT
    assert device.in_flight() == 1
    device.cancel(hung)
    assert device.in_flight() == 0 and device.status == DeviceStatus.READY
