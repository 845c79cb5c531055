"""kill -9 a worker in the middle of a run while 30 runs wait behind it, and time kill → verdict.

    DATABASE_URL=postgres://... REDIS_URL=redis://... SECRET_KEY=x \
        .venv/bin/python bench/acceptance_kill_backlog.py [--repeat 3] [--backlog 30] [--first whole-worker]

Each round submits a complete tiny decode-batch-8 answer whose soak is long enough to be killed in, waits until
its soak is running on the one worker (prefork, concurrency 1), then submits `--backlog` more answers to other
questions, so that many runs are queued on the simulator's queue behind it (and each queues its chain's next
stage as it passes, so the backlog lasts). Then it kill -9's the worker's pool child, or the whole worker (a
new one is started at once, as a supervisor would), alternately, starting with `--first`. Production timings:
a 15 s lease renewed every 2 s, a sweep every 10 s by a thread standing in for Celery beat. Every answer is to
a question of its own and there are 99 question codes, so (backlog + 1) × repeat stays within 99.

A run sent again after its worker was lost goes to the front of its target's queue, so it waits only for the
run the worker is already running when the re-send arrives. The figure is kill → verdict, less the run's own
time and less the rest of the run that was already running when it was sent again; goal ≤ 30 s. Also printed:
how many runs the worker started between the kill (or the sweeper's re-send) and the killed run's new
attempt — the backlog it worked through while the dead attempt's lease ran out.
"""

import argparse
import statistics
import time
from datetime import UTC, datetime

from acceptance_setup import Vendor, bench_database, kill_mid_run, run_ended, simulator_worker, soak_running, sweeping

from acceptance import stages
from acceptance.models import Run

# Long enough (about a minute here) to still be running once the backlog is submitted; within the soak limits
# an answer may ask for (`acceptance.limits.SOAK_LIMITS`).
LONG_SOAK = {"soak_requests": 512, "soak_output_tokens": 48, "soak_concurrency": 4}
MODES = ("pool-child", "whole-worker")


def _resent_at(run: Run, killed_at: float) -> float:
    """When the killed run was sent again: its new attempt's claim is the latest bound; the sweeper writes
    `sent_at` as it re-sends."""
    return max(run.sent_at.timestamp(), killed_at)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=30)
    parser.add_argument("--first", choices=MODES, default=MODES[0])
    parser.add_argument("--sweep-interval", type=float, default=10)
    args = parser.parse_args()
    if (args.backlog + 1) * args.repeat > 99:
        parser.error("every answer takes a question of its own, V01-V99: lower --repeat or --backlog")
    modes = MODES if args.first == MODES[0] else MODES[::-1]
    rows = []
    with bench_database("kill_backlog"):
        vendor = Vendor()
        worker = simulator_worker("backlog-0", vendor.tmp)
        try:
            with sweeping(args.sweep_interval):
                for round_number in range(args.repeat):
                    mode = modes[round_number % 2]
                    answer = vendor.answer(thresholds=LONG_SOAK)
                    running = soak_running(answer, timeout=600)
                    if running is None:
                        raise SystemExit(f"round {round_number}: the soak never started; see {worker.log_path}")
                    for _ in range(args.backlog):
                        vendor.answer()
                    queued = Run.objects.filter(target=running.target, state=stages.QUEUED).count()
                    if not Run.objects.filter(pk=running.pk, state=stages.RUNNING, attempt=1).exists():
                        raise SystemExit(f"round {round_number}: the soak ended before the kill; make it longer")
                    killed_at = time.time()
                    worker = kill_mid_run(
                        worker, whole_worker=mode == "whole-worker", replacement=f"backlog-{round_number + 1}"
                    )
                    finished = run_ended(running, timeout=600)
                    if finished is None:
                        rows.append((mode, None))
                        print(f"round {round_number} {mode:12s}: LOST (no verdict within 600 s)", flush=True)
                        continue
                    resent = _resent_at(finished, killed_at)
                    resent_time = datetime.fromtimestamp(resent, UTC)
                    restarted = finished.started_at.timestamp()
                    others = Run.objects.exclude(pk=finished.pk).filter(target=finished.target)
                    ahead = others.filter(started_at__gt=resent_time, started_at__lt=finished.started_at).count()
                    already = [
                        run.finished_at.timestamp() - resent
                        for run in others.filter(started_at__lte=resent_time, finished_at__gt=resent_time)
                    ]
                    own = finished.result.get("sandbox", {}).get("elapsed_seconds", 0.0)
                    after_kill = finished.finished_at.timestamp() - killed_at
                    figure = after_kill - own - sum(already)
                    rows.append((mode, figure))
                    print(
                        f"round {round_number} {mode:12s}: {queued} runs queued at the kill; re-sent "
                        f"{resent - killed_at:4.1f} s after it, new attempt {restarted - resent:4.1f} s after that, "
                        f"{ahead} run(s) started in between; verdict {finished.verdict} (attempt {finished.attempt}) "
                        f"{after_kill:5.1f} s after the kill = runner {own:4.1f} s + already running "
                        f"{sum(already):4.1f} s + {figure:4.1f} s",
                        flush=True,
                    )
        finally:
            worker.stop()
    for mode in MODES:
        figures = [row[1] for row in rows if row[0] == mode and row[1] is not None]
        lost = sum(1 for row in rows if row[0] == mode and row[1] is None)
        if figures:
            print(
                f"{mode:12s}: kill -> verdict beyond the run's own time and the runs already running: "
                f"median {statistics.median(figures):.1f} s, max {max(figures):.1f} s (goal <= 30 s); lost {lost}"
            )
        elif lost:
            print(f"{mode:12s}: lost {lost} (no verdict within 600 s)")


if __name__ == "__main__":
    main()
