"""A probe's own checks judged by calculet from what the runner observed (issue 20.1): the simulator's runner on a
real package, its observations left as they are (the right run passes) or changed under a passing verdict (it
fails naming the check), or not written (nothing measured)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from django.utils.translation import override

from acceptance import probe_judging
from calculet import sentences
from npu_sim.calbin.build import build_calbin
from npu_sim.errors import ErrorCode
from npu_sim.probes import PROBES
from npu_sim.runner import run_job

KV_SHIFT = [{"name": "kv_shift", "params": {}}]
STAGE_PARAMS = {
    "runner": {},
    "golden": {},
    "failure": {},
    "integration": {"sequences": 4, "max_new_tokens": 4},
    "soak": {"requests": 4, "concurrency": 2, "prompt_tokens": 8, "output_tokens": 6},
}
JUDGED = [(probe, stage) for probe, judge in probe_judging.PROBE_JUDGES.items() for stage in judge.stages]


@pytest.fixture(scope="module")
def two_lanes(tmp_path_factory) -> Path:
    return build_calbin(tmp_path_factory.mktemp("kv_shift") / "b2.tar", decode_batch=2, tar=True)


@pytest.fixture(scope="module")
def runs(two_lanes, tmp_path_factory) -> dict[tuple[str, str], tuple[dict, Path]]:
    """Each stage a judged probe has a plan of its own for, run once by the simulator's runner: its result and
    files, by (probe, stage)."""
    done = {}
    for probe, stage in JUDGED:
        workdir = tmp_path_factory.mktemp(f"{probe}-{stage}")
        job = {
            "schema_version": 2,
            "stage": stage,
            "calbin": str(two_lanes),
            "probes": [{"name": probe, "params": {}}],
            "params": STAGE_PARAMS[stage],
        }
        done[probe, stage] = (run_job(job, workdir=workdir), workdir)
    return done


def judged(stage: str, runs, two_lanes, workdir: Path | None = None, result: dict | None = None, probe="kv_shift"):
    ran, ran_in = runs[probe, stage]
    probes = [{"name": probe, "params": {}}]
    return probe_judging.probe_judgements(
        stage, result or ran, probes, workdir or ran_in, two_lanes, probe_judging.JobGolden()
    )[probe]


def tampered(stage: str, runs, tmp_path: Path, change, probe="kv_shift") -> Path:
    """A copy of the stage's files whose probe observations `change` rewrote (the runner's result unchanged)."""
    _, workdir = runs[probe, stage]
    name = f"{probe}-{stage}-observed.npz"
    with np.load(workdir / name) as npz:
        arrays = {key: npz[key] for key in npz.files}
    change(arrays)
    np.savez(tmp_path / name, **arrays)
    return tmp_path


@pytest.mark.parametrize(("probe", "stage"), JUDGED)
def test_the_right_run_passes_every_check_calculet_recomputes(probe, stage, runs, two_lanes):
    result, _ = runs[probe, stage]
    [entry] = result["probes"]
    assert entry["verdict"] == "pass"
    judgement = judged(stage, runs, two_lanes, probe=probe)
    assert judgement.passed, judgement.reason
    checks = [check["name"] for check in judgement.metrics["checks"]]
    runner_checks = [check["name"] for check in entry["checks"]]
    # calculet recomputes every check of the probe's own plan (the stage's routine after it is the stage's).
    assert checks and set(checks) <= set(runner_checks)
    assert f"{probe}-{stage}-observed.npz" in result["produced_files"]


@pytest.mark.parametrize("probe", list(probe_judging.PROBE_JUDGES))
def test_every_own_check_of_the_runner_plan_is_recomputed(probe, runs, two_lanes):
    result, _ = runs[probe, "runner"]
    assert [c["name"] for c in judged("runner", runs, two_lanes, probe=probe).metrics["checks"]] == [
        c["name"] for c in result["probes"][0]["checks"]
    ]


def replaced(name: str, value):
    def change(arrays):
        arrays[name] = np.array(value)

    return change


def bit_flipped(name: str):
    def change(arrays):
        arrays[name] = arrays[name] ^ np.uint16(1)

    return change


def drifted(name: str, rows: slice):
    """The logits' BF16 bit patterns of `rows` moved far off (each value about three times as large)."""

    def change(arrays):
        arrays[name][rows] = (arrays[name][rows].view(np.int16) + 200).view(np.uint16)

    return change


def changed_at(name: str, index: int, value):
    def change(arrays):
        arrays[name][index] = value

    return change


def levelled(name: str):
    """Every value of the observation the same."""

    def change(arrays):
        arrays[name] = np.full_like(arrays[name], arrays[name][0])

    return change


def both_drifted(*names: str):
    def change(arrays):
        for name in names:
            drifted(name, slice(None))(arrays)

    return change


def last_layer_dropped(name: str):
    def change(arrays):
        arrays[name] = arrays[name][:-1]

    return change


def layer_negated(name: str):
    def change(arrays):
        arrays[name][0] = -arrays[name][0]

    return change


@pytest.mark.parametrize(
    ("probe", "stage", "change", "check"),
    [
        ("kv_manager", "runner", replaced("can_allocate.zero", 1), "can_allocate"),
        ("kv_manager", "runner", replaced("allocate_and_apply.pending", 1), "allocate_and_apply"),
        ("kv_manager", "runner", replaced("capacity_enforced.code", 0), "capacity_enforced"),
        ("kv_manager", "runner", replaced("lanes_enforced.lanes", 1), "lanes_enforced"),
        ("kv_manager", "runner", replaced("free_returns_the_lane.taken", 7), "free_returns_the_lane"),
        ("kv_manager", "runner", replaced("unknown_sequence.code", 0), "unknown_sequence"),
        ("kv_manager", "runner", replaced("clear.used_tokens", 3), "clear"),
        ("kv_manager", "runner", replaced("do_shift.pos_max", 11), "do_shift"),
        ("kv_manager", "golden", bit_flipped("reused_lane_is_clean.after"), "reused_lane_is_clean"),
        ("kv_manager", "golden", replaced("reused_lane_is_clean.other_code", 21), "reused_lane_is_clean"),
        ("kv_manager", "failure", replaced("apply_failure_rolls_back.cells", 5), "apply_failure_rolls_back"),
        ("kv_manager", "failure", replaced("retry_after_rollback.code", 21), "retry_after_rollback"),
        ("kv_manager", "failure", replaced("reset_clears_the_kv.sequences", [1]), "reset_clears_the_kv"),
        ("kv_manager", "soak", replaced("kv_empty_after_load.used_tokens", 6), "kv_empty_after_load"),
        ("kv_seq_min_max", "runner", replaced("unknown_sequence.code", 0), "unknown_sequence"),
        ("kv_seq_min_max", "runner", replaced("nothing_committed.max", 2), "nothing_committed"),
        ("kv_seq_min_max", "runner", replaced("after_prefill.min", 1), "after_prefill"),
        ("kv_seq_min_max", "runner", replaced("after_decode.max", 10), "after_decode"),
        ("kv_seq_min_max", "runner", replaced("after_removing_the_front.min", 0), "after_removing_the_front"),
        ("kv_seq_min_max", "golden", replaced("next_is_max_plus_one.position", 16), "next_is_max_plus_one"),
        ("kv_seq_min_max", "failure", replaced("max_kept_on_failure.max", 6), "max_kept_on_failure"),
        ("kv_seq_min_max", "integration", replaced("interleaved_min_max.max_2", [5, 6, 7, 8]), "interleaved_min_max"),
        ("output_buffer", "runner", replaced("pending_and_running.second", "running"), "pending_and_running"),
        ("output_buffer", "runner", replaced("no_output_before_done.code", 0), "no_output_before_done"),
        ("output_buffer", "runner", replaced("wait_times_out.status", "done"), "wait_times_out"),
        ("output_buffer", "runner", replaced("wait_completes.code", int(ErrorCode.TIMEOUT)), "wait_completes"),
        ("output_buffer", "runner", replaced("negative_wait_refused.code", 0), "negative_wait_refused"),
        ("output_buffer", "runner", replaced("core_exception_state.status", "done"), "core_exception_state"),
        ("output_buffer", "runner", replaced("buffers_given_back.dynamic_bytes", 4096), "buffers_given_back"),
        ("output_buffer", "failure", replaced("hang_times_out.codes", [int(ErrorCode.TIMEOUT), 0]), "hang_times_out"),
        ("output_buffer", "failure", replaced("aborted_by_reset.code", 0), "aborted_by_reset"),
        ("output_buffer", "failure", replaced("resubmitted.code", int(ErrorCode.TIMEOUT)), "resubmitted"),
        ("output_buffer", "soak", replaced("buffers_given_back.dynamic_bytes", 4096), "buffers_given_back"),
        (
            "fixed_task",
            "runner",
            replaced("buffer_held_once.dynamic_bytes", [4096, 8192, 8192, 8192]),
            "buffer_held_once",
        ),
        ("fixed_task", "runner", bit_flipped("same_as_infer.infer"), "same_as_infer"),
        ("fixed_task", "runner", replaced("busy_while_running.code", 0), "busy_while_running"),
        ("fixed_task", "golden", drifted("golden.logits", slice(0, 1)), "golden:prefill_logits"),
        ("fixed_task", "golden", drifted("golden.logits", slice(2, 3)), "golden:decode_logits"),
        ("fixed_task", "failure", replaced("buffer_gone_after_clear.code", 0), "buffer_gone_after_clear"),
        ("fixed_task", "failure", replaced("recreated.code", int(ErrorCode.BUSY)), "recreated"),
        (
            "c_api_nonblocking",
            "runner",
            replaced("nonblocking_returns_at_once.status", "done"),
            "nonblocking_returns_at_once",
        ),
        ("c_api_nonblocking", "runner", replaced("wait_timeout_code.code", 0), "wait_timeout_code"),
        (
            "c_api_nonblocking",
            "runner",
            bit_flipped("blocking_equals_nonblocking.blocking"),
            "blocking_equals_nonblocking",
        ),
        ("c_api_nonblocking", "runner", replaced("errors_are_codes.wrong_shape", 0), "errors_are_codes"),
        ("c_api_nonblocking", "golden", replaced("codes.returned", [0, 0, 0, 0, 0, 0, 0, 0, 18]), "codes"),
        ("c_api_nonblocking", "golden", drifted("golden.logits", slice(-1, None)), "golden:decode_logits"),
        ("c_api_nonblocking", "failure", replaced("faults_as_codes.busy", 0), "faults_as_codes"),
        (
            "c_api_nonblocking",
            "failure",
            replaced("serves_after_recovery.code", int(ErrorCode.BUSY)),
            "serves_after_recovery",
        ),
        ("error_codes", "runner", replaced("thirty_codes.numbers", list(range(29))), "thirty_codes"),
        ("error_codes", "runner", replaced("every_code_reached.codes", [0] * 26), "every_code_reached"),
        ("error_codes", "runner", replaced("the_rest_reserved.reserved", [26, 27]), "the_rest_reserved"),
        ("error_mapping", "runner", replaced("every_code_mapped.codes", list(range(29))), "every_code_mapped"),
        ("error_mapping", "runner", replaced("client_error_rejected.http_status", 503), "client_error_rejected"),
        ("error_mapping", "runner", replaced("client_error_rejected.retries", 2), "client_error_rejected"),
        ("error_mapping", "failure", replaced("busy.statuses", [200, 200, 200, 503]), "busy"),
        ("error_mapping", "failure", replaced("core_exception.retries", 0), "core_exception"),
        (
            "error_mapping",
            "integration",
            replaced("busy_retried_transparently.retries", 0),
            "busy_retried_transparently",
        ),
        (
            "error_mapping",
            "integration",
            replaced("busy_retried_transparently.failed", 1),
            "busy_retried_transparently",
        ),
        (
            "error_mapping",
            "soak",
            replaced("recovered_and_retried_under_load.statuses", [200] * 7 + [503]),
            "recovered_and_retried_under_load",
        ),
        ("device_reset", "runner", replaced("reset_core.code", 0), "reset_core"),
        ("device_reset", "runner", replaced("clear_dynamic_memory.dynamic_bytes", 4096), "clear_dynamic_memory"),
        ("device_reset", "runner", replaced("reset_configuration.sequences", [5]), "reset_configuration"),
        ("device_reset", "runner", replaced("configure_again.code", int(ErrorCode.NOT_CONFIGURED)), "configure_again"),
        ("device_reset", "runner", replaced("reset_device.core_reset", 0), "reset_device"),
        ("device_reset", "runner", replaced("reset_device.status", "crashed"), "reset_device"),
        (
            "device_reset",
            "integration",
            replaced("served_after_a_device_reset.device_resets", 0),
            "served_after_a_device_reset",
        ),
        (
            "device_reset",
            "integration",
            replaced("served_after_a_device_reset.later", 0),
            "served_after_a_device_reset",
        ),
        (
            "device_reset",
            "integration",
            replaced("served_after_a_device_reset.served", 0),
            "served_after_a_device_reset",
        ),
        ("job_cancel", "runner", replaced("cancel_pending.before", "running"), "cancel_pending"),
        ("job_cancel", "runner", replaced("cancel_pending.other_sequences", [1]), "cancel_pending"),
        ("job_cancel", "runner", replaced("cancel_pending.first_code", int(ErrorCode.JOB_ABORTED)), "cancel_pending"),
        ("job_cancel", "runner", replaced("cancel_running.status", "done"), "cancel_running"),
        ("job_cancel", "runner", replaced("cancel_running.sequences", [3]), "cancel_running"),
        ("job_cancel", "runner", replaced("cancel_running.in_flight", 1), "cancel_running"),
        ("job_cancel", "runner", replaced("timeout_then_cancel.dynamic_bytes", 4096), "timeout_then_cancel"),
        (
            "job_cancel",
            "runner",
            replaced("timeout_then_cancel.served_code", int(ErrorCode.NOT_CONFIGURED)),
            "timeout_then_cancel",
        ),
        ("job_cancel", "runner", replaced("finished_not_cancelled.cells", 0), "finished_not_cancelled"),
        ("reset_drain", "runner", replaced("drain_then_reset.in_flight", 1), "drain_then_reset"),
        ("reset_drain", "runner", replaced("drain_then_reset.dynamic_bytes", 4096), "drain_then_reset"),
        ("reset_drain", "runner", replaced("drain_then_reset.kept", [1, 2]), "drain_then_reset"),
        ("reset_drain", "runner", bit_flipped("drain_then_reset.alone"), "drain_then_reset"),
        (
            "reset_drain",
            "runner",
            replaced("reset_without_drain_loses_the_job.code", 0),
            "reset_without_drain_loses_the_job",
        ),
        (
            "reset_drain",
            "failure",
            replaced("drain_times_out_on_a_hung_job.in_flight", 0),
            "drain_times_out_on_a_hung_job",
        ),
        (
            "reset_drain",
            "failure",
            replaced("drain_times_out_on_a_hung_job.served_code", int(ErrorCode.NOT_CONFIGURED)),
            "drain_times_out_on_a_hung_job",
        ),
        ("fault_recovery", "runner", replaced("busy.code", 0), "busy"),
        ("fault_recovery", "runner", replaced("device_crash.status", "crashed"), "device_crash"),
        ("fault_recovery", "runner", replaced("timeout.served_code", int(ErrorCode.TIMEOUT)), "timeout"),
        (
            "fault_recovery",
            "integration",
            replaced("core_exception.last_codes", [0, int(ErrorCode.CORE_EXCEPTION)]),
            "core_exception",
        ),
        ("fault_recovery", "soak", replaced("recovered_every_time.recoveries", 2), "recovered_every_time"),
        ("fault_recovery", "soak", replaced("recovered_every_time.retries", 3), "recovered_every_time"),
        ("parallel_mode", "runner", changed_at("all_jobs_done.codes", 3, int(ErrorCode.JOB_ABORTED)), "all_jobs_done"),
        ("parallel_mode", "runner", changed_at("all_jobs_done.queues", 0, 7), "all_jobs_done"),
        ("parallel_mode", "runner", levelled("per_queue_order.end_ms"), "per_queue_order"),
        ("parallel_mode", "runner", replaced("jobs_in_flight_at_once.max_queue_depth", 1), "jobs_in_flight_at_once"),
        ("parallel_mode", "runner", replaced("overflow_is_queue_full.accepted", 5), "overflow_is_queue_full"),
        ("parallel_mode", "runner", replaced("overflow_is_queue_full.code", 0), "overflow_is_queue_full"),
        ("parallel_mode", "runner", replaced("limit_bounded.code", 0), "limit_bounded"),
        ("parallel_mode", "golden", changed_at("same_as_one_at_a_time.codes", 0, 21), "same_as_one_at_a_time"),
        ("parallel_mode", "golden", bit_flipped("same_as_one_at_a_time.alone"), "same_as_one_at_a_time"),
        (
            "parallel_mode",
            "golden",
            both_drifted("same_as_one_at_a_time.together", "same_as_one_at_a_time.alone"),
            "same_as_one_at_a_time",
        ),
        (
            "parallel_mode",
            "failure",
            replaced("fault_with_jobs_in_flight.codes", [21, 21]),
            "fault_with_jobs_in_flight",
        ),
        ("parallel_mode", "failure", replaced("jobs_run_after_reset.codes", [0, 24]), "jobs_run_after_reset"),
        ("parallel_mode", "integration", replaced("served_in_parallel.max_queue_depth", 1), "served_in_parallel"),
        ("parallel_mode", "soak", replaced("served_in_parallel.max_queue_depth", 9), "served_in_parallel"),
        ("full_debug", "runner", replaced("version.calrt", "0.0.1"), "version"),
        ("full_debug", "runner", replaced("dtype_bit_size.sizes", [16, 32, 8, 16]), "dtype_bit_size"),
        ("full_debug", "runner", replaced("dtype_bit_size.unknown", 0), "dtype_bit_size"),
        ("full_debug", "runner", last_layer_dropped("dump_per_layer.dump"), "dump_per_layer"),
        ("full_debug", "runner", replaced("debug_costs_d2h.with_debug_ms", 0.0), "debug_costs_d2h"),
        ("full_debug", "runner", bit_flipped("output_unchanged.debugged"), "output_unchanged"),
        ("full_debug", "runner", replaced("output_unchanged.debugged_code", 21), "output_unchanged"),
        ("full_debug", "golden", layer_negated("layers_match_reference.dump"), "layers_match_reference"),
        ("full_debug", "failure", replaced("dumped_every_layer.layers", []), "dumped_every_layer"),
        ("full_debug", "integration", changed_at("dumped_every_layer.layers", 0, 1), "dumped_every_layer"),
        ("full_debug", "soak", changed_at("dumped_every_layer.layers", -1, 0), "dumped_every_layer"),
    ],
)
def test_an_observation_that_does_not_support_the_check_fails_it_under_the_runner_s_pass(
    probe, stage, change, check, runs, two_lanes, tmp_path
):
    judgement = judged(stage, runs, two_lanes, tampered(stage, runs, tmp_path, change, probe), probe=probe)
    assert not judgement.passed
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == [check]
    assert [f["code"] for f in judgement.findings] == ["claim_unsupported", "probe_check_failed"]
    assert judgement.findings[1]["message"].startswith(f"{probe}: {check}: ")


def test_a_golden_plan_is_judged_with_the_job_s_tolerances(runs, two_lanes, tmp_path):
    """The last bit of every logit changed: ties break otherwise, beyond the default top-1 and top-5 limits, and
    within a job's that allows them."""
    ran, _ = runs["fixed_task", "golden"]
    workdir = tampered("golden", runs, tmp_path, bit_flipped("golden.logits"), "fixed_task")
    probes = [{"name": "fixed_task", "params": {}}]
    default = probe_judging.probe_judgements("golden", ran, probes, workdir, two_lanes, probe_judging.JobGolden())
    assert [c["name"] for c in default["fixed_task"].metrics["checks"] if not c["passed"]] == ["golden:decode_logits"]
    assert "golden.logits, decode_logits, against the job's golden (package): top1" in default["fixed_task"].reason
    allowing = probe_judging.JobGolden(tolerances={"decode_logits": {"top1_min": 0.9, "topk_min": 0.9}})
    loose = probe_judging.probe_judgements("golden", ran, probes, workdir, two_lanes, allowing)["fixed_task"]
    assert loose.passed, loose.reason


def test_a_fixed_task_and_an_infer_that_agree_on_wrong_logits_fail_against_calculet_s_replay(runs, two_lanes, tmp_path):
    def both_drifted(arrays):
        for name in ("same_as_infer.fixed", "same_as_infer.infer"):
            arrays[name] = (arrays[name].view(np.int16) + 200).view(np.uint16)

    workdir = tampered("runner", runs, tmp_path, both_drifted, "fixed_task")
    judgement = judged("runner", runs, two_lanes, workdir, probe="fixed_task")
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["same_as_infer"]
    assert "same_as_infer.fixed against calculet's replay of the package's golden prompt: " in judgement.reason


def test_a_blocking_and_a_non_blocking_call_that_agree_on_wrong_logits_fail_against_calculet_s_replay(
    runs, two_lanes, tmp_path
):
    def both_drifted(arrays):
        for name in ("blocking_equals_nonblocking.nonblocking", "blocking_equals_nonblocking.blocking"):
            arrays[name] = (arrays[name].view(np.int16) + 200).view(np.uint16)

    workdir = tampered("runner", runs, tmp_path, both_drifted, "c_api_nonblocking")
    judgement = judged("runner", runs, two_lanes, workdir, probe="c_api_nonblocking")
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["blocking_equals_nonblocking"]
    assert "against calculet's replay of the prompt [1, 2, 3]: " in judgement.reason


def test_drained_jobs_that_agree_with_their_runs_alone_on_wrong_logits_fail_against_calculet_s_replay(
    runs, two_lanes, tmp_path
):
    def both_drifted(arrays):
        for name in ("drain_then_reset.drained", "drain_then_reset.alone"):
            arrays[name] = (arrays[name].view(np.int16) + 200).view(np.uint16)

    workdir = tampered("runner", runs, tmp_path, both_drifted, "reset_drain")
    judgement = judged("runner", runs, two_lanes, workdir, probe="reset_drain")
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["drain_then_reset"]
    assert "drain_then_reset.drained against calculet's replay of each drained prompt: " in judgement.reason


def test_a_token_decoded_after_the_removal_that_is_not_the_reference_s_fails(runs, two_lanes, tmp_path):
    def drifted(arrays):
        arrays["continues_from_max.logits"] = (arrays["continues_from_max.logits"].view(np.int16) + 200).view(np.uint16)

    workdir = tampered("golden", runs, tmp_path, drifted, "kv_seq_min_max")
    judgement = judged("golden", runs, two_lanes, workdir, probe="kv_seq_min_max")
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["continues_from_max"]
    assert "continues_from_max.logits against calculet's reference of the first 12 tokens: " in judgement.reason


def wrong_removal(arrays):
    arrays["remove.positions"] = np.array([0, 1, 2, 3, 4, 5, 6])


def test_positions_that_are_not_the_edit_s_fail_the_check_under_the_runner_s_pass(runs, two_lanes, tmp_path):
    workdir = tampered("runner", runs, tmp_path, wrong_removal)
    judgement = judged("runner", runs, two_lanes, workdir)
    assert not judgement.passed
    assert [f["code"] for f in judgement.findings] == ["claim_unsupported", "probe_check_failed"]
    assert judgement.findings[1]["message"] == (
        "kv_shift: remove: remove.positions: [0, 1, 2, 3, 4, 5, 6] (calculet expects [0, 1, 2, 6, 7, 8, 9])"
    )
    assert judgement.reason.startswith("the runner claims a pass its measurements do not support — kv_shift: remove:")
    assert {f["field"] for f in judgement.findings} == {"measurements.probes.kv_shift"}
    failed = [c["name"] for c in judgement.metrics["checks"] if not c["passed"]]
    assert failed == ["remove"]


def test_a_state_read_back_that_decodes_otherwise_fails_state(runs, two_lanes, tmp_path):
    def other_bits(arrays):
        arrays["state.read_logits"] = arrays["state.read_logits"] ^ np.uint16(1)

    judgement = judged("runner", runs, two_lanes, tampered("runner", runs, tmp_path, other_bits))
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["state"]
    assert "state.source_logits and state.read_logits differ in" in judgement.reason


def test_keys_not_rerotated_fail_against_calculet_s_fresh_keys(runs, two_lanes, tmp_path):
    def stale_keys(arrays):
        arrays["div.keys"] = arrays["shift.keys"]  # the keys as they were before seq_div: not re-rotated

    judgement = judged("golden", runs, two_lanes, tampered("golden", runs, tmp_path, stale_keys))
    assert not judgement.passed
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["div:keys_rerotated"]
    assert judgement.findings[0]["code"] == "claim_unsupported"
    assert "of calculet's fresh layer-0 keys at positions" in judgement.findings[1]["message"]


def test_values_changed_by_the_shift_fail(runs, two_lanes, tmp_path):
    def moved_wrong(arrays):
        arrays["shift.values"] = arrays["shift.values"][:, ::-1].copy()

    judgement = judged("golden", runs, two_lanes, tampered("golden", runs, tmp_path, moved_wrong))
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["shift:values_moved_as_they_are"]


def test_an_invalid_edit_refused_with_another_code_fails_naming_it(runs, two_lanes, tmp_path):
    def accepted(arrays):
        arrays["refused:divide by 0.code"] = np.array(int(ErrorCode.SUCCESS))

    judgement = judged("failure", runs, two_lanes, tampered("failure", runs, tmp_path, accepted))
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["refused:divide by 0"]
    assert "refused:divide by 0.code: SUCCESS (0) (calculet expects KV_SHIFT_INVALID" in judgement.reason


def test_logits_that_do_not_follow_calculet_s_replay_through_the_shifts_fail(runs, two_lanes, tmp_path):
    def drifted(arrays):
        rows = arrays["shift.logits"]
        last = rows[-1].view(np.int16)
        rows[-1] = (last + np.int16(200)).view(np.uint16)  # the last row only: no token was chosen from it

    judgement = judged("integration", runs, two_lanes, tampered("integration", runs, tmp_path, drifted))
    assert [c["name"] for c in judgement.metrics["checks"] if not c["passed"]] == ["shifted_like_the_reference"]
    assert "against calculet's replay through the same shifts: " in judgement.reason


def test_a_token_not_chosen_from_its_row_fails(runs, two_lanes, tmp_path):
    def other_token(arrays):
        arrays["shift.tokens"][0] = (arrays["shift.tokens"][0] + 1) % 256

    judgement = judged("integration", runs, two_lanes, tampered("integration", runs, tmp_path, other_token))
    assert "a generated token is not the argmax of the logits it was chosen from" in judgement.reason


def test_without_its_observations_a_passing_probe_is_unsupported(runs, two_lanes, tmp_path):
    judgement = judged("runner", runs, two_lanes, tmp_path)
    assert not judgement.passed
    assert [f["code"] for f in judgement.findings] == ["claim_unsupported", "no_measurement"]
    assert judgement.findings[1]["message"] == (
        "kv_shift: the runner wrote no kv_shift-runner-observed.npz: nothing measured to judge"
    )


def test_an_observation_left_out_is_no_measurement_naming_it(runs, two_lanes, tmp_path):
    def forgotten(arrays):
        del arrays["keep.sequences"]

    judgement = judged("runner", runs, two_lanes, tampered("runner", runs, tmp_path, forgotten))
    assert [f["code"] for f in judgement.findings] == ["claim_unsupported", "no_measurement"]
    assert judgement.findings[1]["message"] == "kv_shift: kv_shift-runner-observed.npz holds no keep.sequences"


def test_a_runner_that_says_fail_is_not_turned_into_a_pass(runs, two_lanes, tmp_path):
    result, _ = runs["kv_shift", "runner"]
    failing = {**result, "probes": [{**result["probes"][0], "verdict": "fail"}]}
    judgement = judged("runner", runs, two_lanes, tampered("runner", runs, tmp_path, wrong_removal), failing)
    assert [f["code"] for f in judgement.findings] == ["probe_check_failed"]


def test_the_files_calculet_reads_name_each_judged_probe_s_observations():
    assert probe_judging.measured_files("golden", KV_SHIFT) == [
        "golden-actual.npz",
        "sampling-draws.npz",
        "kv_shift-golden-observed.npz",
    ]
    # kv_shift's soak is the stage's routine, judged from the stage's files; kv_manager's is its own.
    probes = [*KV_SHIFT, {"name": "kv_manager"}]
    assert probe_judging.measured_files("soak", probes) == [
        "soak-golden-actual.npz",
        "soak-requests.jsonl",
        "kv_manager-soak-observed.npz",
    ]
    # cpu_fallback is not converted: its checks are still the runner's.
    assert probe_judging.measured_files("runner", [{"name": "cpu_fallback"}]) == ["runner-actual.npz"]


def test_a_probe_finding_reads_in_the_readers_language(runs, two_lanes, tmp_path):
    judgement = judged("runner", runs, two_lanes, tampered("runner", runs, tmp_path, wrong_removal))
    failed = judgement.findings[1]
    assert json.loads(json.dumps(failed)) == failed  # as a run's JSON stores it
    with override("zh-hans"):
        assert sentences.text(failed) == (
            "kv_shift：remove：remove.positions：[0, 1, 2, 3, 4, 5, 6]（calculet 期望 [0, 1, 2, 6, 7, 8, 9]）"
        )


def paragraph(doc: str, opening: str) -> str:
    return doc.split(opening, 1)[1].split("\n\n", 1)[0]


def test_the_docs_name_the_probes_judged_and_every_one_not_yet():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "acceptance.md").read_text()
    converted = paragraph(doc, "**A probe's own checks are judged by calculet").split("Converted: ", 1)[1]
    not_yet = paragraph(doc, "Not yet judged by calculet and still read from the runner's result")
    assert set(re.findall(r"`([a-z0-9_]+)`", converted)) & set(PROBES) == set(probe_judging.PROBE_JUDGES)
    assert set(re.findall(r"`([a-z0-9_]+)`", not_yet)) & set(PROBES) == set(PROBES) - set(probe_judging.PROBE_JUDGES)
