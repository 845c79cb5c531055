"""The job of a runner stage, decided once for both places a runner runs: a Celery worker's `runner_execute`
copies the inputs into its run directory, and calculet-agent fetches them by SHA-256 into its own
(`acceptance.services.agents`). Either way the runner reads the same files under the same names, with the same
job and environment."""

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from acceptance import stages
from acceptance.models import Run, Target
from acceptance.protocol import build_job
from acceptance.services.inputs import AnswerInputs, answer_inputs
from npu_sim.calbin import build_calbin
from vendor.models import Artifact

CALBIN = "inputs/calbin.tar"
SECOND_PACKAGE = "inputs/second.tar"
GOLDEN = "inputs/golden.npz"
DEVICE_CONFIG = "inputs/device.json"


@dataclass(frozen=True)
class JobInput:
    """A file the runner reads, at `name` under the run's working directory: an artifact's stored blob, or
    (`artifact` None) the known-good package on this host (`health_package`)."""

    name: str
    sha256: str
    size: int
    artifact: Artifact | None


@dataclass(frozen=True)
class RunnerJob:
    """What a runner stage runs: its input files, the text files written beside them, the environment and the
    job, every path under `workdir`; and where its golden comes from, for calculet's judging."""

    workdir: str
    inputs: list[JobInput]
    files: dict[str, str]
    env: dict[str, str]
    job: dict
    golden_source: str

    def path(self, name: str) -> str:
        return f"{self.workdir}/{name}"

    @property
    def golden_input(self) -> JobInput | None:
        return next((item for item in self.inputs if item.name == GOLDEN), None)


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


def runner_inputs(run: Run) -> AnswerInputs | None:
    """The answer's inputs a runner stage runs on; None for a health job, which runs the known-good package."""
    if run.stage == stages.HEALTH or run.answer is None:
        return None
    return answer_inputs(run.answer)


def runner_job(run: Run, inputs: AnswerInputs | None, workdir: str) -> RunnerJob:
    """The job of the run's runner stage with its paths under `workdir`: the answer's calbin (and the second
    calbin the artifact stage let through only for a recipe that needs one, as `packages.second`), the golden
    the vendor delivered unless the answer names the package itself as its golden, and for a simulator target
    the device it plays; for a health job (`inputs` None) the known-good package."""
    target: Target = run.target
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    if target.kind == Target.SIMULATOR:
        # The simulator plays the device the target is registered as.
        files[DEVICE_CONFIG] = json.dumps(target.registered_versions())
        env["NPU_SIM_DEVICE_CONFIG"] = f"{workdir}/{DEVICE_CONFIG}"
    packages: dict[str, str] = {}
    golden_source = "package"
    if inputs is None:
        found = [_health_input()]
    else:
        calbin, *others = [a for a in inputs.executable_assets if a.kind == Artifact.CALBIN]
        found = [_artifact_input(CALBIN, calbin)]
        if others:
            found.append(_artifact_input(SECOND_PACKAGE, others[0]))
            packages["second"] = f"{workdir}/{SECOND_PACKAGE}"
        if not any(a.pk == calbin.pk for a in inputs.golden_artifacts):
            golden_source = "vendor"
            delivered = next((a for a in inputs.golden_artifacts if a.kind == Artifact.GOLDEN), None)
            if delivered is not None:  # none: the golden comparisons are not exercised
                found.append(_artifact_input(GOLDEN, delivered))
    job = build_job(
        stage=run.stage,
        calbin=f"{workdir}/{CALBIN}",
        params=run.params,
        target=target.as_job_target(),
        probes=run.probes,
        golden=f"{workdir}/{GOLDEN}" if any(item.name == GOLDEN for item in found) else None,
        golden_source=golden_source,
        packages=packages,
    )
    return RunnerJob(workdir, found, files, env, job, golden_source)


def _artifact_input(name: str, artifact: Artifact) -> JobInput:
    blob = artifact.stored_blob
    return JobInput(name, blob.sha256, blob.size, artifact)


def _health_input() -> JobInput:
    path = health_package()
    stat = path.stat()
    return JobInput(CALBIN, _file_sha256(str(path), stat.st_size, stat.st_mtime_ns), stat.st_size, None)


@functools.lru_cache(maxsize=4)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """The file's SHA-256, computed once while its size and time stay the same."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def job_text_files(job: RunnerJob, workdir: Path) -> None:
    """Write the job's text files into `workdir`."""
    for name, text in job.files.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(text)
