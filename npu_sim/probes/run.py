"""Running one probe at one stage, and what it reports."""

from typing import Any

import numpy as np

from npu_sim.errors import CalrtError
from npu_sim.loaded_calbin import Calbin
from npu_sim.probes.spec import ProbeSpec
from npu_sim.protocol.context import JobContext, NotExercised, Recorder
from npu_sim.protocol.job import ProbeRequest


class ProbeRun(Recorder):
    """A probe's checks, metrics and findings at one stage."""

    def __init__(
        self, ctx: JobContext, spec: ProbeSpec, request: ProbeRequest, stage: str, share: tuple[float, float]
    ) -> None:
        super().__init__(ctx, request.params, f"{spec.name}: ")
        self.spec = spec
        self.stage = stage
        self.share = share  # the part of the job's progress bar this probe fills
        self.findings: list[dict[str, str]] = []
        # What the device did, as the caller judges the probe's checks from it (docs/runner-protocol.md,
        # "A probe's observations"): written to `<probe>-<stage>-observed.npz` when the probe ends.
        self.observed: dict[str, np.ndarray] = {}

    def observe(self, name: str, value: Any) -> Any:
        """Record what the device gave (positions, a count, a code, logits' bits, keys) and return it. A copy
        is kept: a view of the KV cache would change with the next edit."""
        self.observed[name] = np.array(value)
        return value

    def write_observations(self) -> None:
        path = self.file_path(f"{self.stage}-observed.npz")
        if path is not None and self.observed:
            np.savez(path, allow_pickle=False, **self.observed)
            self.add_file(path)

    def progress(self, percent: float, text: str) -> None:
        start, end = self.share
        self.ctx.progress(start + (end - start) * percent / 100, f"{self.label}{text}")

    def finding(self, code: str, message: str) -> None:
        self.findings.append({"code": code, "message": message})
        self.log(f"FINDING {self.label}{code}: {message}")

    def calbin(self) -> Calbin:
        """The job's package, loaded; NotExercised when the job names none or it cannot be loaded."""
        if self.ctx.job.calbin is None:
            raise NotExercised("the job names no package")
        try:
            return self.ctx.load(self.ctx.job.calbin)
        except CalrtError as error:
            raise NotExercised(f"the package cannot be loaded: {error}") from error

    def package(self, role: str) -> str:
        """The path of an extra package the job names (`packages.<role>`)."""
        path = self.ctx.job.packages.get(role)
        if path is None:
            raise NotExercised(f"the job names no packages.{role}; the probe needs a second package")
        return path

    @property
    def verdict(self) -> str:
        exercised = not any(f["code"] == "not_exercised" for f in self.findings)
        return "pass" if exercised and self.checks and all(c["passed"] for c in self.checks) else "fail"

    def result(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "params": self.params,
            "verdict": self.verdict,
            "checks": self.checks,
            "metrics": self.metrics,
            "findings": self.findings,
        }


def run_probe(
    ctx: JobContext, spec: ProbeSpec, request: ProbeRequest, stage: str, share: tuple[float, float] = (0, 100)
) -> dict[str, Any]:
    """The probe's plan for this stage, after checking the package declares what the probe needs."""
    run = ProbeRun(ctx, spec, request, stage, share)
    try:
        calbin = run.calbin()
        missing = [f for f in spec.features if not calbin.declares(f)]
        if missing:
            declared = ", ".join(sorted(calbin.features))
            raise NotExercised(f"the package does not declare {', '.join(missing)} (it declares {declared})")
        if spec.requires is not None:
            spec.requires(run)
        spec.plan(stage).run(run)
    except NotExercised as error:
        run.finding("not_exercised", str(error))
    run.write_observations()
    return run.result()
