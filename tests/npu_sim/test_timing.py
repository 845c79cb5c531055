import dataclasses

import pytest

from npu_sim.device import VirtualDevice
from npu_sim.model import PRESETS
from npu_sim.timing import (
    ANCHORS,
    PackageTiming,
    TimingModel,
    calibration_rows,
    capacity_rows,
    context_rows,
    fit_calibration,
)

GIB = 2**30


def test_decode_speed_is_within_10_percent_of_the_seed_anchors():
    model = TimingModel()
    assert model.decode_tokens_per_s(512) == pytest.approx(61, rel=0.10)  # P04: 58-64 at short context
    assert model.decode_tokens_per_s(33_000) == pytest.approx(12, rel=0.10)  # P05: about 12 near 33K


def test_decode_speed_near_40k_is_inside_the_seed_band():
    predicted = TimingModel().decode_tokens_per_s(40_960)
    assert 10 * 0.9 <= predicted <= 16 * 1.1  # P05: 10-16 near 40K


def test_calibration_rows_report_the_error_at_each_anchor():
    rows = calibration_rows()
    assert [row["context"] for row in rows] == [anchor.context for anchor in ANCHORS]
    assert all(row["within_seed_range"] for row in rows)
    for row in rows:
        expected = (row["predicted_tokens_per_s"] - row["anchor_tokens_per_s"]) / row["anchor_tokens_per_s"] * 100
        assert row["error_pct"] == pytest.approx(expected, abs=0.1)


def test_a_different_model_gives_a_different_calibration_error():
    slower = TimingModel(dram_gb_s_per_chiplet=40.0)
    assert not calibration_rows(slower)[0]["within_seed_range"]


def test_decode_slows_with_context_and_batching_raises_throughput():
    model = TimingModel()
    speeds = [model.decode_tokens_per_s(context) for context in (512, 4096, 16384, 40960)]
    assert speeds == sorted(speeds, reverse=True)
    # More lanes touch more experts, so the step gets slower while the total rate still rises.
    assert model.experts_touched(1) == pytest.approx(8)
    assert model.experts_touched(8) > 40
    assert model.decode_tokens_per_s(512, 8) > 1.5 * model.decode_tokens_per_s(512, 1)
    assert model.decode_ms_per_token(512, 8) > model.decode_ms_per_token(512, 1)


def test_prefill_grows_with_tokens_and_includes_transfers():
    model = TimingModel()
    assert model.prefill_ms(16) < model.prefill_ms(512) < model.prefill_ms(4096)
    call = model.prefill_call(512)
    assert call.total_ms == pytest.approx(call.h2d_ms + call.infer_ms + call.d2h_ms)
    assert call.d2h_ms > model.pcie_latency_us / 1000  # the 303872-byte logits (A11)


def test_context_rows_hold_what_the_cli_prints():
    rows = context_rows(TimingModel(), [512, 33_000, 40_960], batch=1)
    assert [r["context"] for r in rows] == [512, 33_000, 40_960]
    for row in rows:
        assert row["decode_tokens_per_s"] == pytest.approx(1000 / row["decode_ms_per_token"], rel=1e-3)
        assert row["prefill_ms"] > 0
    assert rows[-1]["kv_cache_bytes"] == 4_026_531_840


def test_kv_capacity_at_40960_and_what_larger_batches_deliver():
    rows = {row["batch"]: row for row in capacity_rows()}
    assert rows[1]["kv_bytes_at_max_seq"] / GIB == 3.75
    assert rows[1]["kv_gib_per_chiplet_at_max_seq"] == 1.875
    assert rows[1]["fits_at_max_seq"]
    assert [rows[b]["fits_at_max_seq"] for b in (4, 8, 16)] == [False, False, False]
    lengths = [rows[b]["max_context_per_lane"] for b in (1, 4, 8, 16)]
    assert lengths == sorted(lengths, reverse=True)
    assert rows[16]["decode_tokens_per_s"] > rows[1]["decode_tokens_per_s"]


def test_the_defaults_are_the_fit_and_the_fit_leaves_p05_at_40k_out():
    fit = fit_calibration()
    assert fit.dram_gb_s_per_chiplet == pytest.approx(TimingModel().dram_gb_s_per_chiplet, rel=1e-3)
    assert fit.attention_efficiency == pytest.approx(TimingModel().attention_efficiency, rel=1e-3)
    assert set(fit.residuals_tokens_per_s) == {"P04 short context", "P05 ~33K"}
    assert all(abs(r) < 1e-6 for r in fit.residuals_tokens_per_s.values())
    moved = tuple(dataclasses.replace(a, nominal=a.nominal * 2) if not a.fitted else a for a in ANCHORS)
    assert fit_calibration(moved) == fit  # the held-out figure does not move the fit
    held_out = [row for row in calibration_rows() if row["use"] == "held out"]
    assert [row["context"] for row in held_out] == [40_960] and held_out[0]["within_seed_range"]


def calbin_timing(package, *features, **options) -> PackageTiming:
    return VirtualDevice().create_calbin(package(*features, **options)).timing


def test_timing_comes_from_the_package(package):
    plain = calbin_timing(package).model
    assert plain == TimingModel()  # a float tp package stands for the current calbin at full scale
    contexts = [512] * 8
    s8 = calbin_timing(package, "s8").model
    assert s8.weight_bytes_per_param == 1.0 and s8.v_bytes == 1
    assert s8.decode_call([512]).total_ms != plain.decode_call([512]).total_ms
    assert s8.decode_call([33_000]).total_ms < plain.decode_call([33_000]).total_ms  # half the V bytes to read
    sampled = plain.decode_call(contexts, sampling=True)
    assert sampled.d2h_ms < plain.decode_call(contexts).d2h_ms and sampled.sampling_ms > 0
    ep, tp = calbin_timing(package, "ep").model, plain
    assert ep.decode_call([512]).total_ms != tp.decode_call([512]).total_ms  # all-to-all instead of all-reduce
    assert ep._link_ms(1, 1) != tp._link_ms(1, 1)
    boards = calbin_timing(package, "multi_board").model
    assert boards.decode_call([512]).total_ms > tp.decode_call([512]).total_ms  # the board link
    assert plain.decode_call([512] * 16).total_ms > plain.decode_call([512] * 8).total_ms


def test_a_package_the_model_cannot_run_gets_no_prediction(package):
    fits = calbin_timing(package, "single_chiplet")
    assert fits.predicted and fits.scale == "tiny"
    too_big = calbin_timing(package, "single_chiplet", timing_preset="full")
    assert not too_big.predicted and "no prediction at full scale" in too_big.note
    assert too_big.model.config == PRESETS["tiny"]  # the clock runs at the package's own size
