"""Executing a run on a worker: claim it, run its stage, write its one verdict.

A run is claimed under `select_for_update` only while it is `queued`, or `running` with an expired lease;
the claim raises `attempt`. While the stage works, a thread renews the lease and streams the output and
progress into the run every ACCEPTANCE_RUN_HEARTBEAT_SECONDS, on the condition that the run is still
`running` with this attempt. The verdict is written under the same condition, with a RunResult unique per
(run, attempt): a duplicate delivery, a worker that lost its lease, or a run made stale writes nothing.
"""

import codecs
import json
import logging
import os
import shlex
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, Run, RunResult, Target
from acceptance.protocol import StageOutcome, build_job, outcome_verdict
from acceptance.sandbox import Limits, network_isolation_method, run_sandboxed, scrubbed_environment
from acceptance.services.checks import RUNNER_MANIFEST, runner_bundle_command, stage_artifact, stage_claim
from acceptance.services.inputs import AnswerInputs, answer_inputs
from acceptance.services.targets import target_accepts_runs, target_health_record
from calculet.audit import audit_record
from calculet.db import lock_rows
from evidence.models import EvidenceGrade, EvidenceItem
from npu_sim.calbin import build_calbin
from vendor import events
from vendor.models import Artifact
from vendor.services.artifacts import archive_check
from vendor.services.notifications import notify_on_commit
from vendor.storage import blob_local_path

logger = logging.getLogger(__name__)

CLAIMED = "claimed"
HELD = "held"
GONE = "gone"
TAIL_CHARS = 8192
PROGRESS_PREFIX = "PROGRESS "


class RunReporter:
    """A run's output and progress as the stage produces them, written with each lease renewal."""

    def __init__(self, run: Run):
        self.run_id = run.pk
        self.attempt = run.attempt
        self.lock = threading.Lock()
        self.pending: list[str] = []
        self.pending_bytes = 0
        self.logged_chars = len(run.log)
        self.tail = run.log_tail
        self.truncation_noted = False
        self.progress: float | None = None
        self.progress_text = ""
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        self.stderr_line = ""
        self.stderr_tail = ""
        self.lost = False

    def output(self, stream: str, chunk: bytes) -> None:
        text = self.decoders[stream].decode(chunk).replace("\x00", "\ufffd")
        with self.lock:
            self.pending.append(text)
            self.pending_bytes += len(chunk)
            if stream == "stderr":
                self.stderr_tail = (self.stderr_tail + text)[-16384:]
                lines = (self.stderr_line + text).split("\n")
                self.stderr_line = lines.pop()[-4096:]
                for line in lines:
                    self._progress_line(line)

    def _progress_line(self, line: str) -> None:
        if not line.startswith(PROGRESS_PREFIX):
            return
        parts = line[len(PROGRESS_PREFIX) :].split(" ", 1)
        try:
            value = float(parts[0])
        except ValueError:
            return
        if value == value:  # not NaN
            self.progress = min(100.0, max(0.0, value))
            self.progress_text = (parts[1] if len(parts) > 1 else "").strip()[:200]

    def note(self, message: str) -> None:
        text = f"[calculet] {message}\n"
        with self.lock:
            self.pending.append(text)
            self.pending_bytes += len(text.encode())

    def set_progress(self, value: float, text: str) -> None:
        with self.lock:
            self.progress, self.progress_text = value, text[:200]

    def _take(self) -> dict:
        """The fields to add to the run since the last write; the caller writes them or puts them back."""
        with self.lock:
            text = "".join(self.pending)
            self.pending.clear()
            written_bytes, self.pending_bytes = self.pending_bytes, 0
            room = max(0, settings.ACCEPTANCE_RUN_LOG_MAX_CHARS - self.logged_chars)
            fit = text[:room]
            if len(text) > room and not self.truncation_noted:
                fit += "\n[calculet] log truncated here; the latest output is in the log tail\n"
                self.truncation_noted = True
            self.logged_chars += len(fit)
            self.tail = (self.tail + text)[-TAIL_CHARS:]
            return {
                "log_append": fit,
                "log_tail": self.tail,
                "log_bytes": written_bytes,
                "progress": self.progress,
                "progress_text": self.progress_text,
            }

    def flush(self) -> bool:
        """Renew the lease and write what is new. False once the run is no longer this attempt's."""
        fields = self._take()
        updates = {
            "lease_expires_at": timezone.now() + timedelta(seconds=settings.ACCEPTANCE_RUN_LEASE_SECONDS),
            "log_tail": fields["log_tail"],
            "log_bytes": F("log_bytes") + fields["log_bytes"],
        }
        if fields["log_append"]:
            updates["log"] = Concat(F("log"), Value(fields["log_append"]))
        if fields["progress"] is not None:
            updates["progress"] = fields["progress"]
            updates["progress_text"] = fields["progress_text"]
        held = Run.objects.filter(pk=self.run_id, attempt=self.attempt, state=stages.RUNNING).update(**updates)
        if not held:
            self.lost = True
        return bool(held)

    def final_fields(self, run: Run) -> list[str]:
        """Put what is still unwritten onto the locked `run`; returns the fields changed."""
        fields = self._take()
        run.log += fields["log_append"]
        run.log_tail = fields["log_tail"]
        run.log_bytes += fields["log_bytes"]
        changed = ["log", "log_tail", "log_bytes"]
        if fields["progress"] is not None:
            run.progress, run.progress_text = fields["progress"], fields["progress_text"]
            changed += ["progress", "progress_text"]
        return changed


class LeaseKeeper(threading.Thread):
    """Renews the run's lease and streams its output while the stage works, on its own connection."""

    def __init__(self, reporter: RunReporter):
        super().__init__(name=f"lease-run-{reporter.run_id}", daemon=True)
        self.reporter = reporter
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(settings.ACCEPTANCE_RUN_HEARTBEAT_SECONDS):
                try:
                    if not self.reporter.flush():
                        return
                except Exception:  # a database hiccup: the next renewal may succeed before the lease runs out
                    logger.exception("renewing the lease of run %s failed", self.reporter.run_id)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def worker_label() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"


def run_claim(run_id: int, worker: str) -> tuple[str, Run | None]:
    """Take the run for one attempt: (CLAIMED, run), (HELD, run) while another attempt's lease is live, or
    (GONE, run-or-None) when there is nothing to do (finished, stale, waiting for its target, or given up)."""
    now = timezone.now()
    with transaction.atomic():
        run = lock_rows(Run.objects).select_related("target", "answer").filter(pk=run_id).first()
        if run is None:
            return GONE, None
        if run.state == stages.RUNNING and run.lease_expires_at is not None and run.lease_expires_at > now:
            return HELD, run
        if run.state not in (stages.QUEUED, stages.RUNNING):
            return GONE, run
        if run.stage != stages.HEALTH and not target_accepts_runs(run.target, now, claiming=True):
            run.state = stages.PENDING
            run.lease_expires_at = None
            run.save(update_fields=["state", "lease_expires_at"])
            return GONE, run
        if run.attempt >= settings.ACCEPTANCE_RUN_MAX_ATTEMPTS:
            run_finish_locked(run, run.attempt, attempts_exhausted(run), worker)
            return GONE, run
        run.attempt += 1
        run.state = stages.RUNNING
        run.worker = worker[:200]
        run.started_at = now
        run.lease_expires_at = now + timedelta(seconds=settings.ACCEPTANCE_RUN_LEASE_SECONDS)
        run.progress = 0
        run.progress_text = ""
        changed = ["attempt", "state", "worker", "started_at", "lease_expires_at", "progress", "progress_text"]
        if run.attempt > 1:
            run.log += f"\n[calculet] attempt {run.attempt} on {worker}: the previous attempt's worker was lost\n"
            changed.append("log")
        run.save(update_fields=changed)
        return CLAIMED, run


def attempts_exhausted(run: Run) -> StageOutcome:
    return StageOutcome(
        stages.ERROR,
        f"infrastructure error: the run was started {run.attempt} times and each time its worker was lost "
        "before a verdict; it is not retried again",
    )


def _claim_when_free(run_id: int, worker: str) -> Run | None:
    """Claim the run, waiting out a live lease once: a redelivered message after a worker died finds the dead
    attempt's lease still running for up to ACCEPTANCE_RUN_LEASE_SECONDS."""
    deadline = time.monotonic() + settings.ACCEPTANCE_RUN_LEASE_SECONDS + 2
    while True:
        status, run = run_claim(run_id, worker)
        if status == CLAIMED:
            return run
        if status == GONE or time.monotonic() > deadline:
            return None
        time.sleep(1)


def run_execute(run_id: int, *, worker: str) -> None:
    """Execute a run once; safe to call again for the same run (a second call finds it claimed or finished)."""
    run = _claim_when_free(run_id, worker)
    if run is None:
        return
    reporter = RunReporter(run)
    keeper = LeaseKeeper(reporter)
    keeper.start()
    inputs = None
    try:
        inputs = answer_inputs(run.answer) if run.answer_id else None
        outcome = _execute(run, reporter, inputs)
    except Exception as error:  # our own failure must still end the run with a verdict that says so
        logger.exception("run %s failed inside the worker", run_id)
        outcome = StageOutcome(stages.ERROR, f"internal error in the worker: {error.__class__.__name__}: {error}")
    finally:
        keeper.stop()
    if reporter.lost:
        logger.warning("run %s attempt %s lost its lease; its outcome is dropped", run_id, run.attempt)
        return
    run_finish(run, worker=worker, outcome=outcome, reporter=reporter, inputs=inputs)


def _execute(run: Run, reporter: RunReporter, inputs: AnswerInputs | None) -> StageOutcome:
    if run.stage == stages.HEALTH:
        return _execute_runner(run, reporter)
    if run.stage in stages.RUNNER_STAGES:
        return _execute_runner(run, reporter, inputs=inputs)
    chain = Chain.objects.select_related("question", "capability", "target").get(pk=run.chain_id)
    if run.stage == stages.CLAIM:
        return stage_claim(chain, inputs)
    return stage_artifact(chain, inputs, run.target, reporter.note)


def default_runner_command() -> list[str]:
    return shlex.split(settings.ACCEPTANCE_RUNNER_COMMAND) or [sys.executable, "-m", "npu_sim", "run"]


def health_package() -> Path:
    """The known-good package a health job runs: ACCEPTANCE_HEALTH_PACKAGE, or a tiny simulator package built
    once per host."""
    if settings.ACCEPTANCE_HEALTH_PACKAGE:
        return Path(settings.ACCEPTANCE_HEALTH_PACKAGE)
    path = Path(settings.DATA_DIR) / "acceptance" / "health-tiny.tar"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tar")
        build_calbin(partial, preset="tiny", decode_batch=1, tar=True)
        os.replace(partial, path)
    return path


def _limits(inputs_bytes: int) -> Limits:
    return Limits(
        wall_seconds=settings.ACCEPTANCE_RUNNER_WALL_SECONDS,
        memory_bytes=settings.ACCEPTANCE_RUNNER_MEMORY_MB * 1024 * 1024,
        output_bytes=settings.ACCEPTANCE_RUNNER_OUTPUT_BYTES,
        file_bytes=settings.ACCEPTANCE_RUNNER_FILE_BYTES,
        workdir_bytes=inputs_bytes + settings.ACCEPTANCE_RUNNER_WORKDIR_BYTES,
    )


def _copy_blob(artifact: Artifact, destination: Path) -> None:
    with blob_local_path(artifact.blob) as source:
        shutil.copyfile(source, destination)


def _unpack_bundle(bundle: Artifact, destination: Path) -> list[str]:
    """Unpack a vendor's runner bundle (already checked at the artifact stage; checked again here) and return
    its command."""
    with blob_local_path(bundle.blob) as source:
        archive_check(source)
        with tarfile.open(source, "r:*") as archive:
            archive.extractall(destination, filter="data")
    return runner_bundle_command((destination / RUNNER_MANIFEST).read_bytes())


def _execute_runner(run: Run, reporter: RunReporter, inputs: AnswerInputs | None = None) -> StageOutcome:
    target: Target = run.target
    with tempfile.TemporaryDirectory(prefix=f"calculet-run-{run.pk}-", dir=settings.ACCEPTANCE_RUN_DIR) as tmp:
        workdir = Path(tmp)
        (workdir / "inputs").mkdir()
        calbin = workdir / "inputs" / "calbin.tar"
        command, cwd = default_runner_command(), workdir
        if inputs is None:
            reporter.note("preparing the known-good package")
            shutil.copyfile(health_package(), calbin)
        else:
            calbin_artifact = next(a for a in inputs.executable_assets if a.kind == Artifact.CALBIN)
            _copy_blob(calbin_artifact, calbin)
            bundle = next((a for a in inputs.executable_assets if a.kind == Artifact.RUNNER_BUNDLE), None)
            # On a board the vendor's runner drives the device; on the simulator, only the simulator judges.
            if bundle is not None and target.kind == Target.HARDWARE:
                cwd = workdir / "bundle"
                command = _unpack_bundle(bundle, cwd)
                reporter.note(f"runner bundle {bundle} unpacked")
        inputs_bytes = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file())
        job_path, result_path = workdir / "job.json", workdir / "result.json"
        job = build_job(stage=run.stage, calbin=str(calbin), params=run.params, target=target.as_job_target())
        job_path.write_text(json.dumps(job, indent=2))
        argv = [*command, "--job", str(job_path), "--result", str(result_path)]
        reporter.note(f"{shlex.join(argv)} (network isolation: {network_isolation_method()})")
        try:
            outcome = run_sandboxed(
                argv,
                workdir=workdir,
                cwd=cwd,
                env=scrubbed_environment(),
                limits=_limits(inputs_bytes),
                on_output=reporter.output,
                on_tick=lambda: not reporter.lost,
            )
        except OSError as error:
            return StageOutcome(stages.ERROR, f"the runner could not be started: {error}")
        return outcome_verdict(outcome, result_path, run.stage, reporter.stderr_tail)


def run_finish(
    claimed: Run, *, worker: str, outcome: StageOutcome, reporter: RunReporter, inputs: AnswerInputs | None = None
) -> bool:
    """Write the verdict of the attempt that claimed the run; False (and nothing written) when the run is no
    longer that attempt's.

    A pass moves the chain on in the same transaction: the next stage is written `queued` with the verdict.
    """
    with transaction.atomic():
        # Lock order everywhere: chain, then run, then target, then the audit head.
        chain = None
        if claimed.chain_id:
            chain = lock_rows(Chain.objects).select_related("target", "capability").get(pk=claimed.chain_id)
        run = lock_rows(Run.objects).select_related("target", "answer").get(pk=claimed.pk)
        if run.state != stages.RUNNING or run.attempt != claimed.attempt:
            return False
        run_finish_locked(run, claimed.attempt, outcome, worker, reporter=reporter, chain=chain, inputs=inputs)
    return True


def run_finish_locked(
    run: Run,
    attempt: int,
    outcome: StageOutcome,
    worker: str,
    *,
    reporter=None,
    chain: Chain | None = None,
    inputs: AnswerInputs | None = None,
) -> None:
    from acceptance.services.chains import chain_advance

    now = timezone.now()
    RunResult.objects.create(run=run, attempt=attempt, verdict=outcome.verdict, worker=worker[:200])
    run.state = stages.VERDICT_STATES[outcome.verdict]
    run.verdict = outcome.verdict
    run.reason = outcome.reason
    run.findings = outcome.findings
    run.metrics = outcome.metrics
    run.result = outcome.result
    run.finished_at = now
    run.lease_expires_at = None
    changed = ["state", "verdict", "reason", "findings", "metrics", "result", "finished_at", "lease_expires_at"]
    if reporter is not None:
        changed += reporter.final_fields(run)
    if outcome.verdict == stages.PASS:
        run.progress = 100
        changed.append("progress")
    if run.stage in stages.RUNNER_STAGES and outcome.verdict in (stages.PASS, stages.FAIL) and chain is not None:
        run.evidence = _evidence_for_run(run, chain)
        changed.append("evidence")
    run.save(update_fields=list(dict.fromkeys(changed)))
    audit_record(
        actor="system",
        action="run.finish",
        obj=run,
        after={"stage": run.stage, "verdict": run.verdict, "reason": run.reason[:500], "attempt": attempt},
    )
    if run.stage == stages.HEALTH:
        target_health_record(run.target, run)
    elif chain is not None and outcome.verdict == stages.PASS:
        chain_advance(chain, inputs=inputs if chain.answer_id == run.answer_id else None)
    elif outcome.verdict != stages.PASS and run.chain is not None and run.answer is not None:
        _tell_failure(run, run.chain, run.answer)


def _tell_failure(run: Run, chain: Chain, answer) -> None:
    """A chain's run failed or erred: its question's people and the vendor whose answer ran are told."""
    notify_on_commit(
        events.RUN_FAILED,
        actor="system",
        organisation_id=answer.organisation_id,
        question_id=chain.question_id,
        data={
            "run": run.pk,
            "stage": str(stages.STAGE_LABELS[run.stage]),
            "verdict": run.verdict,
            "target": run.target.name,
            "detail": run.reason[:500],
        },
    )


def _evidence_for_run(run: Run, chain: Chain) -> EvidenceItem | None:
    """A runner stage's pass or fail is evidence about the chain's capability: grade E0 when measured on a
    hardware target, E4 on the simulator (a model of the device, not the device)."""
    if chain.capability_id is None:
        return None
    grade = "E0" if run.target.kind == Target.HARDWARE else "E4"
    outcome = "passed" if run.verdict == stages.PASS else "failed"
    calbin = next((a for a in run.inputs.get("artifacts", []) if a["kind"] == Artifact.CALBIN), None)
    calbin_note = f" with {calbin['file_name']} {calbin['version']}" if calbin else ""
    item = EvidenceItem.objects.create(
        code=f"RUN-{run.pk}",
        origin=EvidenceItem.RUN,
        conclusion=f"{stages.STAGE_LABELS[run.stage]} {outcome} on {run.target.name} ({run.target.kind}){calbin_note}.",
        source_text=f"acceptance run {run.pk}, answer {run.answer_id}, target {run.target.slug}",
        grade_text=grade,
        explanation=run.reason[:2000],
    )
    EvidenceGrade.objects.create(item=item, grade=grade)
    chain.capability.evidence.add(item)
    return item
