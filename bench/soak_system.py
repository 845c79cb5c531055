"""The whole system under a bounded mixed load: vendors upload and answer, PMs browse and promote, the workers
run the chains; then everything queued is drained and counted.

    DATABASE_URL=postgres://... REDIS_URL=redis://.../N SECRET_KEY=x \
        .venv/bin/python bench/soak_system.py [--seconds 120] [--json soak.json]

Set-up, all through the product's own commands and services: a database of its own (<DATABASE_URL's
name>_soak, dropped and created again; migrate; import_checklist), the Redis database of REDIS_URL emptied,
artifact storage and run directories in a temporary folder; N vendor organisations, each with a vendor
engineer and a token and questions put to it, and PM users with a password and a token; one tiny
decode-batch-8 calbin per vendor built with `python -m npu_sim build-calbin`, with its golden file beside it.

Processes, each in a process group of its own and stopped on exit (Ctrl-C and errors included): gunicorn on
a free port of 127.0.0.1 with gunicorn.conf.py (as docs/deploy.md runs it), Celery workers for the simulator
target's queue and the default queue (prefork, concurrency 1, the production lease and heartbeat), and Celery
beat (the sweeper every 10 s). Their logs stay in the work folder when something went wrong.

Traffic, for --seconds, over loopback only: each vendor thread makes a token of its own through the API,
then for each of its questions in turn uploads a new calbin version and goldens (tus in 256 KiB chunks, some
chunks with Upload-Checksum, some HEADs; goldens sometimes as one multipart request), answers — sometimes
first incompletely —, and follows the chain of its complete answer until every stage passed; a share of the
answers are replaced before their chain finished (their waiting runs become stale). PM threads log in through
the login form and browse the dashboard, the question list, the vendors' question pages and capability pages
(whole pages and the htmx partials the live pages poll), and ask the promotion gate for C0-C3 through the API;
the gate's refusals (409 "blocked") are expected and counted apart.

Then the drain: up to --drain-seconds for every queued and running run to end. Reported: requests served and
p50/p95/max per route pattern; errors (5xx, any other unexpected status, connection errors, wrong results,
chains that stopped on a stage); runs completed, lost (not final after the drain), duplicate and missing
verdicts; chains whose next stage was never queued, complete answers no chain checks; the simulator's share
of the workers' busy time; CPU seconds per process kind; the audit chain verified. Goals: 0 errors, 0 lost
runs, 0 duplicate verdicts. Exits 1 when a goal is missed.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120, help="traffic time")
    parser.add_argument("--drain-seconds", type=float, default=300, help="longest wait for queued runs to end")
    parser.add_argument("--vendors", type=int, default=3)
    parser.add_argument("--questions-per-vendor", type=int, default=2)
    parser.add_argument("--pms", type=int, default=2)
    parser.add_argument("--web-workers", type=int, default=4, help="gunicorn workers (gunicorn.conf.py)")
    parser.add_argument("--celery-workers", type=int, default=2, help="worker processes, concurrency 1 each")
    parser.add_argument("--supersede", type=float, default=0.15, help="share of answers replaced mid-chain")
    parser.add_argument("--max-requests", type=int, default=20_000, help="per client")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the database and the work folder")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        parser.error("set DATABASE_URL (PostgreSQL) and REDIS_URL: the soak runs the deployed system")
    return args


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    args = parse_args()
    # Also SIGINT: a shell starting this in the background would otherwise leave it ignored.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    base_url = os.environ["DATABASE_URL"]
    work = Path(tempfile.mkdtemp(prefix="calculet-soak-"))
    # Set before Django reads its settings: this process and every process it starts use the soak's own
    # database, artifact storage and run directories.
    split = urlsplit(base_url)
    soak_url = split._replace(path=split.path + "_soak").geturl()
    os.environ.update(
        {
            "DATABASE_URL": soak_url,
            "STORAGE_ROOT": str(work / "storage"),
            "CALCULET_DATA_DIR": str(work / "data"),
            "ACCEPTANCE_RUN_DIR": str(work / "runs"),
            "DEBUG": "0",
        }
    )
    (work / "runs").mkdir()

    import django

    django.setup()

    from _soak import processes, report, world
    from _soak.traffic import Http, PmClient, Recorder, VendorClient
    from django.db import connections

    from acceptance import stages
    from acceptance.models import Run
    from calculet.celery import app

    services: list[processes.Service] = []
    clients: list[threading.Thread] = []
    stop = threading.Event()
    goals = False
    try:
        started = time.monotonic()
        world.database_recreate(soak_url)
        world.database_prepare()
        with app.connection_for_write() as broker:
            broker.default_channel.client.flushdb()
        vendor_plans, pm_plans = world.seed(
            vendors=args.vendors, questions_per_vendor=args.questions_per_vendor, pms=args.pms, work=work
        )
        connections.close_all()
        print(f"database {urlsplit(soak_url).path[1:]} ready in {time.monotonic() - started:.0f} s; work folder {work}")

        env = dict(os.environ)
        port = processes.free_port()
        web = processes.start_gunicorn({**env, "LOG_LEVEL": "WARNING"}, work, port, args.web_workers)
        services.append(web)
        workers = [processes.start_worker(env, work, f"soak-sim-{n}") for n in range(1, args.celery_workers + 1)]
        services += workers
        beat = processes.start_beat(env, work)
        services.append(beat)
        base = f"http://127.0.0.1:{port}"
        processes.wait_http(f"{base}/healthz", web, timeout=120)
        wait_for_workers(workers, timeout=120)
        connections.close_all()
        print(f"gunicorn on {base}, {len(workers)} Celery workers and beat ready")

        load_before = os.getloadavg()
        cpu_before = cpu_snapshot(processes, web, workers, beat)
        machine_before = processes.machine_busy_seconds()
        recorder = Recorder()
        traffic_started = time.monotonic()
        deadline = traffic_started + args.seconds
        for number, plan in enumerate(vendor_plans, start=1):
            http = Http(base, recorder, stop, deadline, args.max_requests)
            clients.append(VendorClient(f"soak vendor {number}", plan, http, args.seed * 100 + number, args.supersede))
        for number, plan in enumerate(pm_plans, start=1):
            http = Http(base, recorder, stop, deadline, args.max_requests)
            clients.append(PmClient(f"soak PM {number}", plan, http, args.seed * 1000 + number))
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=max(1.0, deadline + 300 - time.monotonic()))
            if client.is_alive():
                recorder.fail("client", f"{client.name} still busy 300 s after the deadline")
        stop.set()
        traffic_seconds = time.monotonic() - traffic_started
        print(f"traffic ended after {traffic_seconds:.0f} s; {sum(map(len, recorder.latencies.values()))} requests")

        drain_started = time.monotonic()
        while time.monotonic() - drain_started < args.drain_seconds:
            active = Run.objects.filter(state__in=stages.ACTIVE_STATES).count()
            if not active:
                break
            time.sleep(1)
        drain_seconds = time.monotonic() - drain_started
        window = time.monotonic() - traffic_started
        cpu_after = cpu_snapshot(processes, web, workers, beat)
        machine = processes.machine_busy_seconds() - machine_before
        cpu = {name: round(cpu_after[name] - cpu_before[name], 1) for name in cpu_before}
        cpu["all of the above"] = round(sum(cpu.values()), 1)
        ours = cpu["all of the above"]
        cpu["simulator share of the above"] = round(cpu["simulator (runner subprocesses)"] / ours, 3) if ours else None
        cpu["whole machine (PostgreSQL, Redis, others)"] = round(machine, 1)
        figures = {
            "command": " ".join(["bench/soak_system.py", *sys.argv[1:]]),
            "setup": {
                "traffic_seconds": round(traffic_seconds, 1),
                "drain_seconds": round(drain_seconds, 1),
                "vendors": args.vendors,
                "questions_per_vendor": args.questions_per_vendor,
                "pms": args.pms,
                "gunicorn_workers": args.web_workers,
                "celery_workers": args.celery_workers,
                "cpus": os.cpu_count(),
                "load_before": [round(value, 2) for value in load_before],
                "load_after": [round(value, 2) for value in os.getloadavg()],
                "clients_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            },
            "requests": report.request_figures(recorder, traffic_seconds),
            "runs": report.run_figures(worker_count=len(workers), window_seconds=window),
            "data": report.data_figures(),
            "cpu_seconds": cpu,
            "server_errors_logged": [line for service in services for line in service.logged_errors()],
        }
        goals = report.goals_met(figures)
        figures["goals_met"] = goals
        print()
        print(report.render(figures))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
        dead = [service.name for service in services if not service.alive()]
        if dead:
            print(f"processes that died during the soak: {', '.join(dead)}; see their logs in {work}")
            goals = False
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=30)
        for service in reversed(services):
            service.stop(grace=20)
        connections.close_all()
        try:
            with app.connection_for_write() as broker:
                broker.default_channel.client.flushdb()
        except Exception as error:  # the figures matter more than a clean broker
            print(f"could not empty the Redis database: {error}")
        if not args.keep:
            world.database_drop(soak_url)
        if args.keep or not goals:
            print(f"logs{' and database' if args.keep else ''} kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if goals else 1


def wait_for_workers(workers, timeout: float) -> None:
    """Every worker has said it is ready, and the simulator target has a live heartbeat."""
    from acceptance.models import Target

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            if not worker.alive():
                raise RuntimeError(f"{worker.name} exited; see {worker.log_path}")
        ready = all(" ready." in worker.log_path.read_text(errors="replace") for worker in workers)
        if ready and Target.objects.filter(slug="simulator", health=Target.OK).exists():
            return
        time.sleep(0.5)
    raise RuntimeError(f"the workers were not ready within {timeout:.0f} s")


def cpu_snapshot(processes, web, workers, beat) -> dict[str, float]:
    """CPU seconds so far by kind of process. A Celery pool child's reaped children are its runner
    subprocesses: the simulator."""
    worker_times = [processes.cpu_seconds(worker.pid) for worker in workers]
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "web (gunicorn)": sum(processes.cpu_seconds(web.pid)),
        "workers (Celery, in-process stages)": sum(times[0] for times in worker_times),
        "simulator (runner subprocesses)": sum(times[1] for times in worker_times),
        "beat": sum(processes.cpu_seconds(beat.pid)),
        "clients and this script": own.ru_utime + own.ru_stime,
    }


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as interrupt:
        sys.exit(f"interrupted ({interrupt}); every process it started was stopped")
