"""`run_execute`: what the Celery task calls with a run's id. It claims the run, runs its stage while the
lease is renewed and the output streamed, and writes the one verdict of its attempt."""

import logging
import time

from acceptance import stages
from acceptance.models import Chain, Run
from acceptance.protocol import StageOutcome
from acceptance.services.checks import stage_artifact, stage_claim
from acceptance.services.inputs import AnswerInputs, answer_inputs
from acceptance.services.runs.claiming import run_claim_when_free
from acceptance.services.runs.finishing import run_finish
from acceptance.services.runs.reporting import LeaseKeeper, RunReporter
from acceptance.services.runs.running import runner_execute

logger = logging.getLogger(__name__)


def run_execute(run_id: int, *, worker: str) -> None:
    """Execute a run once; safe to call again for the same run (a second call finds it claimed or finished)."""
    run = run_claim_when_free(run_id, worker)
    if run is None:
        return
    reporter = RunReporter(run)
    keeper = LeaseKeeper(reporter)
    keeper.start()
    inputs = None
    try:
        if run.stage == stages.HEALTH:
            outcome = runner_execute(run, reporter)
        else:
            if run.answer is None or run.chain_id is None:
                raise ValueError(f"a {run.stage} run belongs to a chain and an answer")
            inputs = answer_inputs(run.answer)
            outcome = _execute_stage(run, reporter, inputs, run.chain_id)
    except Exception as error:  # our own failure must still end the run with a verdict that says so
        logger.exception("run %s failed inside the worker", run_id)
        outcome = StageOutcome(stages.ERROR, f"internal error in the worker: {error.__class__.__name__}: {error}")
    finally:
        keeper.stop()
    if reporter.lost:
        logger.warning("run %s attempt %s lost its lease; its outcome is dropped", run_id, run.attempt)
        return
    reporter.post_started = time.monotonic()
    run_finish(run, worker=worker, outcome=outcome, reporter=reporter, inputs=inputs)


def _execute_stage(run: Run, reporter: RunReporter, inputs: AnswerInputs, chain_id: int) -> StageOutcome:
    if run.stage in stages.RUNNER_STAGES:
        return runner_execute(run, reporter, inputs)
    chain = Chain.objects.select_related("question", "capability", "target").get(pk=chain_id)
    if run.stage == stages.CLAIM:
        return stage_claim(chain, inputs)
    return stage_artifact(chain, inputs, run.target, reporter.note)
