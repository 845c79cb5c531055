"""Reads of chains, runs, targets and promotion attempts. The query count of each is independent of how many
runs are stored: the latest run of each stage is found with one query."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max, Q, QuerySet, Subquery

from acceptance import stages
from acceptance.models import Chain, PromotionAttempt, Run, Target
from acceptance.policy import AnswerFacts, ChainFacts

# What a list or a progress bar needs; the full log and result stay in the database until asked for.
RUN_SUMMARY_DEFER = ["log", "result", "inputs", "params", "findings"]


def latest_runs(chain_ids: list[int]) -> dict[tuple[int, str], Run]:
    """The newest run of each (chain, stage), in one query."""
    if not chain_ids:
        return {}
    newest = (
        Run.objects.filter(chain_id__in=chain_ids)
        .values("chain_id", "stage")
        .annotate(newest=Max("id"))
        .values("newest")
    )
    runs = Run.objects.filter(pk__in=Subquery(newest)).defer(*RUN_SUMMARY_DEFER)
    return {(run.chain_id, run.stage): run for run in runs}


def _stage_rows(chain: Chain, latest: dict[tuple[int, str], Run]) -> list[tuple[str, str, Run | None]]:
    rows = []
    for stage in stages.CHAIN_STAGES:
        run = latest.get((chain.pk, stage))
        state = stages.stage_state(
            run.state if run else None, run.inputs_digest if run else None, chain.stage_digests.get(stage, "")
        )
        rows.append((stage, state, run))
    return rows


def chain_stages(chain: Chain) -> list[tuple[str, str, Run | None]]:
    """The seven stages in order, each with its state on the chain's current inputs and its latest run."""
    return _stage_rows(chain, latest_runs([chain.pk]))


def chains_stages(chains: list[Chain]) -> dict[int, list[tuple[str, str, Run | None]]]:
    """`chain_stages` for many chains at once, in one query."""
    latest = latest_runs([chain.pk for chain in chains])
    return {chain.pk: _stage_rows(chain, latest) for chain in chains}


def run_counts_as_current(chain: Chain, stage: str, run: Run | None) -> bool:
    return run is not None and run.inputs_digest == chain.stage_digests.get(stage) and run.state != stages.STALE


def chains_for_question(question) -> list[Chain]:
    return list(
        Chain.objects.filter(question=question)
        .select_related("target", "capability", "answer")
        .order_by("capability_id", "target__kind", "target__slug")
    )


def runs_in_progress() -> QuerySet[Run]:
    """Runs waiting for their target, queued or running, oldest first, with what a progress bar shows."""
    return (
        Run.objects.filter(state__in=stages.ACTIVE_STATES)
        .select_related("target", "chain__question", "chain__capability")
        .defer(*RUN_SUMMARY_DEFER)
        .order_by("id")
    )


def runs_stuck(now: datetime) -> QuerySet[Run]:
    """Runs that should be moving and are not: queued but not taken up after twice the sweeper's re-send
    delay, or running with an expired lease (their worker is gone and the sweeper has not re-sent them)."""
    waited = now - timedelta(seconds=2 * settings.ACCEPTANCE_QUEUED_RESEND_AFTER)
    return (
        Run.objects.filter(
            Q(state=stages.QUEUED, created_at__lt=waited) | Q(state=stages.RUNNING, lease_expires_at__lt=now)
        )
        .select_related("target", "chain__question")
        .defer(*RUN_SUMMARY_DEFER)
        .order_by("id")
    )


def targets_unhealthy() -> QuerySet[Target]:
    """Targets that will not take runs now: degraded, offline or in maintenance."""
    return Target.objects.filter(~Q(health=Target.OK) | Q(maintenance=True)).order_by("slug")


def promotions_blocked_since(dt: datetime) -> QuerySet[PromotionAttempt]:
    return (
        PromotionAttempt.objects.filter(allowed=False, created_at__gte=dt)
        .select_related("capability", "actor")
        .order_by("-id")
    )


def capability_gate_facts(capability) -> list[AnswerFacts]:
    """What the promotion gate needs about a capability: for each answer its chains currently check (newest
    answer first), every chain's stage states on its current inputs. Three queries whatever the run count."""
    chains = list(
        Chain.objects.filter(capability=capability)
        .select_related("target", "answer")
        .order_by("-answer__created_at", "-answer_id", "id")
    )
    latest = latest_runs([chain.pk for chain in chains])
    by_answer: dict[int, AnswerFacts] = {}
    for chain in chains:
        facts = by_answer.setdefault(chain.answer_id, AnswerFacts(answer_id=chain.answer_id, chains=[]))
        rows = _stage_rows(chain, latest)
        facts.chains.append(
            ChainFacts(
                chain_id=chain.pk,
                target_name=chain.target.slug,
                target_kind=chain.target.kind,
                stage_states={stage: state for stage, state, _ in rows},
                stage_run_ids={stage: run.pk for stage, _, run in rows if run is not None},
            )
        )
    return list(by_answer.values())
