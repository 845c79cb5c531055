"""kill -9 a worker in the middle of a run, again and again, and count lost runs and duplicate verdicts.

    DATABASE_URL=postgres://... REDIS_URL=redis://... SECRET_KEY=x \
        .venv/bin/python bench/acceptance_kill.py [--repeat 20]

Each round submits a complete tiny decode-batch-8 answer whose soak is long enough to be killed in (192
requests at concurrency 2), waits until the soak's runner is running, then kill -9's either the worker's pool
child (the worker's main process survives and forks a new child) or the whole worker (its process group; a
new worker is started at once, as a supervisor would). The production timings are used: a 15 s lease renewed
every 2 s, and a sweep every 10 s by a thread standing in for Celery beat. Goals: 0 lost runs, 0 duplicate
verdicts, each run finished within 30 s plus its own run time after the kill.
"""

import argparse
import statistics
import time

from acceptance_setup import Vendor, bench_database, kill_mid_run, run_ended, simulator_worker, soak_running, sweeping

from acceptance import stages
from acceptance.models import RunResult

LONG_SOAK = {"soak_requests": 192, "soak_concurrency": 4}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sweep-interval", type=float, default=10)
    args = parser.parse_args()
    rows = []
    with bench_database("kill"):
        vendor = Vendor()
        worker = simulator_worker("kill-0", vendor.tmp)
        try:
            with sweeping(args.sweep_interval):
                for round_number in range(args.repeat):
                    mode = "pool child" if round_number % 2 == 0 else "whole worker"
                    answer = vendor.answer(thresholds=LONG_SOAK)
                    running = soak_running(answer, timeout=180)
                    if running is None:
                        raise SystemExit(f"round {round_number}: the soak never started; see {worker.log_path}")
                    killed_at = time.time()
                    worker = kill_mid_run(
                        worker, whole_worker=mode == "whole worker", replacement=f"kill-{round_number + 1}"
                    )
                    finished = run_ended(running, timeout=240)
                    verdicts = RunResult.objects.filter(run=running).count()
                    if finished is None:
                        rows.append((mode, None, None, None, verdicts))
                        print(f"round {round_number:2d} {mode:12s}: LOST (no verdict within 240 s)", flush=True)
                        continue
                    own = finished.result.get("sandbox", {}).get("elapsed_seconds", 0.0)
                    after_kill = finished.finished_at.timestamp() - killed_at
                    rows.append((mode, finished.verdict, after_kill, after_kill - own, verdicts))
                    print(
                        f"round {round_number:2d} {mode:12s}: verdict {finished.verdict} after {after_kill:5.1f} s "
                        f"(runner {own:4.1f} s, overhead {after_kill - own:4.1f} s), attempt {finished.attempt}, "
                        f"verdicts {verdicts}",
                        flush=True,
                    )
        finally:
            worker.stop()
    lost = sum(1 for row in rows if row[1] is None)
    duplicates = sum(1 for row in rows if row[4] > 1)
    not_passed = sum(1 for row in rows if row[1] not in (None, stages.PASS))
    print(
        f"rounds: {len(rows)}; lost runs: {lost} (goal 0); duplicate verdicts: {duplicates} (goal 0); "
        f"verdicts other than pass: {not_passed}"
    )
    for mode in ("pool child", "whole worker"):
        overheads = [row[3] for row in rows if row[0] == mode and row[3] is not None]
        if overheads:
            median = statistics.median(overheads)
            print(
                f"{mode:12s}: time from kill to verdict beyond the run's own time: median {median:.1f} s, "
                f"max {max(overheads):.1f} s (goal <= 30 s)"
            )


if __name__ == "__main__":
    main()
