"""The probe catalogue, every probe at every stage on a package that declares what it needs, and the ways
each one fails."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import npu_sim.probes.sampling as sampling_probe
from npu_sim.calbin.goldens import read_golden, write_golden
from npu_sim.calbin.layout import GOLDEN, MODEL_MEMORY
from npu_sim.calbin.package import open_package
from npu_sim.device import DeviceIdentity
from npu_sim.errors import ErrorCode
from npu_sim.probes import catalogue
from npu_sim.probes.faults import TRIGGERS
from npu_sim.probes.observability import trace_problems
from npu_sim.probes.spec import CHAIN_STAGES
from npu_sim.runner import run_job
from npu_sim.sampling import SamplingParams, device_sample
from tests.npu_sim.packages import replace_text, set_line

REQUESTED = [
    "health", "decode_batch", "prefill_shapes", "golden", "sampling", "s8", "single_chiplet", "multi_model",
    "residency", "tensor_parallel", "expert_parallel", "pipeline_parallel", "multi_board", "kv_manager",
    "kv_seq_min_max", "kv_shift", "parallel_mode", "output_buffer", "fixed_task", "c_api_nonblocking",
    "counters_trace", "cpu_fallback", "error_codes", "error_mapping", "device_reset", "full_debug",
    "golden_readback", "fault_recovery", "models_per_chiplet", "job_cancel", "reset_drain",
]  # fmt: skip
TWO_BOARDS = DeviceIdentity(calrt="0.9.0", calrt_features=("multi_board",))
STAGE_PARAMS = {
    "runner": {},
    "golden": {},
    "failure": {},
    "integration": {"sequences": 4, "max_new_tokens": 4},
    "soak": {"requests": 4, "concurrency": 2, "prompt_tokens": 8, "output_tokens": 6},
    "health": {},
}
# What each probe's package declares (besides decode batch 4), and a second package where it needs one.
SETUP = {
    "sampling": {"features": ("sampling",)},
    "s8": {"features": ("s8",)},
    "single_chiplet": {"features": ("single_chiplet",)},
    "multi_model": {"features": ("single_chiplet", "multi_model"), "second": {"chip_affinity": 1, "seed": 1}},
    "models_per_chiplet": {
        "features": ("single_chiplet", "multi_model"),
        "second": {"chip_affinity": 1, "seed": 1},
    },
    "residency": {
        "features": ("single_chiplet", "multi_model", "residency"),
        "second": {"chip_affinity": 1, "seed": 1},
    },
    "expert_parallel": {"features": ("ep",)},
    "pipeline_parallel": {"features": ("pp",)},
    "multi_board": {"features": ("multi_board",), "device": TWO_BOARDS},
    "cpu_fallback": {"options": {"cpu_fallback": ("rope",)}},
    "decode_batch": {"params": {"batch": 4}},
}


def run_probe(package, name: str, stage: str, params: dict | None = None, workdir: Path | None = None) -> dict:
    setup = SETUP.get(name, {})
    features = setup.get("features", ())
    main = package(*features, **setup.get("options", {}))
    packages = {}
    if "second" in setup:
        packages["second"] = str(package(*features, **setup["second"]))
    probe = {"name": name, "params": params if params is not None else setup.get("params", {})}
    job = {
        "schema_version": 2,
        "stage": stage,
        "calbin": str(main),
        "packages": packages,
        "probes": [probe],
        "params": STAGE_PARAMS[stage],
    }
    return run_job(job, device=setup.get("device"), workdir=workdir)["probes"][0]


def failures(probe: dict) -> list:
    return [(c["name"], c["detail"]) for c in probe["checks"] if not c["passed"]] + probe["findings"]


def test_the_catalogue_lists_every_probe_with_what_it_needs():
    listed = catalogue()
    names = [p["name"] for p in listed["probes"]]
    assert sorted(names) == sorted(REQUESTED) and len(names) == len(set(names))
    for probe in listed["probes"]:
        assert set(probe) == {
            "name",
            "description",
            "capabilities",
            "features",
            "params",
            "metrics",
            "thresholds",
            "stages",
        }
        assert set(CHAIN_STAGES) <= set(probe["stages"]) and all(probe["stages"].values())
        for param in probe["params"] + probe["thresholds"]:
            assert {"name", "type", "default", "meaning"} <= set(param)
        assert all(t["stricter"] in ("higher", "lower") for t in probe["thresholds"])
    sampling = next(p for p in listed["probes"] if p["name"] == "sampling")
    assert sampling["features"] == ["sampling"] and sampling["capabilities"] == ["npu-sampling"]
    assert {
        "name": "top_k",
        "type": "integer",
        "default": 40,
        "meaning": "tokens kept before the softmax",
        "minimum": 1,
    } in sampling["params"]
    json.dumps(listed)


@pytest.mark.parametrize("name", REQUESTED)
def test_every_probe_passes_every_stage_on_a_package_that_has_what_it_needs(package, name: str, tmp_path: Path):
    for stage in (*CHAIN_STAGES, "health"):
        probe = run_probe(package, name, stage, workdir=tmp_path)
        assert probe["verdict"] == "pass", (stage, failures(probe))


def test_decode_batch_is_not_exercised_by_another_batch(package):
    probe = run_probe(package, "decode_batch", "runner", {"batch": 8})
    assert probe["findings"] == [
        {"code": "not_exercised", "message": "the package's decode batch is 4; the probe asks for 8"}
    ]


def test_a_wrong_sampler_fails_the_distribution_test(package, monkeypatch):
    def one_token_too_many(kernel, logits, params: SamplingParams, uniforms):
        return device_sample(logits, SamplingParams(params.temperature, params.top_k + 1, 1.0, params.seed), uniforms)

    monkeypatch.setattr(sampling_probe, "package_sample", one_token_too_many)
    probe = run_probe(package, "sampling", "golden")
    assert probe["verdict"] == "fail"
    assert "within_support" in [name for name, *_ in failures(probe)]


def test_a_golden_without_sampled_tokens_fails_the_sampling_probe(package, tmp_path):
    """A feature is proven by what it computes: a golden with nothing sampled cannot show the sampling is right."""
    main = package("sampling")
    with open_package(main) as opened:
        delivered = read_golden(opened.read(GOLDEN), "vendor")
    assert delivered.sampled is not None  # the package's own golden has them
    unsampled = tmp_path / "unsampled.npz"
    unsampled.write_bytes(write_golden(replace(delivered, sampled=None)))
    job = {
        "schema_version": 2,
        "stage": "golden",
        "calbin": str(main),
        "golden": str(unsampled),
        "golden_source": "vendor",
        "probes": [{"name": "sampling", "params": {}}],
        "params": {},
    }
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    assert ("sampled_golden", f"the golden ({unsampled}) holds no sampled tokens to compare") in failures(probe)


def test_a_batch_16_package_reserving_memory_for_8_lanes_fails_naming_the_numbers(package, tmp_path):
    """Batch 16 is not a word in a text file: the reservations must hold 16 lanes' KV beside the parameters."""
    eight = package(decode_batch=8)
    sixteen = Path(shutil.copytree(package(decode_batch=16), tmp_path / "b16"))
    for line in (eight / MODEL_MEMORY).read_text().splitlines():
        if ".dram_reserved" in line:
            key, value = line.split(":", 1)
            set_line(sixteen, MODEL_MEMORY, key, value.strip())
    job = {
        "schema_version": 2,
        "stage": "runner",
        "calbin": str(sixteen),
        "probes": [{"name": "decode_batch", "params": {"batch": 16}}],
        "params": {},
    }
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    short = dict(failures_by_check(probe))["kv_capacity"]
    assert short.startswith("chip0.dram_reserved ") and "B of KV for 16 lanes at" in short
    honest = {**job, "calbin": str(package(decode_batch=16))}
    assert run_job(honest)["probes"][0]["verdict"] == "pass"


def failures_by_check(probe: dict) -> list[tuple[str, str]]:
    return [(c["name"], c["detail"]) for c in probe["checks"] if not c["passed"]]


def test_s8_asks_for_what_the_cache_quantises(package):
    probe = run_probe(package, "s8", "runner", {"kv": "kv"})
    assert probe["findings"][0]["message"] == "the package quantises V; the probe asks for K and V"
    metrics = run_probe(package, "s8", "golden")["metrics"]
    assert metrics["vs_float"]["max_abs"] > 0


def test_two_models_need_the_second_package(package):
    job = {
        "schema_version": 2,
        "stage": "runner",
        "calbin": str(package("single_chiplet", "multi_model")),
        "probes": [{"name": "multi_model"}],
    }
    probe = run_job(job)["probes"][0]
    assert probe["findings"][0]["message"] == "the job names no packages.second; the probe needs a second package"
    job["packages"] = {"second": str(package("single_chiplet"))}
    assert run_job(job)["probes"][0]["findings"][0]["message"] == "packages.second does not declare multi_model"


def test_two_boards_are_refused_by_calrt_0_7_6(package):
    job = {
        "schema_version": 2,
        "stage": "golden",
        "calbin": str(package("multi_board")),
        "probes": [{"name": "multi_board"}],
    }
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    assert [(c["name"], c["passed"]) for c in probe["checks"]] == [("refused_as_documented", True)]
    assert "MULTI_DEVICE_UNSUPPORTED (25)" in probe["checks"][0]["detail"]
    assert probe["findings"] == [
        {"code": "not_exercised", "message": "the device's CalRT 0.7.6 drives one physical device (I09)"}
    ]


def test_parallel_mode_soak_splits_the_jobs_load_between_its_threads(package):
    probe = run_probe(package, "parallel_mode", "soak")
    threads = probe["metrics"]["serving_threads"]
    assert [t["concurrency"] for t in threads.values()] == [1, 1]  # the job's concurrency 2, split
    assert sum(t["completed"] for t in threads.values()) == STAGE_PARAMS["soak"]["requests"]


@pytest.mark.parametrize("stage", CHAIN_STAGES)
def test_kv_shift_needs_a_second_lane_for_v26_s_whole_table(package, stage):
    job = {
        "schema_version": 2,
        "stage": stage,
        "calbin": str(package(decode_batch=1)),
        "probes": [{"name": "kv_shift"}],
    }
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    assert probe["findings"] == [
        {
            "code": "not_exercised",
            "message": "copy, keep and state need a second lane and the package's decode batch is 1; "
            "V26's table asks for all six",
        }
    ]
    assert probe["checks"] == []


def test_kv_shift_checks_the_state_read_back(package, monkeypatch):
    """A state read that restores the positions but not the keys decodes otherwise: the check names it."""
    from npu_sim.kv import KvManager

    real = KvManager.state_read

    def forgetful(self, seq_id, state):
        count = real(self, seq_id, state)
        for layer in range(self.config.layers):
            lane = self.lane(seq_id)
            cells = np.arange(count)
            self.cache.k.put(layer, lane, cells, np.zeros_like(self.cache.k.cells(layer, lane, cells)))
        return count

    monkeypatch.setattr(KvManager, "state_read", forgetful)
    probe = run_probe(package, "kv_shift", "runner")
    assert probe["verdict"] == "fail"
    assert [name for name, _ in failures(probe)] == ["state"]


def test_two_models_on_the_same_chiplet_do_not_exercise_v31(package):
    features = ("single_chiplet", "multi_model")
    job = {
        "schema_version": 2,
        "stage": "runner",
        "calbin": str(package(*features)),
        "packages": {"second": str(package(*features, seed=1))},
        "probes": [{"name": "models_per_chiplet"}],
    }
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    assert probe["findings"] == [
        {"code": "not_exercised", "message": "both packages run on chiplet [0]; V31 asks for one model per chiplet"}
    ]


def test_one_package_does_not_exercise_v31(package):
    job = {
        "schema_version": 2,
        "stage": "runner",
        "calbin": str(package("single_chiplet", "multi_model")),
        "probes": [{"name": "models_per_chiplet"}],
    }
    probe = run_job(job)["probes"][0]
    assert probe["findings"][0]["code"] == "not_exercised"
    assert "packages.second" in probe["findings"][0]["message"]


def test_a_fault_that_reaches_the_other_chiplet_fails_v31_s_isolation(package, monkeypatch):
    """A runtime whose core reset aborts every model's jobs, not only its chiplet's: the isolation check names it."""
    from npu_sim.device import VirtualDevice

    def reset_everything(self, chiplet, core):
        with self.lock:
            self._abort(lambda job: True)
            for handle in self.models.values():
                handle.fault = None

    monkeypatch.setattr(VirtualDevice, "reset_core", reset_everything)
    probe = run_probe(package, "models_per_chiplet", "failure")
    assert probe["verdict"] == "fail"
    assert [name for name, _ in failures(probe)] == ["reset_isolated"]


def test_a_cancel_that_keeps_the_kv_cells_fails_v23(package, monkeypatch):
    """Cancel declared but its KV not rolled back: the cells stay taken and the checks say which."""
    from npu_sim.kv import KvManager

    monkeypatch.setattr(KvManager, "roll_back", lambda self, seq_id, cells: None)
    probe = run_probe(package, "job_cancel", "runner")
    assert probe["verdict"] == "fail"
    assert [name for name, _ in failures(probe)] == ["cancel_pending", "cancel_running", "timeout_then_cancel"]


def test_a_cancel_that_does_not_stop_the_job_fails_v23(package, monkeypatch):
    """A cancel that only marks the buffer: the job still holds its chiplets and its memory."""
    from npu_sim.device import VirtualDevice

    def mark_only(self, buffer):
        buffer.job.cancelled = True

    monkeypatch.setattr(VirtualDevice, "cancel", mark_only)
    probe = run_probe(package, "job_cancel", "runner")
    assert probe["verdict"] == "fail"
    assert "cancel_running" in [name for name, _ in failures(probe)]


def test_a_drain_that_does_not_wait_loses_the_jobs_in_flight(package, monkeypatch):
    """V51: a drain that returns at once leaves the jobs in flight, and the reset after it aborts them."""
    from npu_sim.device import VirtualDevice

    monkeypatch.setattr(VirtualDevice, "drain", lambda self, timeout_ms: ErrorCode.SUCCESS)
    probe = run_probe(package, "reset_drain", "runner")
    assert probe["verdict"] == "fail"
    assert [name for name, _ in failures(probe)] == ["drain_then_reset"]


def test_a_package_without_a_cpu_fallback_does_not_exercise_v11(package):
    job = {"schema_version": 2, "stage": "runner", "calbin": str(package()), "probes": [{"name": "cpu_fallback"}]}
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    assert probe["findings"] == [
        {
            "code": "not_exercised",
            "message": "the package places no op on the CPU; V11 asks for a package with a CPU-fallback op",
        }
    ]


def test_an_undeclared_cpu_fallback_fails(package, tmp_path):
    odd = Path(shutil.copytree(package(cpu_fallback=("rope",)), tmp_path / "odd"))
    for sub in ("prefill", "decode"):
        replace_text(odd, f"{sub}/submodel_memory_reserved_info.txt", "op.rope: cpu", "op.rope: cpu\nop.cumsum: npu")
    job = {"schema_version": 2, "stage": "runner", "calbin": str(odd), "probes": [{"name": "cpu_fallback"}]}
    probe = run_job(job)["probes"][0]
    assert probe["verdict"] == "fail"
    assert "not declared: ['cumsum']" in dict(failures(probe))["placement_as_declared"]
    declared = run_probe(package, "cpu_fallback", "soak")
    assert declared["metrics"]["observed_fallbacks"] == ["rope"] and declared["metrics"]["fallback_ms"] > 0


def test_an_error_code_reached_wrongly_fails(package, monkeypatch):
    patched = dict(TRIGGERS) | {ErrorCode.BUSY: lambda path, scratch: ErrorCode.SUCCESS}
    monkeypatch.setattr("npu_sim.probes.faults.TRIGGERS", patched)
    probe = run_probe(package, "error_codes", "runner")
    assert dict(failures(probe))["every_code_reached"] == "BUSY gave SUCCESS"


def test_trace_problems_are_named():
    assert trace_problems({"events": []}) == ["the document is not an object with a traceEvents list"]
    bad = {"traceEvents": [{"name": "x", "ph": "X", "pid": 0, "tid": 0, "ts": 0}, {"ph": "X"}]}
    assert trace_problems(bad) == ["complete event 0 (x) has no duration", "event 1 lacks ['name', 'pid', 'tid', 'ts']"]


def test_slices_that_overlap_without_nesting_are_named():
    def complete(name, ts, dur, tid=0):
        return {"name": name, "ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    nested = [complete("call", 0, 10), complete("op", 0, 4), complete("op", 4, 6), complete("next", 10, 5)]
    assert trace_problems({"traceEvents": nested}) == []
    overlapping = [complete("a", 0, 10.001), complete("b", 10, 5), complete("other track", 5, 20, tid=1)]
    assert trace_problems({"traceEvents": overlapping}) == [
        "complete event 1 (b) overlaps the one before it on its track"
    ]


def test_counters_trace_writes_a_trace_file(package, tmp_path):
    run_probe(package, "counters_trace", "runner", workdir=tmp_path)
    trace = json.loads((tmp_path / "counters_trace-trace.json").read_text())
    assert trace_problems(trace) == [] and trace["otherData"]["clock"] == "modelled device time"


def test_the_probes_share_no_state_across_sessions(package):
    """Each stage plan runs on fresh devices: a fault armed in one probe does not reach the next."""
    job = {
        "schema_version": 2,
        "stage": "failure",
        "calbin": str(package()),
        "probes": [{"name": "fault_recovery"}, {"name": "health"}],
    }
    assert [p["verdict"] for p in run_job(job)["probes"]] == ["pass", "pass"]
    assert np.isfinite(run_job(job)["metrics"]["wall_time_s"])
