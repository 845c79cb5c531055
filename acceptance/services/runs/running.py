"""Running a runner stage: its inputs copied into a run directory of its own, the job written, and the
runner — the bundled simulator or, on a board, the operator's registered runner — run in the sandbox. A
vendor's runner bundle never runs in its place: a runner measures, and calculet judges what it measured."""

import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from calculet_agent.sandbox import Limits, network_isolation_method, run_sandboxed, scrubbed_environment
from django.conf import settings
from django.db import connection

from acceptance import judging, stages
from acceptance.models import Run, Target
from acceptance.protocol import StageOutcome, build_job, device_findings, outcome_verdict
from acceptance.services.inputs import AnswerInputs
from acceptance.services.runs.reporting import RunReporter
from npu_sim.calbin import build_calbin
from vendor.models import Artifact
from vendor.services.artifacts import example_unpack
from vendor.storage import blob_local_path


def default_runner_command() -> list[str]:
    return shlex.split(settings.ACCEPTANCE_RUNNER_COMMAND) or [sys.executable, "-m", "npu_sim", "run"]


def health_package() -> Path:
    """The known-good package a health job runs: ACCEPTANCE_HEALTH_PACKAGE, or a tiny simulator package built
    once per host."""
    if settings.ACCEPTANCE_HEALTH_PACKAGE:
        return Path(settings.ACCEPTANCE_HEALTH_PACKAGE)
    path = Path(settings.DATA_DIR) / "acceptance" / "health-tiny.tar"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tar")
        build_calbin(partial, preset="tiny", decode_batch=1, tar=True)
        os.replace(partial, path)
    return path


def _limits(inputs_bytes: int) -> Limits:
    return Limits(
        wall_seconds=settings.ACCEPTANCE_RUNNER_WALL_SECONDS,
        memory_bytes=settings.ACCEPTANCE_RUNNER_MEMORY_MB * 1024 * 1024,
        output_bytes=settings.ACCEPTANCE_RUNNER_OUTPUT_BYTES,
        file_bytes=settings.ACCEPTANCE_RUNNER_FILE_BYTES,
        workdir_bytes=inputs_bytes + settings.ACCEPTANCE_RUNNER_WORKDIR_BYTES,
    )


def _copy_blob(artifact: Artifact, destination: Path) -> None:
    with blob_local_path(artifact.stored_blob) as source:
        shutil.copyfile(source, destination)


def no_hardware_runner(target: Target) -> StageOutcome:
    return StageOutcome(
        stages.ERROR,
        f"{target.slug} is a hardware target with no hardware runner command registered: nothing ran "
        "(a hardware target never falls back to the bundled simulator)",
        findings=[
            {
                "code": "no_hardware_runner",
                "severity": "error",
                "field": "target.runner_command",
                "message": "no hardware runner command is registered for this target",
            }
        ],
    )


def _golden_for_job(inputs: AnswerInputs, calbin_artifact: Artifact, destination: Path) -> tuple[str | None, str]:
    """The golden the job compares against, and its source: the package's own goldens only when the answer
    names the package itself as its golden; otherwise the golden file the vendor delivered (none: the golden
    comparisons are not exercised)."""
    if any(a.pk == calbin_artifact.pk for a in inputs.golden_artifacts):
        return None, "package"
    delivered = next((a for a in inputs.golden_artifacts if a.kind == Artifact.GOLDEN), None)
    if delivered is None:
        return None, "vendor"
    _copy_blob(delivered, destination)
    return str(destination), "vendor"


def run_dir_prefix() -> str:
    """`calculet-run-<database>-`: each run's working directory under ACCEPTANCE_RUN_DIR is this, the run's id,
    `-` and a random part (`run_workdir`). The tag of the database's name keeps apart setups that share a data
    folder with different databases, so each one's sweeper removes only its own runs' directories."""
    return f"calculet-run-{hashlib.sha256(connection.settings_dict['NAME'].encode()).hexdigest()[:12]}-"


def run_workdir(run: Run, purpose: str = "") -> tempfile.TemporaryDirectory:
    """A working directory of the run's attempt, removed when it ends; named so that the sweeper finds and
    removes it if the attempt's worker is killed first. `purpose` ("example-") sets one attempt's apart."""
    return tempfile.TemporaryDirectory(prefix=f"{run_dir_prefix()}{run.pk}-{purpose}", dir=settings.ACCEPTANCE_RUN_DIR)


def runner_execute(run: Run, reporter: RunReporter, inputs: AnswerInputs | None = None) -> StageOutcome:
    """Run the run's runner stage in the sandbox: on the answer's calbin with the capability's probes and the
    vendor's golden, or on the known-good package for a health job (`inputs` None).

    A hardware target runs its registered hardware runner and nothing else (never a vendor's bundle); a
    simulator target runs the simulator as a device with the target's registered versions. Either way the
    device the result reports must be the target's registration, or the run ends in error
    (`version_mismatch`).
    """
    target: Target = run.target
    if target.kind == Target.HARDWARE and not target.runner_command:
        return no_hardware_runner(target)
    with run_workdir(run) as tmp:
        workdir = Path(tmp)
        (workdir / "inputs").mkdir()
        calbin = workdir / "inputs" / "calbin.tar"
        golden, golden_source = None, "package"
        packages: dict[str, str] = {}
        extra_env = {}
        if target.kind == Target.HARDWARE:
            command = shlex.split(target.runner_command)
        else:
            command = default_runner_command()
            device_config = workdir / "inputs" / "device.json"
            # The simulator plays the device the target is registered as.
            device_config.write_text(json.dumps(target.registered_versions()))
            extra_env["NPU_SIM_DEVICE_CONFIG"] = str(device_config)
        if inputs is None:
            reporter.note("preparing the known-good package")
            shutil.copyfile(health_package(), calbin)
        else:
            calbin_artifact, *others = [a for a in inputs.executable_assets if a.kind == Artifact.CALBIN]
            _copy_blob(calbin_artifact, calbin)
            if others:  # the artifact stage let a second calbin through only for a recipe that needs it
                second = workdir / "inputs" / "second.tar"
                _copy_blob(others[0], second)
                packages["second"] = str(second)
            golden, golden_source = _golden_for_job(inputs, calbin_artifact, workdir / "inputs" / "golden.npz")
        inputs_bytes = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
        job_path, result_path = workdir / "job.json", workdir / "result.json"
        job = build_job(
            stage=run.stage,
            calbin=str(calbin),
            params=run.params,
            target=target.as_job_target(),
            probes=run.probes,
            golden=golden,
            golden_source=golden_source,
            packages=packages,
        )
        job_path.write_text(json.dumps(job, indent=2))
        argv = [*command, "--job", str(job_path), "--result", str(result_path)]
        reporter.note(f"{shlex.join(argv)} (network isolation: {network_isolation_method()})")
        try:
            outcome = run_sandboxed(
                argv,
                workdir=workdir,
                cwd=workdir,
                env=scrubbed_environment(extra_env),
                limits=_limits(inputs_bytes),
                on_output=reporter.output,
                on_tick=lambda: not reporter.lost,
                devices=tuple(settings.ACCEPTANCE_RUNNER_DEVICES),
            )
        except OSError as error:
            return StageOutcome(stages.ERROR, f"the runner could not be started: {error}")
        verdict = outcome_verdict(outcome, result_path, run.stage, reporter.stderr_tail)
        if inputs is not None:
            verdict = _judged(verdict, run.stage, run.params, workdir, calbin, golden, golden_source)
        verdict = attested(verdict, target)
    if run.stage == stages.RUNNER and inputs is not None and verdict.verdict != stages.ERROR:
        verdict = _with_minimal_example(verdict, minimal_example_run(run, reporter, inputs))
    return verdict


EXAMPLE_OUTPUT_KEEP = 4000


def minimal_example_run(run: Run, reporter: RunReporter, inputs: AnswerInputs) -> dict:
    """Run the answer's minimal example in a sandbox of its own (docs/runner-protocol.md: it is not part of the
    job): the example the vendor delivered unpacked in `example/`, its command run there with `CALBIN` naming
    the package. Returns what happened, its output included."""
    answer = inputs.answer
    artifact = inputs.minimal_example_artifact
    command = shlex.split(answer.minimal_example_command or "")
    if artifact is None or not command:
        return {
            "ran": False,
            "command": answer.minimal_example_command,
            "detail": "the answer delivers no example file to run with its command"
            if artifact is None
            else "the answer gives no command to run its example",
        }
    output: list[bytes] = []
    with run_workdir(run, "example-") as tmp:
        workdir = Path(tmp)
        example = workdir / "example"
        example.mkdir()
        calbin_artifact = next(a for a in inputs.executable_assets if a.kind == Artifact.CALBIN)
        _copy_blob(calbin_artifact, workdir / "calbin.tar")
        example_unpack(artifact, example)
        inputs_bytes = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
        reporter.note(f"minimal example: {shlex.join(command)}")

        def keep(stream: str, chunk: bytes) -> None:
            output.append(chunk)
            reporter.output(stream, chunk)

        try:
            outcome = run_sandboxed(
                command,
                workdir=workdir,
                cwd=example,
                env=scrubbed_environment({"CALBIN": str(workdir / "calbin.tar")}),
                limits=_limits(inputs_bytes),
                on_output=keep,
                on_tick=lambda: not reporter.lost,
                devices=tuple(settings.ACCEPTANCE_RUNNER_DEVICES),
            )
        except OSError as error:
            return {"ran": False, "command": shlex.join(command), "detail": f"could not be started: {error}"}
    text = b"".join(output).decode(errors="replace")
    return {
        "ran": True,
        "command": shlex.join(command),
        "exit_code": outcome.exit_code,
        "limit": outcome.limit_hit,
        "passed": outcome.clean_exit,
        "detail": outcome.reason,
        "output": text[-EXAMPLE_OUTPUT_KEEP:],
    }


def _with_minimal_example(outcome: StageOutcome, example: dict) -> StageOutcome:
    """The runner stage's verdict with its minimal example: recorded in the result; one that ran and failed
    fails the stage."""
    result = {**outcome.result, "minimal_example": example}
    if not example["ran"] or example["passed"]:
        return StageOutcome(outcome.verdict, outcome.reason, outcome.findings, outcome.metrics, result)
    finding = {
        "code": "minimal_example_failed",
        "severity": "error",
        "field": "minimal_example",
        "message": f"the minimal example ({example['command']}) ended with {example['detail']}",
    }
    reason = finding["message"] if outcome.verdict == stages.PASS else f"{outcome.reason}; {finding['message']}"
    return StageOutcome(stages.FAIL, reason, [*outcome.findings, finding], outcome.metrics, result)


def _judged(
    outcome: StageOutcome,
    stage: str,
    params: dict,
    workdir: Path,
    calbin: Path,
    golden: str | None,
    golden_source: str,
) -> StageOutcome:
    """The stage's verdict as calculet computes it from the files the runner measured into
    (`acceptance.judging`): a pass needs calculet's judgement to pass; the figures calculet computed replace
    the runner's in the run's metrics (the golden stage's `tensors`, the soak's rates and `golden_under_load`,
    the failure stage's `scenarios`)."""
    if outcome.verdict == stages.ERROR or stage not in judging.JUDGED_STAGES:
        return outcome
    judgement = judging.stage_judgement(
        stage, outcome.result, workdir, params, calbin, golden_source, Path(golden) if golden else None
    )
    result = {**outcome.result, "judged": {"passed": judgement.passed, "reason": judgement.reason}}
    metrics = {**outcome.metrics, **judgement.metrics}
    if judgement.passed:
        return StageOutcome(outcome.verdict, outcome.reason, outcome.findings, metrics, result)
    reason = judgement.reason if outcome.verdict == stages.PASS else f"{outcome.reason}; {judgement.reason}"
    return StageOutcome(stages.FAIL, reason, [*judgement.findings, *outcome.findings], metrics, result)


def attested(outcome: StageOutcome, target: Target) -> StageOutcome:
    """A verdict stands only when the device the runner reports is the target as registered: otherwise the
    run proves nothing about the target, and ends in error with what differs."""
    if outcome.verdict == stages.ERROR:
        return outcome
    wrong = device_findings(outcome.result, target.as_job_target())
    if not wrong:
        return outcome
    return StageOutcome(
        stages.ERROR,
        "the device is not the target as registered: " + "; ".join(f["message"] for f in wrong),
        findings=[*wrong, *outcome.findings],
        metrics=outcome.metrics,
        result=outcome.result,
    )
