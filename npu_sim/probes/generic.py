"""The stage routines with a probe's feature in use: what a probe runs at a stage where it has nothing of
its own to add (docs/runner-protocol.md, "Probes")."""

from typing import Any

from npu_sim.probes.spec import StagePlan
from npu_sim.protocol.context import Recorder, Session
from npu_sim.sampling import SamplingParams
from npu_sim.stages import failure, golden, integration, isolated, soak
from npu_sim.stages.common import golden_steps, tolerances


def exercise(run: Recorder, session: Session | None = None, sampling: SamplingParams | None = None) -> None:
    isolated.routine(run, session or run.session(), run.stage_params.get("decode_steps") or 4, sampling)


def compare_with_golden(run: Recorder, session: Session | None = None) -> None:
    session = session or run.session()
    reference = run.ctx.golden(session.calbin)
    limits = tolerances(run.stage_params)
    golden.routine(run, session, reference, limits, golden_steps(run.stage_params, reference))


def inject_faults(run: Recorder, session: Session | None = None) -> None:
    session = session or run.session()
    reference = run.ctx.golden(session.calbin)
    params = stage_params(run, failure.PARAMS)
    failure.routine(
        run, session, reference, tolerances(params), golden_steps(params, reference), failure.scenarios(params)
    )


def stage_params(run: Recorder, declared: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The job's parameters for a stage's routine, its defaults where the job's stage has none."""
    return {k: run.stage_params.get(k, spec.default) for k, spec in declared.items()} | overrides


def integrate(
    run: Recorder,
    session: Session | None = None,
    sampling: SamplingParams | None = None,
    retries: int = 0,
    **overrides: Any,
) -> None:
    params = stage_params(run, integration.PARAMS, **overrides)
    integration.routine(run, session or run.session(), params, sampling, retries)


def load_and_soak(
    run: Recorder,
    session: Session | None = None,
    sampling: SamplingParams | None = None,
    retries: int = 0,
    **overrides: Any,
) -> None:
    params = stage_params(run, soak.PARAMS, **overrides)
    session = session or run.session()
    golden = run.ctx.golden(session.calbin) if params["golden_samples"] else None
    soak.routine(run, session, params, sampling, retries, golden)


def plans(**own: StagePlan) -> dict[str, StagePlan]:
    """A probe's plans: its own where it has them, the generic routine with its package elsewhere."""
    generic = {
        "runner": StagePlan("the minimal example on the package (prefill and greedy decode steps)", exercise),
        "golden": StagePlan("the golden comparison, against the job's golden", compare_with_golden),
        "failure": StagePlan(
            "each fault kind injected, its code checked, the documented recovery applied", inject_faults
        ),
        "integration": StagePlan("the serving loop, every sequence checked against its replay alone", integrate),
        "soak": StagePlan("requests at the job's concurrency, with the section-11 breakdown", load_and_soak),
    }
    return generic | own
