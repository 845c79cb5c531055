"""What a soak found: the requests as the clients measured them, and the runs, chains, verdicts, promotions and
audit rows as the database holds them after the drain."""

import math
from collections import Counter

from django.db.models import Count

from _soak.traffic import Recorder
from acceptance import stages
from acceptance.models import Chain, PromotionAttempt, Run
from acceptance.selectors import chains_stages
from calculet.audit import audit_verify
from vendor.models import Answer, Artifact


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `share` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def request_figures(recorder: Recorder, seconds: float) -> dict:
    routes = []
    for route, values in sorted(recorder.latencies.items(), key=lambda item: (-len(item[1]), item[0])):
        routes.append(
            {
                "route": route,
                "requests": len(values),
                "p50_ms": round(percentile(values, 0.50), 1),
                "p95_ms": round(percentile(values, 0.95), 1),
                "max_ms": round(max(values), 1),
                "statuses": {str(status): count for status, count in sorted(recorder.statuses[route].items(), key=str)},
            }
        )
    served = sum(len(values) for values in recorder.latencies.values())
    return {
        "served": served,
        "per_second": round(served / seconds, 1),
        "errors": sum(recorder.failures.values()),
        "errors_by_kind": dict(recorder.failures),
        "error_examples": list(recorder.examples),
        "blocked_promotions_409": recorder.blocked,
        "routes": routes,
        "events": dict(sorted(recorder.events.items())),
        "chain_turnaround_seen_by_vendors_s": _spread(recorder.turnarounds),
    }


def _spread(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(percentile(values, 0.50), 1),
        "p95": round(percentile(values, 0.95), 1),
        "max": round(max(values), 1),
    }


def run_figures(*, worker_count: int, window_seconds: float) -> dict:
    runs = list(Run.objects.annotate(verdicts=Count("results")).defer("log", "log_tail", "metrics", "findings"))
    chain_runs = [run for run in runs if run.stage != stages.HEALTH]
    by_state = Counter(run.state for run in chain_runs)
    finished_with_verdict = [run for run in runs if run.state in (stages.PASSED, stages.FAILED, stages.ERROR)]
    active = [run for run in runs if run.state in stages.ACTIVE_STATES]

    chains = list(Chain.objects.select_related("target"))
    stage_rows = chains_stages(chains)
    positions = Counter()
    never_queued = []
    for chain in chains:
        rows = stage_rows[chain.pk]
        action, stage = stages.chain_next(rows)
        positions[action] += 1
        if action == stages.RUN:
            never_queued.append(f"chain {chain.pk}: {stage}")

    newest_complete = {}
    for answer in Answer.objects.filter(complete=True).order_by("id"):
        newest_complete[(answer.question_id, answer.capability_id)] = answer.pk
    chain_answers = {(chain.question_id, chain.capability_id): chain.answer_id for chain in chains}
    not_moved = [
        f"question {question}, capability {capability}: newest complete answer {answer}, "
        f"the chain checks {chain_answers.get((question, capability))}"
        for (question, capability), answer in newest_complete.items()
        if chain_answers.get((question, capability)) != answer
    ]

    runner_seconds = 0.0
    busy_seconds = 0.0
    waits: dict[str, list[float]] = {}
    for run in finished_with_verdict:
        if run.started_at is None or run.finished_at is None:
            continue
        busy_seconds += (run.finished_at - run.started_at).total_seconds()
        runner_seconds += run.result.get("sandbox", {}).get("elapsed_seconds", 0.0)
        waits.setdefault(run.stage, []).append((run.started_at - run.created_at).total_seconds())
    capacity = worker_count * window_seconds
    return {
        "runs": len(chain_runs),
        "runs_by_state": dict(sorted(by_state.items())),
        "runs_completed": sum(by_state[state] for state in (stages.PASSED, stages.FAILED, stages.ERROR)),
        # Every package the vendors send is good: a failed or errored stage is a fault of the system.
        "runs_failed_or_error": by_state[stages.FAILED] + by_state[stages.ERROR],
        "runs_failed_or_error_detail": [
            f"run {run.pk} {run.stage} {run.state}: {run.reason[:300]}"
            for run in chain_runs
            if run.state in (stages.FAILED, stages.ERROR)
        ][:20],
        "runs_by_stage_passed": dict(Counter(run.stage for run in chain_runs if run.state == stages.PASSED)),
        "health_runs": len(runs) - len(chain_runs),
        "runs_lost": len(active),
        "runs_lost_detail": [f"run {run.pk} {run.stage} {run.state} attempt {run.attempt}" for run in active[:20]],
        "duplicate_verdicts": sum(1 for run in runs if run.verdicts > 1),
        "missing_verdicts": sum(1 for run in finished_with_verdict if run.verdicts == 0),
        "runs_attempted_more_than_once": sum(1 for run in runs if run.attempt > 1),
        "chains": len(chains),
        "chains_every_stage_passed": positions[stages.DONE],
        "chains_stopped": positions[stages.STOPPED],
        "chains_still_waiting": positions[stages.WAIT],
        "chains_next_stage_never_queued": len(never_queued),
        "chains_next_stage_never_queued_detail": never_queued[:20],
        "complete_answers_no_chain_checks": len(not_moved),
        "complete_answers_no_chain_checks_detail": not_moved[:20],
        "queue_wait_s": {stage: _spread(waits[stage]) for stage in stages.CHAIN_STAGES if stage in waits},
        "worker_busy_s": round(busy_seconds, 1),
        "worker_capacity_s": round(capacity, 1),
        "worker_busy_share": round(busy_seconds / capacity, 3) if capacity else None,
        "simulator_s": round(runner_seconds, 1),
        "simulator_share_of_busy": round(runner_seconds / busy_seconds, 3) if busy_seconds else None,
    }


def data_figures() -> dict:
    return {
        "answers": dict(
            Counter("complete" if done else "incomplete" for done in Answer.objects.values_list("complete", flat=True))
        ),
        "artifacts": dict(Counter(f"{kind} {state}" for kind, state in Artifact.objects.values_list("kind", "state"))),
        "promotions_allowed": PromotionAttempt.objects.filter(allowed=True).count(),
        "promotions_blocked_by_reason": dict(
            Counter(
                reason["code"]
                for reasons in PromotionAttempt.objects.filter(allowed=False).values_list("reasons", flat=True)
                for reason in reasons
            )
        ),
        "audit_problems": audit_verify(),
    }


def _line(label: str, value) -> str:
    return f"  {label:<44}{value}"


def render(figures: dict) -> str:
    setup, requests, runs, data, cpu = (
        figures["setup"],
        figures["requests"],
        figures["runs"],
        figures["data"],
        figures["cpu_seconds"],
    )
    out = [
        f"whole-system soak: {setup['traffic_seconds']:.0f} s of traffic + {setup['drain_seconds']:.0f} s drain; "
        f"{setup['vendors']} vendors x {setup['questions_per_vendor']} questions, {setup['pms']} PMs; gunicorn "
        f"{setup['gunicorn_workers']} sync workers; {setup['celery_workers']} Celery workers (prefork, concurrency 1, "
        "queues simulator+default) + beat; PostgreSQL, Redis",
        f"load average before {setup['load_before']}, after {setup['load_after']}; {setup['cpus']} CPUs; "
        f"clients' peak RSS {setup['clients_peak_rss_mib']} MiB",
        "",
        "requests",
        _line("served", f"{requests['served']} ({requests['per_second']}/s)"),
        _line("errors (5xx, unexpected status, ...)", f"{requests['errors']} {requests['errors_by_kind'] or ''}"),
        _line("blocked promotions (409, expected)", requests["blocked_promotions_409"]),
        "",
        f"  {'route':<58}{'n':>6}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}  statuses",
    ]
    for row in requests["routes"]:
        statuses = " ".join(f"{status}:{count}" for status, count in row["statuses"].items())
        out.append(
            f"  {row['route']:<58}{row['requests']:>6}{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}{row['max_ms']:>9.1f}"
            f"  {statuses}"
        )
    out += [
        "",
        "what the clients did",
        *(_line(name, count) for name, count in requests["events"].items()),
        _line("chain turnaround seen by vendors (s)", requests["chain_turnaround_seen_by_vendors_s"]),
        "",
        "runs and chains (database, after the drain)",
        _line("chain runs", f"{runs['runs']} {runs['runs_by_state']}"),
        _line("runs completed (a verdict)", runs["runs_completed"]),
        _line("runs failed or error (all packages are good)", runs["runs_failed_or_error"]),
        _line("runs lost (not final after the drain)", runs["runs_lost"]),
        _line("duplicate verdicts (runs with > 1 result)", runs["duplicate_verdicts"]),
        _line("missing verdicts (finished, no result)", runs["missing_verdicts"]),
        _line("runs attempted more than once", runs["runs_attempted_more_than_once"]),
        _line("health runs", runs["health_runs"]),
        _line(
            "chains",
            f"{runs['chains']}: every stage passed {runs['chains_every_stage_passed']}, stopped "
            f"{runs['chains_stopped']}, still waiting {runs['chains_still_waiting']}",
        ),
        _line("chains whose next stage was never queued", runs["chains_next_stage_never_queued"]),
        _line("complete answers no chain checks", runs["complete_answers_no_chain_checks"]),
        *(_line(f"queue wait {stage} (s)", spread) for stage, spread in runs["queue_wait_s"].items()),
        _line(
            "worker busy / capacity",
            f"{runs['worker_busy_s']} s / {runs['worker_capacity_s']} s = {runs['worker_busy_share']}",
        ),
        _line(
            "simulator (runner subprocesses) / busy",
            f"{runs['simulator_s']} s / {runs['worker_busy_s']} s = {runs['simulator_share_of_busy']}",
        ),
        "",
        "CPU seconds during traffic + drain",
        *(_line(name, value) for name, value in cpu.items()),
        "",
        "data",
        _line("answers", data["answers"]),
        _line("artifacts", data["artifacts"]),
        _line("promotions allowed", data["promotions_allowed"]),
        _line("promotions blocked, by reason", data["promotions_blocked_by_reason"]),
        _line("audit chain", "intact" if not data["audit_problems"] else f"{len(data['audit_problems'])} problems"),
        "",
        _line("ERROR lines in the servers' logs", len(figures["server_errors_logged"])),
    ]
    details = (
        requests["error_examples"]
        + runs["runs_failed_or_error_detail"]
        + runs["runs_lost_detail"]
        + runs["chains_next_stage_never_queued_detail"]
        + runs["complete_answers_no_chain_checks_detail"]
        + data["audit_problems"][:10]
        + figures["server_errors_logged"][:10]
    )
    if details:
        out += ["", "details", *(f"  {line}" for line in details)]
    verdict = "met" if figures["goals_met"] else "NOT MET"
    out += ["", f"goals: 0 errors (clients and server logs), 0 lost runs, 0 duplicate verdicts -> {verdict}"]
    return "\n".join(out)


def goals_met(figures: dict) -> bool:
    runs = figures["runs"]
    return (
        figures["requests"]["errors"] == 0
        and runs["runs_failed_or_error"] == 0
        and runs["runs_lost"] == 0
        and runs["chains_next_stage_never_queued"] == 0
        and runs["complete_answers_no_chain_checks"] == 0
        and runs["duplicate_verdicts"] == 0
        and runs["missing_verdicts"] == 0
        and not figures["data"]["audit_problems"]
        and not figures["server_errors_logged"]
    )
