"""Running a runner stage: its inputs copied into a run directory of its own, the job written, and the
runner — the bundled simulator, the host's own, or on a board the vendor's bundle — run in the sandbox."""

import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from django.conf import settings

from acceptance import stages
from acceptance.models import Run, Target
from acceptance.protocol import StageOutcome, build_job, outcome_verdict
from acceptance.sandbox import Limits, network_isolation_method, run_sandboxed, scrubbed_environment
from acceptance.services.checks import RUNNER_MANIFEST, runner_bundle_command
from acceptance.services.inputs import AnswerInputs
from acceptance.services.runs.reporting import RunReporter
from npu_sim.calbin import build_calbin
from vendor.models import Artifact
from vendor.services.artifacts import archive_extract
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


def _unpack_bundle(bundle: Artifact, destination: Path) -> list[str]:
    """Unpack a vendor's runner bundle (already checked at the artifact stage; each member checked again as it
    is unpacked) and return its command."""
    with blob_local_path(bundle.stored_blob) as source:
        archive_extract(source, destination)
    return runner_bundle_command((destination / RUNNER_MANIFEST).read_bytes())


def runner_execute(run: Run, reporter: RunReporter, inputs: AnswerInputs | None = None) -> StageOutcome:
    """Run the run's runner stage in the sandbox: on the answer's calbin, or on the known-good package for a
    health job (`inputs` None)."""
    target: Target = run.target
    with tempfile.TemporaryDirectory(prefix=f"calculet-run-{run.pk}-", dir=settings.ACCEPTANCE_RUN_DIR) as tmp:
        workdir = Path(tmp)
        (workdir / "inputs").mkdir()
        calbin = workdir / "inputs" / "calbin.tar"
        command, cwd = default_runner_command(), workdir
        if inputs is None:
            reporter.note("preparing the known-good package")
            shutil.copyfile(health_package(), calbin)
        else:
            calbin_artifact = next(a for a in inputs.executable_assets if a.kind == Artifact.CALBIN)
            _copy_blob(calbin_artifact, calbin)
            bundle = next((a for a in inputs.executable_assets if a.kind == Artifact.RUNNER_BUNDLE), None)
            # On a board the vendor's runner drives the device; on the simulator, only the simulator judges.
            if bundle is not None and target.kind == Target.HARDWARE:
                cwd = workdir / "bundle"
                command = _unpack_bundle(bundle, cwd)
                reporter.note(f"runner bundle {bundle} unpacked")
        inputs_bytes = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
        job_path, result_path = workdir / "job.json", workdir / "result.json"
        job = build_job(stage=run.stage, calbin=str(calbin), params=run.params, target=target.as_job_target())
        job_path.write_text(json.dumps(job, indent=2))
        argv = [*command, "--job", str(job_path), "--result", str(result_path)]
        reporter.note(f"{shlex.join(argv)} (network isolation: {network_isolation_method()})")
        try:
            outcome = run_sandboxed(
                argv,
                workdir=workdir,
                cwd=cwd,
                env=scrubbed_environment(),
                limits=_limits(inputs_bytes),
                on_output=reporter.output,
                on_tick=lambda: not reporter.lost,
                devices=tuple(settings.ACCEPTANCE_RUNNER_DEVICES),
            )
        except OSError as error:
            return StageOutcome(stages.ERROR, f"the runner could not be started: {error}")
        return outcome_verdict(outcome, result_path, run.stage, reporter.stderr_tail)
