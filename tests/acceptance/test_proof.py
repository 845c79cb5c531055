"""The wrong proofs issue 11 found, each run for real (the simulator's own packages, built with the features
they declare, through the runner in the sandbox) and each blocked with its reason."""

import dataclasses
import io
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain, PromotionAttempt, Run, Target
from acceptance.services import (
    answer_submit,
    capability_promote,
    chain_start_for_answer,
    run_rerun,
    runs_sweep,
    target_register,
)
from acceptance.services.runs.running import run_dir_prefix
from acceptance.services.targets import target_heartbeat, target_set_maintenance
from calculet.actors import SYSTEM
from calculet.errors import DomainError
from calculet.models import AuditEntry
from evidence.models import Capability, EvidenceItem
from npu_sim.calbin.goldens import read_golden, write_golden
from npu_sim.calbin.layout import GOLDEN, SUBMODEL_MEMORY
from npu_sim.calbin.package import open_package
from tests.acceptance.workers import BOARD_DOUBLE
from tests.factories import (
    answer_draft,
    complete_answer_data,
    drive,
    make_artifact,
    make_capability,
    make_question,
    sdk_checked,
    tar_bytes,
    tiny_package_bytes,
)
from tests.npu_sim.packages import crushed_s8_package, set_line

pytestmark = pytest.mark.django_db(transaction=True)

VERSIONS = {"calrt": "0.7.6", "driver": "2.3.0", "firmware": "1.8.0", "chip": "calculet-2c"}


def package(uploader, tmp_path, *, decode_batch=8, features=(), version="1.0.0"):
    """The simulator's package with the features it declares, and the golden file delivered with it."""
    calbin_bytes, golden_bytes = tiny_package_bytes(tmp_path, decode_batch=decode_batch, features=tuple(features))
    name = f"b{decode_batch}-{'-'.join(features) or 'f32'}"
    calbin = make_artifact(uploader, calbin_bytes, kind="calbin", version=version, file_name=f"{name}.tar")
    golden = make_artifact(uploader, golden_bytes, kind="golden", version=version, file_name=f"{name}.npz")
    return calbin, golden


def answer_with(vendor_user, question, capability, calbin, golden, **overrides):
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden, **overrides)
    return answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))


def run_chain(answer, target_slug="simulator") -> Chain:
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer, target__slug=target_slug)
    drive(chain)
    return chain


def probe_findings(run: Run) -> list[tuple[str, str]]:
    return [(f["field"], f["code"]) for f in run.findings]


@pytest.mark.parametrize(
    ("code", "slug", "pinned", "decode_batch", "features", "probe"),
    [
        ("V17", "npu-sampling", "C3", 8, (), "sampling"),  # a decode-batch-8 package answering npu-sampling
        ("V18", "decode-batch-16", "", 8, (), "decode_batch"),  # a batch-8 package answering batch 16
        ("V25", "s8-v-cache-calbin", "", 8, (), "s8"),  # a float32 package answering the S8 V-cache capability
    ],
)
def test_a_package_that_does_not_exercise_the_capability_fails_and_proves_nothing(
    vendor_user, organisation, pm_user, simulator_online, tmp_path, code, slug, pinned, decode_batch, features, probe
):
    question = make_question(code, organisation=organisation, state="asked")
    capability = make_capability(slug, status="C3", pinned_status=pinned, questions=[question])
    calbin, golden = package(vendor_user, tmp_path, decode_batch=decode_batch, features=features)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden))

    runner = chain.runs.get(stage=stages.RUNNER)
    assert runner.state == stages.FAILED
    assert (f"probes.{probe}", "not_exercised") in probe_findings(runner)
    assert f"1 probe(s) failed — {probe} (not_exercised:" in runner.reason
    assert not chain.runs.filter(stage=stages.GOLDEN).exists()  # the chain stops there
    assert list(runner.evidence.grades.values_list("grade", flat=True)) == ["E4"]

    attempt = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C2"))
    assert not attempt.allowed
    messages = [r["message"] for r in attempt.reasons]
    if pinned:  # a pinned capability moves on a board's runs only: the simulator's are not asked for
        assert [r["code"] for r in attempt.reasons] == ["pinned_needs_full_proof", "no_hardware_runs"]
    else:
        assert f"Isolated runner (runner) is failed on simulator (Simulator) (run {runner.pk})." in messages
        assert f"Probe {probe} failed in Isolated runner (runner) on simulator: not_exercised." in messages
    assert Capability.objects.get(pk=capability.pk).status == "C3"


def test_the_same_probe_passes_on_the_package_that_has_the_feature(
    vendor_user, organisation, pm_user, simulator_online, tmp_path
):
    """The counterpart of the wrong proofs: an S8 package answering S8 V-cache passes every stage and
    reaches C2 on the simulator, its answer's tightened threshold in every job."""
    question = make_question("V25", organisation=organisation, state="asked")
    capability = make_capability("s8-v-cache-calbin", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())  # the package it proves, accepted on its proof
    calbin, golden = package(vendor_user, tmp_path, features=("s8",))
    answer = answer_with(
        vendor_user, question, capability, calbin, golden, thresholds={"s8.cosine_min_vs_float": 0.9991}
    )
    chain = run_chain(answer)
    assert {run.stage: run.state for run in chain.runs.all()} == dict.fromkeys(stages.CHAIN_STAGES, stages.PASSED)
    soak = chain.runs.get(stage=stages.SOAK)
    assert soak.probes[0]["params"]["cosine_min_vs_float"] == 0.9991
    assert soak.result["probes"][0]["params"]["cosine_min_vs_float"] == 0.9991
    attempt = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C2"))
    assert attempt.allowed, attempt.reasons
    assert attempt.versions == VERSIONS


def test_an_s8_package_whose_weights_lost_the_model_fails_the_golden_stage_against_the_float_model(
    vendor_user, organisation, simulator_online, tmp_path
):
    """Weights crushed to 3 bits, packed as S8 with the goldens of their own numerics: the runner's comparisons
    pass (its golden, its own dequantised weights); calculet's against the float model does not."""
    question = make_question("V25", organisation=organisation, state="asked")
    capability = make_capability("s8-v-cache-calbin", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    crushed = crushed_s8_package(tmp_path / "crushed.tar")
    calbin = make_artifact(vendor_user, crushed.read_bytes(), kind="calbin", version="1.0.0", file_name="s8.tar")
    with open_package(crushed) as files:
        golden_bytes = files.read(GOLDEN)
    golden = make_artifact(vendor_user, golden_bytes, kind="golden", version="1.0.0", file_name="s8.npz")
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden))
    run = chain.runs.get(stage=stages.GOLDEN)
    assert run.state == stages.FAILED, run.reason
    assert run.result["verdict"] == "pass"  # the runner's own word, kept beside calculet's
    assert run.reason == (
        "s8: against the float model max_rel 0.540456 > 0.05; cosine 0.89023517 < 0.999; top1 0.4118 < 0.9"
    )
    assert ("measurements.vs_float", "float_mismatch") in probe_findings(run)
    assert run.metrics["vs_float"]["passed"] is False and run.metrics["tensors"]["decode_logits"]["passed"]
    assert Capability.objects.get(pk=capability.pk).status == "C3"


def sampling_answer(vendor_user, organisation, tmp_path, *, golden_bytes=None):
    question = make_question("V17", organisation=organisation, state="asked")
    capability = make_capability("npu-sampling", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    calbin_bytes, package_golden = tiny_package_bytes(tmp_path, features=("sampling",))
    calbin = make_artifact(vendor_user, calbin_bytes, kind="calbin", version="1.0.0", file_name="sampling.tar")
    golden = make_artifact(
        vendor_user, golden_bytes or package_golden, kind="golden", version="1.0.0", file_name="sampling.npz"
    )
    return answer_with(vendor_user, question, capability, calbin, golden)


def test_the_device_s_draws_pass_the_golden_stage_as_calculet_judges_them(
    vendor_user, organisation, simulator_online, tmp_path
):
    chain = run_chain(sampling_answer(vendor_user, organisation, tmp_path))
    run = chain.runs.get(stage=stages.GOLDEN)
    assert run.state == stages.PASSED, run.reason
    assert run.metrics["sampling_fit"]["draws"] == 50000 and run.metrics["sampling_fit"]["p_value"] >= 0.001
    assert run.result["judged"]["passed"] is True


def test_a_vendor_golden_without_sampled_tokens_fails_the_golden_stage_as_calculet_judges_it(
    vendor_user, organisation, simulator_online, tmp_path
):
    delivered = read_golden(tiny_package_bytes(tmp_path, features=("sampling",))[1], "vendor")
    unsampled = write_golden(dataclasses.replace(delivered, sampled=None))
    chain = run_chain(sampling_answer(vendor_user, organisation, tmp_path, golden_bytes=unsampled))
    run = chain.runs.get(stage=stages.GOLDEN)
    assert run.state == stages.FAILED, run.reason
    assert "sampling: the golden (" in run.reason and ") holds no sampled tokens to compare" in run.reason
    assert ("measurements.sampling", "sampling_mismatch") in probe_findings(run)


def test_a_package_that_declares_sampling_and_returns_the_argmax_fails_its_chain(
    vendor_user, organisation, simulator_online, tmp_path
):
    """Its metadata declares device sampling and its token_ids output; its graph has no sampling op, so the
    device returns the argmax: the same tokens under any seed. calculet's own judgement of the draws a runner
    measures at the golden stage is tests/acceptance/test_feature_judging.py's."""
    question = make_question("V17", organisation=organisation, state="asked")
    capability = make_capability("npu-sampling", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    root = tmp_path / "argmax"
    with tarfile.open(fileobj=io.BytesIO(tiny_package_bytes(tmp_path, features=("sampling",))[0])) as archive:
        archive.extractall(root, filter="data")
    for submodel in ("prefill", "decode"):
        set_line(root, f"{submodel}/{SUBMODEL_MEMORY}", "op.topk_sampling", None)
    files = {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}
    calbin = make_artifact(vendor_user, tar_bytes(files), kind="calbin", version="1.0.0", file_name="argmax.tar")
    golden = make_artifact(vendor_user, files[GOLDEN], kind="golden", version="1.0.0", file_name="argmax.npz")
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden))
    run = chain.runs.get(stage=stages.RUNNER)
    assert run.state == stages.FAILED, run.reason
    assert ("probes.sampling.checks.seed_changes_draws", "check_failed") in probe_findings(run), run.findings
    assert not chain.runs.filter(stage=stages.GOLDEN).exists()
    assert Capability.objects.get(pk=capability.pk).status == "C3"


def test_a_loosened_threshold_is_refused_naming_it_and_stores_nothing(vendor_user, organisation, tmp_path):
    question = make_question("V17", organisation=organisation, state="asked")
    capability = make_capability("npu-sampling", status="C3", pinned_status="C3", questions=[question])
    calbin, golden = package(vendor_user, tmp_path, features=("sampling",))
    with pytest.raises(DomainError) as error:
        answer_with(vendor_user, question, capability, calbin, golden, thresholds={"sampling.min_p_value": 0.0001})
    assert error.value.field == "thresholds.sampling.min_p_value"
    assert "may only tighten it" in error.value.message
    assert not question.answers.exists()


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"tolerances": {"cosine_min": 0.5}}, "golden.tolerances.cosine_min"),
        ({"thresholds": {"min_decode_tokens_per_s": 5}}, "thresholds.min_decode_tokens_per_s"),
        ({"thresholds": {"bogus": 1.0}}, "thresholds.bogus"),
    ],
)
def test_the_service_every_entry_point_calls_refuses_a_loosened_limit(
    vendor_user, organisation, tmp_path, limits, field
):
    """The demo, the API and the benches all submit through `answer_submit`: it refuses, naming the field."""
    question = make_question("V18", organisation=organisation, state="asked")
    capability = make_capability("decode-batch-8", status="C3", questions=[question])
    calbin, golden = package(vendor_user, tmp_path)
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    data["golden"]["tolerances"] = limits.get("tolerances", {})
    data["thresholds"] = limits.get("thresholds", {})
    with pytest.raises(DomainError) as error:
        answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    assert error.value.field == field
    assert not question.answers.exists()


def test_a_board_reporting_another_calrt_than_its_registration_ends_the_run_in_error(
    vendor_user, organisation, question, capability, simulator_online, tmp_path
):
    # The runner runs as nobody in its sandbox: the board's configuration is readable by anyone, as on a host.
    config_dir = Path(tempfile.mkdtemp(prefix="board-config-"))
    config_dir.chmod(0o755)
    device_config = config_dir / "board.json"
    device_config.write_text(json.dumps({**VERSIONS, "calrt": "0.7.7"}))
    device_config.chmod(0o644)
    target_register(
        actor=SYSTEM,
        slug="board-1",
        kind=Target.HARDWARE,
        runner_command=f"{sys.executable} {BOARD_DOUBLE} --device-config {device_config}",
        calrt_version="0.7.6",
        driver_version="2.3.0",
        firmware_version="1.8.0",
        chip="calculet-2c",
    )
    target_heartbeat(queues=["board-1"], worker="board-host")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    runner = chain.runs.get(stage=stages.RUNNER)
    assert runner.state == stages.ERROR, runner.reason
    assert ("device.calrt", "version_mismatch") in probe_findings(runner), runner.reason
    assert "the device reports calrt 0.7.7; the target is registered with 0.7.6" in runner.reason
    assert runner.evidence is None
    assert "board double" in runner.log
    shutil.rmtree(config_dir)


def test_the_board_double_says_what_it_is_and_its_evidence_is_e4(
    vendor_user, organisation, question, capability, simulator_online, tmp_path
):
    target_register(
        actor=SYSTEM,
        slug="board-1",
        kind=Target.HARDWARE,
        runner_command=f"{sys.executable} {BOARD_DOUBLE}",
        **{f"{key}_version" if key != "chip" else key: value for key, value in VERSIONS.items()},
    )
    target_heartbeat(queues=["board-1"], worker="board-host")
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden), "board-1")
    runner = chain.runs.get(stage=stages.RUNNER)
    assert runner.state == stages.PASSED
    assert runner.result["device"]["double"] is True
    assert runner.result["device"]["identity"].startswith("board test double")
    assert list(runner.evidence.grades.values_list("grade", flat=True)) == ["E4"]


def test_c4_to_c3_without_an_answer_is_blocked(pm_user, organisation):
    question = make_question("V50", organisation=organisation, state="asked")
    capability = make_capability("device-reset", status="C4", questions=[question])
    attempt = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C3"))
    assert not attempt.allowed
    assert [r["code"] for r in attempt.reasons] == ["no_answer"]
    assert Capability.objects.get(pk=capability.pk).status == "C4"


def _promoted_to_c1(vendor_user, question, capability, pm_user, tmp_path) -> Chain:
    capability.deliverables.add(*question.deliverables.all())  # the package it proves, accepted on its proof
    calbin, golden = package(vendor_user, tmp_path)
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden))
    promoted = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C2"))
    assert promoted.allowed and promoted.versions["calrt"] == "0.7.6"
    sdk_checked(capability)
    assert capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C1")).allowed
    return chain


def _register_simulator(calrt_version: str) -> None:
    target_register(
        actor=SYSTEM,
        slug="simulator",
        kind=Target.SIMULATOR,
        calrt_version=calrt_version,
        driver_version="2.3.0",
        firmware_version="1.8.0",
        chip="calculet-2c",
    )


def test_a_calrt_upgrade_whose_re_run_fails_demotes_the_capability(
    vendor_user, organisation, question, capability, pm_user, simulator_online, tmp_path
):
    chain = _promoted_to_c1(vendor_user, question, capability, pm_user, tmp_path)

    # The simulator is now the device on CalRT 0.8.0, outside the package's range: the artifact stage re-runs
    # on the new versions and fails, and the system demotes what no current evidence supports.
    _register_simulator("0.8.0")
    # What was measured on CalRT 0.7.6 is no longer current: it counts as E3 until checked again.
    measured = EvidenceItem.objects.filter(run__chain=chain)
    assert measured.count() == 5 and not measured.filter(current=True).exists()
    assert AuditEntry.objects.filter(action="evidence.lapse").count() == 5
    drive(chain)
    artifact = chain.runs.filter(stage=stages.ARTIFACT).latest("id")
    assert artifact.state == stages.FAILED and "calrt 0.8.0" in artifact.reason
    assert Capability.objects.get(pk=capability.pk).status == "C3"
    demotion = PromotionAttempt.objects.latest("id")
    assert (demotion.actor_label, demotion.from_status, demotion.to_status) == ("system", "C1", "C3")
    assert demotion.allowed and demotion.reason.startswith(f"re-verification: run {artifact.pk} (artifact")
    assert {r["code"] for r in demotion.reasons} >= {"stage_not_passed"}
    entry = AuditEntry.objects.filter(action="capability.demote").latest("id")
    assert entry.actor_label == "system" and entry.after["status"] == "C3"


def test_a_calrt_upgrade_whose_re_run_cannot_run_demotes_the_capability_at_the_next_sweep(
    vendor_user, organisation, question, capability, pm_user, simulator_online, tmp_path
):
    chain = _promoted_to_c1(vendor_user, question, capability, pm_user, tmp_path)
    target_set_maintenance(actor=SYSTEM, target=simulator_online, maintenance=True, reason="board swap")
    # CalRT 0.7.7 is inside the package's range, so the re-run could pass; but the target takes no runs.
    _register_simulator("0.7.7")
    assert chain.runs.filter(state=stages.PENDING).exists()

    report = runs_sweep()

    assert report.demoted == 1
    assert Capability.objects.get(pk=capability.pk).status == "C3"
    demotion = PromotionAttempt.objects.latest("id")
    assert (demotion.actor_label, demotion.from_status, demotion.to_status) == ("system", "C1", "C3")
    assert "its proof cannot run again on simulator: it is in maintenance" in demotion.reason
    assert runs_sweep().demoted == 0  # once


def test_a_target_in_maintenance_demotes_nothing_while_the_evidence_still_holds(
    vendor_user, organisation, question, capability, pm_user, simulator_online, tmp_path
):
    chain = _promoted_to_c1(vendor_user, question, capability, pm_user, tmp_path)
    target_set_maintenance(actor=SYSTEM, target=simulator_online, maintenance=True, reason="board swap")
    # A PM's re-run of the soak waits for the target; the C1 evidence on CalRT 0.7.6 is still current.
    run_rerun(actor=pm_user, run=chain.runs.get(stage=stages.SOAK))
    assert chain.runs.filter(stage=stages.SOAK, state=stages.PENDING).exists()

    assert runs_sweep().demoted == 0
    assert Capability.objects.get(pk=capability.pk).status == "C1"


EXAMPLE = """import os, subprocess, sys
print("example: checking", os.path.basename(os.environ["CALBIN"]), flush=True)
print("example: working in", os.path.dirname(os.environ["CALBIN"]), flush=True)
checked = subprocess.run([sys.executable, "-m", "npu_sim", "validate", os.environ["CALBIN"]], capture_output=True)
print("validate exit", checked.returncode, flush=True)
sys.exit(checked.returncode or int(os.environ.get("EXAMPLE_EXIT", "0")))
"""


@pytest.mark.parametrize("exit_code", [0, 3])
def test_the_runner_stage_runs_the_answers_minimal_example_and_records_its_output(
    vendor_user, organisation, question, capability, simulator_online, tmp_path, settings, exit_code
):
    script = EXAMPLE.replace('int(os.environ.get("EXAMPLE_EXIT", "0"))', str(exit_code))
    example = make_artifact(
        vendor_user, tar_bytes({"run.py": script.encode()}), kind="sdk", version="1.0", file_name="example.tar"
    )
    calbin, golden = package(vendor_user, tmp_path)
    answer = answer_with(
        vendor_user, question, capability, calbin, golden,
        minimal_example={"artifact": example.pk, "command": "python3 run.py", "description": "validate and exit"},
    )  # fmt: skip
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    drive(chain)
    runner = chain.runs.get(stage=stages.RUNNER)
    ran = runner.result["minimal_example"]
    assert ran["ran"] and ran["command"] == "python3 run.py" and ran["exit_code"] == exit_code
    assert "example: checking calbin.tar" in ran["output"] and "validate exit 0" in ran["output"]
    # Its directory carries this database's tag, so a killed worker's is the sweeper's to remove; and it is gone.
    workdir = Path(ran["output"].split("example: working in ", 1)[1].split("\n", 1)[0])
    assert workdir.parent == settings.ACCEPTANCE_RUN_DIR
    assert workdir.name.startswith(f"{run_dir_prefix()}{runner.pk}-example-"), workdir.name
    assert not workdir.exists()
    if exit_code == 0:
        assert runner.state == stages.PASSED
    else:
        assert runner.state == stages.FAILED
        assert ("minimal_example", "minimal_example_failed") in probe_findings(runner)
        assert "the minimal example (python3 run.py) ended with" in runner.reason


def test_a_residency_answer_sends_its_second_package_and_every_stage_runs_the_probe(
    vendor_user, organisation, simulator_online, tmp_path
):
    """V35: the residency probe loads and unloads the answer's second calbin, the job's packages.second, while the
    first serves; with it the probe runs (and passes) through all five runner stages."""
    question = make_question("V35", organisation=organisation, state="asked")
    capability = make_capability("dynamic-resident-multi-model", status="C3", pinned_status="C3", questions=[question])
    calbin, golden = package(vendor_user, tmp_path, features=("residency", "multi_model"))
    other, _ = package(vendor_user, tmp_path, decode_batch=4, features=("residency", "multi_model"), version="1.0.1")
    answer = answer_with(vendor_user, question, capability, calbin, golden, extra_assets=[other])
    chain = run_chain(answer)
    runs = {run.stage: run for run in chain.runs.all()}
    assert {stage: run.state for stage, run in runs.items()} == dict.fromkeys(stages.CHAIN_STAGES, stages.PASSED), {
        stage: run.reason for stage, run in runs.items()
    }
    for stage in stages.RUNNER_STAGES:
        [probe] = runs[stage].result["probes"]
        assert (probe["name"], probe["verdict"]) == ("residency", "pass")
