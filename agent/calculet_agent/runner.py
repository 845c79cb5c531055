"""One claimed run on this host: its inputs from the cache, the job written, the runner run in the sandbox
while a thread renews the lease and sends the output, and how it all ended, for the server to judge."""

import base64
import functools
import json
import logging
import shlex
import shutil
import tempfile
import threading
import time
from pathlib import Path

from calculet_agent.cache import Cache
from calculet_agent.client import Client, RefusedError, UnreachableError
from calculet_agent.sandbox import Limits, Outcome, run_sandboxed, scrubbed_environment

logger = logging.getLogger(__name__)

WORKDIR = "{workdir}"
RESULT_MAX_BYTES = 16 * 1024**2
MEASUREMENT_MAX_BYTES = 64 * 1024**2


def _placed(value, workdir: Path):
    """The job with its WORKDIR placeholders naming this run's working directory."""
    if isinstance(value, str):
        return value.replace(WORKDIR, str(workdir))
    if isinstance(value, list):
        return [_placed(item, workdir) for item in value]
    if isinstance(value, dict):
        return {key: _placed(item, workdir) for key, item in value.items()}
    return value


class Reporter(threading.Thread):
    """Sends the run's output in numbered chunks with each lease renewal; a chunk sent again after a cut
    connection is written once. `lost` once the server says the attempt no longer holds the run."""

    def __init__(self, client: Client, run: int, run_token: str, every_seconds: float):
        super().__init__(name=f"report-run-{run}", daemon=True)
        self.client, self.run_id, self.run_token, self.every = client, run, run_token, every_seconds
        self.lock = threading.Lock()
        self.unsent: list[dict] = []
        self.next_index = 0
        self.stopped = threading.Event()
        self.lost: RefusedError | None = None

    def output(self, stream: str, chunk: bytes) -> None:
        with self.lock:
            self.unsent.append({"index": self.next_index, "stream": stream, "text": chunk.decode(errors="replace")})
            self.next_index += 1

    def note(self, message: str) -> None:
        self.output("stdout", f"[calculet-agent] {message}\n".encode())

    def take(self) -> list[dict]:
        with self.lock:
            return list(self.unsent)

    def _sent(self, chunks: list[dict]) -> None:
        sent = {chunk["index"] for chunk in chunks}
        with self.lock:
            self.unsent = [chunk for chunk in self.unsent if chunk["index"] not in sent]

    def beat(self) -> None:
        chunks = self.take()
        try:
            self.client.post(f"runs/{self.run_id}/heartbeat/", {"chunks": chunks}, run_token=self.run_token)
        except RefusedError as error:
            self.lost = error
            return
        except UnreachableError as error:  # the next beat may get through before the lease runs out
            logger.warning("run %s: heartbeat failed: %s", self.run_id, error)
            return
        self._sent(chunks)

    def run(self) -> None:
        while not self.stopped.wait(self.every) and self.lost is None:
            self.beat()

    def stop(self) -> None:
        self.stopped.set()
        self.join()


RUN_DIR_PREFIX = "calculet-agent-run-"


def runs_left_over_remove(run_dir: Path) -> int:
    """Remove the working directories (with their copies of the inputs) that a killed agent left in `run_dir`;
    returns how many. Call it only while holding the state directory (`cli.state_lock`): then no other agent
    runs there, and this one has not started a run yet."""
    removed = 0
    for path in run_dir.glob(f"{RUN_DIR_PREFIX}*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def run_job(
    client: Client, cache: Cache, run_dir: Path, claimed: dict, runner_command: list[str], devices: tuple[str, ...]
) -> tuple[dict | None, Reporter]:
    """Run the claimed job; returns the result to post (None when the attempt was lost meanwhile, or the
    runner could not be started — then the lease lapses and the server sends the run again) and the
    reporter holding what output was not sent yet."""
    job, run_id, run_token = claimed["job"], claimed["run"], claimed["run_token"]
    reporter = Reporter(client, run_id, run_token, float(job["heartbeat_seconds"]))
    reporter.start()
    try:
        with tempfile.TemporaryDirectory(prefix=f"{RUN_DIR_PREFIX}{run_id}-", dir=run_dir) as tmp:
            workdir = Path(tmp)
            started = time.monotonic()
            for item in job["inputs"]:
                reporter.note(f"input {item['name']} ({item['size']} bytes, sha256 {item['sha256'][:12]}…)")
                cache.fetch(item["sha256"], functools.partial(client.download, run_id, run_token, item["sha256"]))
                cache.copy_into(item["sha256"], workdir / item["name"])
            for name, text in job["files"].items():
                (workdir / name).parent.mkdir(parents=True, exist_ok=True)
                (workdir / name).write_text(text)
            timing = {"fetch": time.monotonic() - started}
            job_path, result_path = workdir / "job.json", workdir / "result.json"
            job_path.write_text(json.dumps(_placed(job["job"], workdir), indent=2))
            argv = [*runner_command, "--job", str(job_path), "--result", str(result_path)]
            reporter.note(shlex.join(argv))
            limits = job["limits"]
            inputs_bytes = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
            started = time.monotonic()
            outcome = run_sandboxed(
                argv,
                workdir=workdir,
                env=scrubbed_environment(_placed(job["env"], workdir)),
                limits=Limits(
                    wall_seconds=limits["wall_seconds"],
                    memory_bytes=limits["memory_bytes"],
                    output_bytes=limits["output_bytes"],
                    file_bytes=limits["file_bytes"],
                    workdir_bytes=inputs_bytes + limits["workdir_extra_bytes"],
                ),
                on_output=reporter.output,
                on_tick=lambda: reporter.lost is None,
                devices=devices,
            )
            timing["runner"] = time.monotonic() - started
            result_file = _read_at_most(result_path, RESULT_MAX_BYTES)
            measurements = {
                name: data
                for name in job.get("measurements", [])
                if (data := _read_at_most(workdir / name, MEASUREMENT_MAX_BYTES)) is not None
            }
    finally:
        reporter.stop()
    if reporter.lost is not None:
        logger.warning("run %s: the attempt no longer holds the run (%s)", run_id, reporter.lost)
        return None, reporter
    return _report(outcome, result_file, measurements, timing), reporter


def _read_at_most(path: Path, limit: int) -> bytes | None:
    if not path.is_file():
        return None
    with open(path, "rb") as handle:
        return handle.read(limit + 1)  # a larger file is refused by the server as too large


def _report(outcome: Outcome, result_file: bytes | None, measurements: dict[str, bytes], timing: dict) -> dict:
    """What the agent posts, signed as one body: how the runner ended, its result file and the files it measured
    into, which the server judges (the signature covers their bytes), and how long the input fetch and the
    runner took, in seconds."""
    return {
        "exit_code": outcome.exit_code,
        "limit_hit": outcome.limit_hit,
        "reason": outcome.reason[:2000],
        "sandbox": outcome.sandbox_record(),
        "result_file": base64.b64encode(result_file).decode() if result_file is not None else None,
        "measurements": {name: base64.b64encode(data).decode() for name, data in measurements.items()},
        "timing": {step: round(seconds, 3) for step, seconds in timing.items()},
    }
