"""Chain turnaround on the simulator: from a complete answer's commit to the soak verdict, on one real
Celery worker (prefork, concurrency 1), with the orchestration overhead as a ratio of the runners' own time.

    DATABASE_URL=postgres://... REDIS_URL=redis://... SECRET_KEY=x .venv/bin/python bench/acceptance_chain.py

Each answer is a complete tiny decode-batch-8 answer with the default soak (acceptance.limits.DEFAULT_SOAK).
"Runners' own time" is the wall time of the five runner subprocesses (runner, golden, failure, integration,
soak) as the sandbox measured it; the claim and artifact stages are checks the worker does itself, so their
time counts as orchestration here. Goal: turnaround / runners' time <= 1.2.
"""

import statistics
import sys
import time

from acceptance_setup import ROOT, Vendor, bench_database

from acceptance import stages
from acceptance.models import Chain, Run
from tests.acceptance.workers import Worker

REPEAT = 5


def main() -> None:
    with bench_database("chain"):
        vendor = Vendor()
        log_dir = vendor.tmp
        worker = Worker.celery("simulator", "bench-sim", log_dir)
        try:
            rows = []
            waits: dict[str, list[tuple[float, float]]] = {}
            for _ in range(REPEAT + 1):
                started = time.time()
                answer = vendor.answer(thresholds={})  # the documented default soak
                while not Run.objects.filter(answer=answer, stage=stages.SOAK, state=stages.PASSED).exists():
                    if Run.objects.filter(answer=answer, state__in=[stages.FAILED, stages.ERROR]).exists():
                        sys.exit(f"a stage did not pass; see {worker.log_path}")
                    time.sleep(0.05)
                chain = Chain.objects.get(answer=answer, target__slug="simulator")
                runs = {run.stage: run for run in chain.runs.all()}
                turnaround = runs[stages.SOAK].finished_at.timestamp() - started
                runner_time = sum(runs[s].result["sandbox"]["elapsed_seconds"] for s in stages.RUNNER_STAGES)
                checks = sum((runs[s].finished_at - runs[s].started_at).total_seconds() for s in stages.SERVICE_STAGES)
                rows.append((turnaround, runner_time, checks))
                soak_params = runs[stages.SOAK].params
                for stage, run in runs.items():
                    in_runner = run.result.get("sandbox", {}).get("elapsed_seconds", 0)
                    waits.setdefault(stage, []).append(
                        (
                            (run.started_at - run.created_at).total_seconds(),
                            (run.finished_at - run.started_at).total_seconds() - in_runner,
                        )
                    )
            rows = rows[1:]  # the first chain pays for the worker's start
        finally:
            worker.stop()
    turnaround = statistics.median(r[0] for r in rows)
    runner_time = statistics.median(r[1] for r in rows)
    checks = statistics.median(r[2] for r in rows)
    print(f"chains measured: {len(rows)} (after one warm-up), worker: prefork, concurrency 1 ({ROOT.name})")
    print(f"turnaround, answer committed -> soak verdict: median {turnaround:.2f} s")
    print(f"runners' own time (5 runner subprocesses):    median {runner_time:.2f} s")
    print(f"claim + artifact checks in the worker:        median {checks:.2f} s")
    print(f"overhead ratio turnaround / runners' time:    {turnaround / runner_time:.2f}x (goal <= 1.2x)")
    print(f"soak parameters: {soak_params}")
    print("per stage, median ms: queued->started (broker and claim), in the worker beyond the runner subprocess")
    for stage in stages.CHAIN_STAGES:
        pairs = waits[stage][1:]
        queued = statistics.median(p[0] for p in pairs) * 1000
        extra = statistics.median(p[1] for p in pairs) * 1000
        print(f"  {stage:<12} {queued:7.1f} {extra:7.1f}")
    print(
        "per chain (turnaround s, runners s, ratio): "
        + ", ".join(f"({t:.2f}, {r:.2f}, {t / r:.2f})" for t, r, _ in rows)
    )


if __name__ == "__main__":
    main()
