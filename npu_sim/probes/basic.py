"""The probes every package can run: a target's health and the golden comparison."""

from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.stages import health
from npu_sim.stages.common import golden_steps, tolerances


def _health(run: ProbeRun) -> None:
    session = run.session()
    reference = run.ctx.golden(session.calbin)
    params = {"decode_steps": run.stage_params.get("decode_steps") or 2}
    health.routine(run, session, reference, tolerances(run.stage_params), golden_steps(params, reference))


HEALTH = ProbeSpec(
    "health",
    "A known-good package still loads, decodes and matches its golden: for target health checks.",
    generic.plans(health=StagePlan("load, a couple of decode steps, their golden comparison", _health)),
    metrics=(MetricSpec("tensors", "max_abs, max_rel, cosine, top1, topk per golden tensor"),),
)

GOLDEN = ProbeSpec(
    "golden",
    "The device's logits against the golden the job names: the vendor's file, or the package's own.",
    generic.plans(),
    capabilities=("golden-readback",),
    metrics=(MetricSpec("tensors", "per tensor: errors, cosine, top-k agreement, histogram, tolerance"),),
)

BASIC = [HEALTH, GOLDEN]
