"""Running a runner stage: its inputs copied into a run directory of its own, the job written, and the
runner — the bundled simulator or, on a board, the operator's registered runner — run in the sandbox. A
vendor's runner bundle never runs in its place: a runner measures, and calculet judges what it measured."""

import hashlib
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from calculet_agent.sandbox import Limits, network_isolation_method, run_sandboxed, scrubbed_environment
from django.conf import settings
from django.db import connection
from django.utils.translation import gettext_noop

from acceptance import judging, probe_judging, stages, summaries
from acceptance.models import Run, Target
from acceptance.protocol import StageOutcome, device_findings, outcome_verdict
from acceptance.services.inputs import AnswerInputs
from acceptance.services.runs.jobs import (
    CALBIN,
    GOLDEN,
    JobInput,
    RunnerJob,
    health_package,
    job_text_files,
    runner_job,
)
from acceptance.services.runs.reporting import RunReporter
from vendor.models import Artifact
from vendor.services.artifacts import example_unpack
from vendor.storage import blob_local_path


def default_runner_command() -> list[str]:
    return shlex.split(settings.ACCEPTANCE_RUNNER_COMMAND) or [sys.executable, "-m", "npu_sim", "run"]


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
    command = shlex.split(target.runner_command) if target.kind == Target.HARDWARE else default_runner_command()
    with run_workdir(run) as tmp:
        workdir = Path(tmp)
        job = runner_job(run, inputs, str(workdir))
        if inputs is None:
            reporter.note("preparing the known-good package")
        started = time.monotonic()
        for item in job.inputs:
            _copy_input(item, workdir / item.name)
        job_text_files(job, workdir)
        reporter.timing["fetch"] = time.monotonic() - started
        inputs_bytes = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
        job_path, result_path = workdir / "job.json", workdir / "result.json"
        job_path.write_text(json.dumps(job.job, indent=2))
        argv = [*command, "--job", str(job_path), "--result", str(result_path)]
        reporter.note(f"{shlex.join(argv)} (network isolation: {network_isolation_method()})")
        started = time.monotonic()
        try:
            outcome = run_sandboxed(
                argv,
                workdir=workdir,
                cwd=workdir,
                env=scrubbed_environment(job.env),
                limits=_limits(inputs_bytes),
                on_output=reporter.output,
                on_tick=lambda: not reporter.lost,
                devices=tuple(settings.ACCEPTANCE_RUNNER_DEVICES),
            )
        except OSError as error:
            return StageOutcome(stages.ERROR, f"the runner could not be started: {error}")
        reporter.timing["runner"] = time.monotonic() - started
        verdict = outcome_verdict(outcome, result_path, run.stage, reporter.stderr_tail)
        golden = workdir / GOLDEN if job.golden_input is not None else None
        verdict = runner_judged(run, verdict, measured=workdir, calbin=workdir / CALBIN, golden=golden, job=job)
    if run.stage == stages.RUNNER and inputs is not None and verdict.verdict != stages.ERROR:
        started = time.monotonic()
        verdict = _with_minimal_example(verdict, minimal_example_run(run, reporter, inputs))
        reporter.timing["example"] = time.monotonic() - started
    return verdict


def _copy_input(item: JobInput, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    if item.artifact is None:
        shutil.copyfile(health_package(), destination)
    else:
        _copy_blob(item.artifact, destination)


def runner_judged(
    run: Run, outcome: StageOutcome, *, measured: Path, calbin: Path, golden: Path | None, job: RunnerJob
) -> StageOutcome:
    """The verdict of a runner stage as calculet gives it, wherever the runner ran (a worker here, or
    calculet-agent on the target's host): each runner stage judged from what the runner measured (the
    protocol's files, in `measured`) against the golden the job named (the vendor's file at `golden`, or
    the package's own at `calbin`), and the device the result reports attested as the target's."""
    golden_path = str(golden) if golden else None
    outcome = _judged(outcome, run.stage, run.params, run.probes, measured, calbin, golden_path, job.golden_source)
    return attested(outcome, run.target)


EXAMPLE_OUTPUT_KEEP = 4000
MINIMAL_EXAMPLE_FAILED = gettext_noop("the minimal example (%(command)s) ended with %(detail)s")


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
    detail = summaries.sandbox_sentence(example["detail"])
    message = judging.Said(MINIMAL_EXAMPLE_FAILED, command=example["command"], detail=detail)
    finding = judging.finding("minimal_example_failed", message, judging.MINIMAL_EXAMPLE_FIELD)
    reason = str(message) if outcome.verdict == stages.PASS else f"{outcome.reason}; {message}"
    return StageOutcome(stages.FAIL, reason, [*outcome.findings, finding], outcome.metrics, result)


def _judged(
    outcome: StageOutcome,
    stage: str,
    params: dict,
    probes: list[dict],
    workdir: Path,
    calbin: Path,
    golden: str | None,
    golden_source: str,
) -> StageOutcome:
    """The stage's verdict as calculet computes it from the files the runner measured into
    (`acceptance.judging`) and the observations of the probes calculet judges (`acceptance.probe_judging`,
    whose verdicts replace the runner's probe verdicts in `result.judged.probes`): a pass needs calculet's
    judgement to pass; the figures calculet computed replace the runner's in the run's metrics (the golden
    stage's `tensors`, the soak's rates and `golden_under_load`, the failure stage's `scenarios`, each judged
    probe's checks in `judged_probes`)."""
    if outcome.verdict == stages.ERROR or stage not in judging.JUDGED_STAGES:
        return outcome
    golden_path = Path(golden) if golden else None
    judgement = judging.stage_judgement(
        stage, outcome.result, workdir, params, probes, calbin, golden_source, golden_path
    )
    job_golden = probe_judging.JobGolden(golden_source, golden_path, params.get("tolerances", {}))
    probes_judged = probe_judging.probe_judgements(stage, outcome.result, probes, workdir, calbin, job_golden)
    judgement = probe_judging.with_probe_checks(judgement, probes_judged)
    judged = {"passed": judgement.passed, "reason": judgement.reason}
    if probes_judged:
        judged["probes"] = {name: "pass" if probe.passed else "fail" for name, probe in probes_judged.items()}
    result = {**outcome.result, "judged": judged}
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
