"""The device's features a package declares: two models, residency, sampling, op placement, the shape
profile, two boards; and the runtime's own: fixed tasks, full debug, the trace, the identity."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from npu_sim.client import run_call, run_request
from npu_sim.device import DeviceConfigError, DeviceIdentity, DeviceStatus, VirtualDevice, load_device_config
from npu_sim.device.identity import DEVICE_CONFIG_ENV
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.sampling import SamplingParams
from tests.npu_sim.packages import replace_text


def error_code(action) -> ErrorCode:
    with pytest.raises(CalrtError) as raised:
        action()
    return raised.value.code


def configured(path: Path, device: VirtualDevice | None = None):
    device = device or VirtualDevice()
    calbin = device.create_calbin(path)
    handle = device.configure(calbin)
    return device, calbin, handle, device.create_kv_manager(calbin)


def golden_request(device, calbin, kv, steps=3):
    g = calbin.goldens
    return run_request(device, calbin, kv, 1, g.prompt_ids.tolist(), steps, g.decode_input_ids[:steps].tolist())


def test_a_second_model_needs_packages_that_declare_it(package):
    device, _, _, _ = configured(package())
    other = device.create_calbin(package())
    assert error_code(lambda: device.configure(other)) == ErrorCode.ALREADY_CONFIGURED


def test_two_single_chiplet_models_on_one_chiplet_and_one_per_chiplet(package):
    features = ("single_chiplet", "multi_model")
    for affinity, placement in ((0, [0, 0]), (1, [0, 1])):
        device = VirtualDevice()
        a = device.create_calbin(package(*features))
        b = device.create_calbin(package(*features, chip_affinity=affinity, seed=1))
        ha, hb = device.configure(a), device.configure(b)
        assert [ha.chiplets[0], hb.chiplets[0]] == placement
        expected = [sum(c.reservations.get(i, (0, 0))[0] for c in (a, b)) for i in (0, 1)]
        assert [c.reserved_bytes for c in device.chiplets] == expected
        assert golden_request(device, a, device.create_kv_manager(a)).ok
        assert golden_request(device, b, device.create_kv_manager(b)).ok


def test_a_core_exception_in_one_model_leaves_the_other_bit_identical(package):
    features = ("single_chiplet", "multi_model")
    device = VirtualDevice()
    a, b = device.create_calbin(package(*features)), device.create_calbin(package(*features, chip_affinity=1, seed=1))
    device.configure(a)
    device.configure(b)
    kv_a, kv_b = device.create_kv_manager(a), device.create_kv_manager(b)
    alone = configured(package(*features, chip_affinity=1, seed=1))
    clean = golden_request(alone[0], alone[1], alone[3])
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0))
    assert golden_request(device, a, kv_a).code == ErrorCode.CORE_EXCEPTION
    during = golden_request(device, b, kv_b)
    assert np.array_equal(during.logits_rows().view(np.uint16), clean.logits_rows().view(np.uint16))
    assert device.status == DeviceStatus.FAULT and golden_request(device, a, kv_a).code == ErrorCode.DEVICE_NEEDS_RESET
    device.reset_core(*device.faulted_core)
    assert golden_request(device, a, kv_a).ok


def test_models_on_different_chiplets_run_side_by_side_in_device_time(package):
    features = ("single_chiplet", "multi_model")
    device = VirtualDevice()
    a, b = device.create_calbin(package(*features)), device.create_calbin(package(*features, chip_affinity=1, seed=1))
    device.configure(a)
    device.configure(b)
    kv_a, kv_b = device.create_kv_manager(a), device.create_kv_manager(b)
    kv_a.allocate(1, 3)
    kv_b.allocate(1, 3)
    first = device.infer(a.model_of_type("llm_prefill"), kv_a, {1: [1, 2, 3]})
    second = device.infer(b.model_of_type("llm_prefill"), kv_b, {1: [1, 2, 3]})
    assert first.record.start_ms == second.record.start_ms == 0  # separate queues, separate chiplets


def test_residency_loads_while_the_other_serves(package):
    features = ("single_chiplet", "multi_model", "residency")
    device, a, _, kv_a = configured(package(*features))
    b = device.create_calbin(package(*features, chip_affinity=1, seed=1))
    handle = device.load(b, quota_bytes=None)
    assert handle.ready_ms > device.clock_ms
    assert golden_request(device, a, kv_a).ok and device.call_log[0].start_ms < handle.ready_ms
    kv_b = device.create_kv_manager(b)
    kv_b.allocate(1, 3)
    buffer = device.infer(b.model_of_type("llm_prefill"), kv_b, {1: [1, 2, 3]})
    assert buffer.record.start_ms >= handle.ready_ms
    assert error_code(lambda: device.unload(handle)) == ErrorCode.BUSY
    buffer.wait(1e9)
    kv_b.free(1)
    device.unload(handle)
    assert golden_request(device, b, kv_b).code == ErrorCode.NOT_CONFIGURED
    device.load(b, quota_bytes=8)
    assert golden_request(device, b, kv_b).code == ErrorCode.OUT_OF_MEMORY
    plain = device.create_calbin(package())
    assert error_code(lambda: VirtualDevice().load(plain)) == ErrorCode.INVALID_ARGUMENT  # no residency


def test_device_sampling_returns_token_ids(package):
    device, calbin, _, kv = configured(package("sampling"))
    params = SamplingParams(0.8, 40, 0.95, 5)
    result = run_request(device, calbin, kv, 1, [1, 2, 3], 4, sampling=params)
    assert result.ok and len(result.sampled) == 5
    assert all(r.sampled and r.d2h_bytes == 4 for r in device.call_log)
    again = configured(package("sampling"))
    assert run_request(again[0], again[1], again[3], 1, [1, 2, 3], 4, sampling=params).sampled == result.sampled
    kv.allocate(1, 3)
    buffer = device.infer(calbin.model_of_type("llm_prefill"), kv, {1: [1, 2, 3]}, sampling=params)
    buffer.wait(1e9)
    assert error_code(lambda: buffer.logits) == ErrorCode.INVALID_ARGUMENT
    plain = configured(package())
    assert run_request(plain[0], plain[1], plain[3], 1, [1, 2], 0, sampling=params).code == ErrorCode.INVALID_ARGUMENT


def test_the_golden_of_a_sampling_package_is_reproduced(package):
    device, calbin, _, kv = configured(package("sampling"))
    g = calbin.goldens
    result = run_request(
        device, calbin, kv, 1, g.prompt_ids.tolist(), g.decode_steps, g.decode_input_ids.tolist(), g.sampled.params
    )
    assert result.sampled == g.sampled.token_ids.tolist()


def test_placement_follows_the_package_and_shows_undeclared_fallbacks(package, tmp_path):
    device, calbin, _, kv = configured(package(cpu_fallback=("rope",)))
    golden_request(device, calbin, kv)
    placement = dict(device.call_log[0].placement)
    assert placement["rope"] == "cpu" and placement["lm_head"] == "npu"
    assert device.call_log[0].time.fallback_ms > 0
    copy = Path(shutil.copytree(package(), tmp_path / "odd-op"))
    for sub in ("prefill", "decode"):
        replace_text(copy, f"{sub}/submodel_memory_reserved_info.txt", "op.rope: npu", "op.rope: npu\nop.cumsum: npu")
    device, calbin, _, kv = configured(copy)
    golden_request(device, calbin, kv)
    assert dict(device.call_log[0].placement)["cumsum"] == "cpu"  # the chip has no such op


def test_a_static_prefill_profile_pads_and_refuses(package):
    device, calbin, handle, kv = configured(package(prefill_lengths=(16, 64)))
    kv.allocate(1, 20)
    run_call(device, kv, calbin.model_of_type("llm_prefill"), {1: list(range(20))}, 1e9)
    assert device.call_log[-1].time.total_ms == pytest.approx(handle.timing.prefill_call(64).total_ms)
    kv.allocate(2, 65)
    assert (
        error_code(lambda: device.infer(calbin.model_of_type("llm_prefill"), kv, {2: list(range(65))}))
        == ErrorCode.SHAPE_MISMATCH
    )


def test_a_prefill_batch_runs_several_sequences_in_one_call(package):
    device, calbin, _, kv = configured(package(prefill_batch=2))
    prompts = {1: [1, 2, 3], 2: [4, 5, 6, 7, 8]}
    for seq_id, prompt in prompts.items():
        kv.allocate(seq_id, len(prompt))
    together = run_call(device, kv, calbin.model_of_type("llm_prefill"), prompts, 1e9).logits
    for seq_id, prompt in prompts.items():
        kv.free(seq_id)
        kv.allocate(seq_id, len(prompt))
        alone = run_call(device, kv, calbin.model_of_type("llm_prefill"), {seq_id: prompt}, 1e9).logits
        assert np.array_equal(together[seq_id].view(np.uint16), alone[seq_id].view(np.uint16))


def test_two_boards_need_a_runtime_that_declares_them(package):
    assert error_code(lambda: VirtualDevice(physical_devices=2)) == ErrorCode.MULTI_DEVICE_UNSUPPORTED
    boards = package("multi_board")
    one_board = VirtualDevice()
    calbin = one_board.create_calbin(boards)
    assert error_code(lambda: one_board.configure(calbin)) == ErrorCode.MULTI_DEVICE_UNSUPPORTED
    device = VirtualDevice(calrt_version="0.9.0", calrt_features=["multi_board"], physical_devices=2)
    device, calbin, handle, kv = configured(boards, device)
    assert handle.chiplets == (0, 1, 2, 3)
    assert golden_request(device, calbin, kv).ok
    assert all(r.board_link_bytes > 0 for r in device.call_log)


def test_fixed_task_holds_one_buffer(package):
    device, calbin, handle, kv = configured(package())
    kv.allocate(1, 3)
    run_call(device, kv, calbin.model_of_type("llm_prefill"), {1: [1, 2, 3]}, 1e9)
    task = device.create_fixed_task(calbin.model_of_type("llm_decode"), kv, [1])
    held = device.chiplets[0].dynamic_bytes
    for token in (4, 5):
        kv.allocate(1, 1)
        buffer = task.submit({1: [token]})
        assert device.chiplets[0].dynamic_bytes == held
        assert error_code(lambda token=token: task.submit({1: [token]})) == ErrorCode.BUSY
        buffer.wait(1e9)
        kv.apply(1)
    task.release()
    assert device.chiplets[0].dynamic_bytes == 0


def test_full_debug_dumps_every_layer(package):
    device, calbin, _, kv = configured(package())
    device.set_full_debug(True)
    golden_request(device, calbin, kv, steps=1)
    dumps = [device.debug_dumps[r.call] for r in device.call_log]
    assert [len(d) for d in dumps] == [calbin.config.layers] * 2
    assert dumps[0][0].shape == (len(calbin.goldens.prompt_ids), calbin.config.hidden)
    assert device.dtype_bit_size("bf16") == 16


def test_the_trace_is_chrome_trace_event_json(package):
    device, calbin, _, kv = configured(package())
    golden_request(device, calbin, kv)
    trace = json.loads(json.dumps(device.trace()))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all({"name", "pid", "tid", "ts", "dur"} <= set(e) for e in complete)
    assert {e["pid"] for e in complete} == {0, 1, 2}  # host, chiplet 0, chiplet 1
    assert sum(e["name"].startswith("H2D") for e in complete) == len(device.call_log)


def test_the_identity_is_the_devices_own(tmp_path, monkeypatch):
    assert load_device_config() == DeviceIdentity()
    config = tmp_path / "device.json"
    config.write_text(json.dumps({"calrt": "0.9.1", "serial": "BOARD-7", "calrt_features": ["multi_board"]}))
    assert load_device_config(config) == DeviceIdentity(
        calrt="0.9.1", serial="BOARD-7", calrt_features=("multi_board",)
    )
    monkeypatch.setenv(DEVICE_CONFIG_ENV, str(config))
    assert load_device_config().serial == "BOARD-7"
    for bad, message in (
        ({"calrt": "0.7.6", "calrt_features": ["multi_board"]}, "drives one physical device"),
        ({"calrt": "seven"}, "calrt"),
        ({"colour": "red"}, "unknown field"),
        ({"calrt_features": "multi_board"}, "list of strings"),
    ):
        config.write_text(json.dumps(bad))
        with pytest.raises(DeviceConfigError, match=message):
            load_device_config(config)
    report = VirtualDevice(serial="X").report()
    assert report["kind"] == "simulator" and report["identity"] == "npu_sim virtual device X"
