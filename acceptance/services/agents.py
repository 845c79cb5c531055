"""Targets served by calculet-agent: their tokens, the agents that register with them, and the runs those agents
pull, report on and finish over the API (docs/deploy.md, "Workers on another host").

A target token registers agents and claims the target's runs, nothing else. A claim gives the agent a run
token for that attempt, which works while the attempt holds the run under a live lease and the target token is
not revoked. The agent runs the runner and posts how it ended, signed with its key; the verdict is computed
here, by the same code a Celery worker's run uses, and written by `run_finish`.
"""

import contextlib
import logging
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from calculet_agent.signing import public_key_valid, signature_valid
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from acceptance import judging, probe_judging, stages
from acceptance.models import Run, RunResult, RunToken, Target, TargetAgent, TargetToken
from acceptance.protocol import RunnerEnd, StageOutcome, parse_result, runner_verdict
from acceptance.services.registration import AGENT_FIELDS, VERSION_FIELDS, target_registration_propose
from acceptance.services.runs.claiming import CLAIMED, run_claim
from acceptance.services.runs.finishing import run_finish
from acceptance.services.runs.jobs import CALBIN, GOLDEN, health_package, runner_inputs, runner_job
from acceptance.services.runs.reporting import RunReporter
from acceptance.services.runs.running import no_hardware_runner, runner_judged
from acceptance.services.targets import target_heartbeat
from calculet.actors import Actor, Machine, actor_label
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, DomainError, ForbiddenError
from vendor.models import Answer
from vendor.storage import blob_local_path
from vendor.tokens import token_hash

logger = logging.getLogger(__name__)

TARGET_KEY_PREFIX = "clt_target_"
RUN_KEY_PREFIX = "clt_run_"
# Where the job names a file of the run's working directory: the agent puts its own directory there.
WORKDIR = "{workdir}"
CLAIM_CANDIDATES = 5


class AgentRefusedError(ForbiddenError):
    """The agent's token or signature does not allow what it asked. Nothing was written but the audit row."""


@dataclass(frozen=True)
class AgentRegistration:
    """Who the agent is, and what its host says of the target: its versions and the runner it runs and that
    runner's SHA-256 (a hardware target's; "" for what the host does not say)."""

    host: str
    public_key: str
    agent_version: str
    platform: str = ""
    calrt_version: str = ""
    driver_version: str = ""
    firmware_version: str = ""
    chip: str = ""
    runner_command: str = ""
    runner_digest: str = ""


@dataclass(frozen=True)
class RunReport:
    """What the agent posts about a run: output chunks numbered from 0, progress, and at the end how the
        runner ended, the bytes of its result file (None when it wrote none) and of the files it measured into
    (`probe_judging.measured_files`), by name; and the seconds its input fetch and runner took (`fetch`,
    `runner`)."""

    run: int
    attempt: int
    chunks: list[dict]
    end: RunnerEnd | None = None
    result_file: bytes | None = None
    measurements: dict[str, bytes] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)


def target_token_create(*, actor: Actor, target: Target, name: str) -> tuple[TargetToken, str]:
    """A new token for `target`'s agents; returns it and its key, which is shown once and stored only hashed.
    The target's runner stages are pulled by agents from now on. `name` is parsed at the edge
    (`acceptance.inputs.target_token_name`)."""
    key = TARGET_KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        target = lock_rows(Target.objects).get(pk=target.pk)
        token = TargetToken.objects.create(
            target=target,
            name=name,
            prefix=key[:12],
            key_hash=token_hash(key),
            created_by=actor_label(actor)[:200],
        )
        if not target.pulled:
            target.pulled = True
            target.save(update_fields=["pulled"])
        audit_record(actor=actor, action="target_token.create", obj=target, after={"token": token.pk, "name": name})
    return token, key


def target_token_revoke(*, actor: Actor, token: TargetToken) -> TargetToken:
    """Revoke the token: its agents are refused from their next call, and the runs they hold are sent again
    once their leases lapse. With the target's last live token revoked the target is no longer pulled: its
    runs go to its Celery queue again (the sweeper sends those left queued)."""
    with transaction.atomic():
        target = lock_rows(Target.objects).get(pk=token.target_id)
        token = lock_rows(TargetToken.objects).get(pk=token.pk)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            pulled = target.tokens.filter(revoked_at__isnull=True).exists()
            after = {"token": token.pk, "name": token.name, "pulled": pulled}
            if target.pulled != pulled:
                target.pulled = pulled
                target.save(update_fields=["pulled"])
            audit_record(actor=actor, action="target_token.revoke", obj=target, after=after)
    return token


def target_token_for_key(key: str) -> TargetToken | None:
    """The live token `key` is, or None (unknown or revoked)."""
    token = TargetToken.objects.select_related("target").filter(key_hash=token_hash(key)).first()
    if token is None or token.revoked_at is not None:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        TargetToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def run_token_for_key(key: str) -> RunToken | None:
    """The run token `key` is, while the target token that claimed with it is live; None otherwise."""
    token = (
        RunToken.objects.select_related("run", "agent", "target_token", "run__target")
        .filter(key_hash=token_hash(key))
        .first()
    )
    if token is None or token.target_token.revoked_at is not None:
        return None
    return token


def agent_register(*, token: TargetToken, registration: AgentRegistration) -> TargetAgent:
    """Register the agent holding `token` by its public key (again at each start: its host and version may
    have changed). A key already registered for another target is refused. What the host says of the target
    waits for approval when it needs one (`target_registration_propose`), never applied on its word."""
    if not public_key_valid(registration.public_key):
        raise DomainError(
            gettext_noop("The public key is the base64 of an Ed25519 key's 32 bytes."), field="public_key"
        )
    if TargetAgent.objects.filter(public_key=registration.public_key).exclude(target_id=token.target_id).exists():
        raise AgentRefusedError(gettext_noop("This key is registered for another target."), field="public_key")
    with transaction.atomic():
        agent = lock_rows(TargetAgent.objects).filter(public_key=registration.public_key).first()
        if agent is not None and agent.target_id != token.target_id:
            raise AgentRefusedError(gettext_noop("This key is registered for another target."), field="public_key")
        if agent is None:
            agent = TargetAgent(target=token.target, public_key=registration.public_key)
        agent.host = registration.host[:200]
        agent.agent_version = registration.agent_version[:50]
        agent.platform = registration.platform[:200]
        agent.save()
        audit_record(
            actor=Machine(f"agent {agent.host}"),
            action="target.agent_register",
            obj=token.target,
            after={"agent": agent.pk, "host": agent.host, "version": agent.agent_version, "key": agent.public_key},
        )
    target_registration_propose(
        target=token.target, agent_id=agent.pk, host=agent.host, sent=_sent(token.target, registration)
    )
    return agent


def _sent(target: Target, registration: AgentRegistration) -> dict[str, str]:
    """What the registration says of the target: the fields it gave, the runner's only for a board's."""
    fields = AGENT_FIELDS if target.kind == Target.HARDWARE else VERSION_FIELDS
    return {field: getattr(registration, field).strip() for field in fields if getattr(registration, field).strip()}


def agent_for_token(token: TargetToken, agent_id: int) -> TargetAgent:
    agent = TargetAgent.objects.filter(pk=agent_id, target_id=token.target_id).first()
    if agent is None:
        raise AgentRefusedError(gettext_noop("No agent of this target has that id; register first."), field="agent")
    return agent


def agent_claim_next(*, token: TargetToken, agent: TargetAgent, cache_bytes: int = 0) -> tuple[Run, str, dict] | None:
    """The target is served: note the poll, and claim its first queued run of a stage an agent runs (the
    lowest `priority` — a health check, then a PM's re-run or a retry, then the backlog — and the oldest of
    those; a target out of rotation gets none: `run_claim` sends its runs back to pending). Returns
    the run, its run token's key and its job, or None when nothing waits. Two agents never hold one run: the
    claim is `run_claim`'s, under the run's row lock (a run another claim holds is skipped)."""
    now = timezone.now()
    # An agent polls only between runs: from this poll on it holds none, until this claim gives it one.
    TargetAgent.objects.filter(pk=agent.pk).update(last_poll_at=now, cache_bytes=max(0, cache_bytes), current_run=None)
    target_heartbeat(queues=[token.target.queue], worker=f"agent {agent.host}")
    candidates = Run.objects.filter(target_id=token.target_id, state=stages.QUEUED, stage__in=stages.PULLED_STAGES)
    for run_id in candidates.order_by("priority", "pk").values_list("pk", flat=True)[:CLAIM_CANDIDATES]:
        with transaction.atomic():
            status, run = run_claim(run_id, _worker_label(agent), skip_locked=True)
            if status != CLAIMED or run is None:
                continue
            job = _job_or_none(run)
            if job is None:
                continue
            key = RUN_KEY_PREFIX + secrets.token_urlsafe(32)
            RunToken.objects.create(
                run=run, attempt=run.attempt, agent=agent, target_token=token, key_hash=token_hash(key)
            )
            TargetAgent.objects.filter(pk=agent.pk).update(current_run=run)
            return run, key, job
    return None


def _worker_label(agent: TargetAgent) -> str:
    return f"agent {agent.host} #{agent.pk}"


def _job_or_none(run: Run) -> dict | None:
    """The job the agent runs; None when the run cannot be run by an agent, and it was ended in error saying
    why (inside the claim's transaction). As on a worker, a runner bundle the answer delivers never runs: the
    agent runs the operator's runner."""
    target = run.target
    if target.kind == Target.HARDWARE and not target.runner_command:
        _end_unrunnable(run, no_hardware_runner(target))
        return None
    return run_job(run)


def _end_unrunnable(run: Run, outcome: StageOutcome) -> None:
    run_finish(run, worker="server", outcome=outcome, reporter=RunReporter(run))


def run_job(run: Run) -> dict:
    """What the agent needs to run the run's runner stage: the job `runner_job` decides for a worker's run too
    (its paths under WORKDIR), its input files by digest, the files the runner measures into that the agent
    sends back for calculet to judge, and the limits."""
    job = runner_job(run, runner_inputs(run), WORKDIR)
    return {
        "run": run.pk,
        "attempt": run.attempt,
        "stage": run.stage,
        "inputs": [{"name": item.name, "sha256": item.sha256, "size": item.size} for item in job.inputs],
        "files": job.files,
        "env": job.env,
        "job": job.job,
        "measurements": probe_judging.measured_files(run.stage, run.probes),
        "heartbeat_seconds": settings.ACCEPTANCE_RUN_HEARTBEAT_SECONDS,
        "limits": {
            "wall_seconds": settings.ACCEPTANCE_RUNNER_WALL_SECONDS,
            "memory_bytes": settings.ACCEPTANCE_RUNNER_MEMORY_MB * 1024 * 1024,
            "output_bytes": settings.ACCEPTANCE_RUNNER_OUTPUT_BYTES,
            "file_bytes": settings.ACCEPTANCE_RUNNER_FILE_BYTES,
            "workdir_extra_bytes": settings.ACCEPTANCE_RUNNER_WORKDIR_BYTES,
        },
    }


def run_input_blob(token: RunToken, sha256: str):
    """The stored bytes of one of the run's inputs (a `vendor.Blob`, or the health package's path), for the
    agent holding the run. Another digest is not the run's, and is refused."""
    _require_holding(token)
    run = token.run
    item = next((i for i in runner_job(run, runner_inputs(run), WORKDIR).inputs if i.sha256 == sha256), None)
    if item is None:
        raise AgentRefusedError(
            gettext_noop("%(sha256)s is not an input of run %(run)s."),
            field="sha256",
            params={"sha256": sha256, "run": token.run_id},
        )
    return health_package() if item.artifact is None else item.artifact.stored_blob


def _require_holding(token: RunToken) -> Run:
    """The run, while the token's attempt holds it under a live lease; ConflictError naming why not."""
    run = Run.objects.filter(pk=token.run_id).only("state", "attempt", "lease_expires_at").first()
    now = timezone.now()
    if run is None or run.state != stages.RUNNING or run.attempt != token.attempt:
        raise _lost(token, run)
    if run.lease_expires_at is None or run.lease_expires_at <= now:
        raise ConflictError(
            gettext_noop(
                "The lease of attempt %(attempt)s of run %(run)s expired at %(lease_expires_at)s UTC; the run will be "
                "sent again."
            ),
            field="run",
            params={
                "attempt": token.attempt,
                "run": token.run_id,
                "lease_expires_at": f"{run.lease_expires_at:%Y-%m-%d %H:%M:%S}",
            },
        )
    return run


def _lost(token: RunToken, run: Run | None) -> ConflictError:
    """The refusal of a token whose attempt no longer holds its run."""
    if run is None:
        return ConflictError(gettext_noop("Run %(run)s no longer exists."), field="run", params={"run": token.run_id})
    if run.attempt != token.attempt:
        return ConflictError(
            gettext_noop(
                "Attempt %(attempt)s of run %(run)s lost its lease and the run was sent again: attempt "
                "%(holder)s holds it now (%(state)s)."
            ),
            field="run",
            params={"attempt": token.attempt, "run": token.run_id, "holder": run.attempt, "state": run.state},
        )
    return ConflictError(
        gettext_noop("Run %(run)s is %(state)s: attempt %(attempt)s no longer holds it."),
        field="run",
        params={"run": token.run_id, "state": run.state, "attempt": token.attempt},
    )


def _reporter(token: RunToken, chunks: list[dict]) -> RunReporter:
    """A reporter of the token's attempt holding the chunks not written yet (each chunk once, by number)."""
    run = Run.objects.get(pk=token.run_id)
    run.attempt = token.attempt
    reporter = RunReporter(run)
    for chunk in sorted(chunks, key=lambda c: c["index"]):
        if chunk["index"] >= token.next_chunk:
            reporter.output(chunk["stream"], chunk["text"].encode())
    return reporter


def run_heartbeat(*, token: RunToken, chunks: list[dict]) -> None:
    """The agent is working on the run: renew the lease, and write the output chunks not written before."""
    _require_holding(token)
    with transaction.atomic():
        token = lock_rows(RunToken.objects).select_related("target_token").get(pk=token.pk)
        reporter = _reporter(token, chunks)
        if not reporter.flush():
            raise _lost(token, Run.objects.filter(pk=token.run_id).first())
        seen = max([token.next_chunk - 1, *(chunk["index"] for chunk in chunks)]) + 1
        RunToken.objects.filter(pk=token.pk).update(next_chunk=seen)


def run_result(*, token: RunToken, body: bytes, signature: str, report: RunReport, received: float) -> Run:
    """The agent's result for its attempt: verified against the key it registered, then judged and written
    as one verdict by `run_finish`. The same result again returns the verdict already written; a result
    for an attempt that lost its lease is refused, naming why; a bad or missing signature is refused and
    audited, and nothing else is written. `received` (`time.monotonic()`) is when the post arrived: the run's
    `post` time runs from then to the verdict's write."""
    if not signature or not signature_valid(token.agent.public_key, body, signature):
        _audit_refusal(token, "the signature is missing or is not the registered key's over the body")
        raise AgentRefusedError(
            gettext_noop("The result of run %(run)s is not signed by the key agent %(host)s registered."),
            field="signature",
            params={"run": token.run_id, "host": token.agent.host},
        )
    if (report.run, report.attempt) != (token.run_id, token.attempt):
        _audit_refusal(token, f"the signed result is for run {report.run} attempt {report.attempt}")
        raise AgentRefusedError(
            gettext_noop(
                "The result is signed for run %(run)s attempt %(attempt)s, not run %(token_run)s attempt "
                "%(token_attempt)s this token holds."
            ),
            field="run",
            params={
                "run": report.run,
                "attempt": report.attempt,
                "token_run": token.run_id,
                "token_attempt": token.attempt,
            },
        )
    if RunResult.objects.filter(run_id=token.run_id, attempt=token.attempt).exists():
        return Run.objects.get(pk=token.run_id)  # sent again after a cut connection: already written once
    _require_holding(token)
    if report.end is None:
        raise DomainError(gettext_noop("A result says how the runner ended."), field="end")
    run = Run.objects.select_related("target", "answer").get(pk=token.run_id)
    run.attempt = token.attempt  # run_finish writes the verdict only while this attempt holds the run
    unexpected = sorted(set(report.measurements) - set(probe_judging.measured_files(run.stage, run.probes)))
    if unexpected:
        raise DomainError(
            gettext_noop("A %(stage)s result carries no %(unexpected)s."),
            field="measurements",
            params={"stage": run.stage, "unexpected": list(unexpected)},
        )
    reporter = _reporter(token, report.chunks)
    reporter.timing.update(report.timing)
    reporter.post_started = received
    outcome = runner_verdict(report.end, parse_result(report.result_file, run.stage), run.stage, reporter.stderr_tail)
    outcome = _judged_here(run, outcome, report.measurements)
    if run.stage == stages.RUNNER and run.answer is not None and outcome.verdict != stages.ERROR:
        outcome = _example_not_run(outcome, run.answer)
    outcome.result["agent"] = {"host": token.agent.host, "agent": token.agent.pk, "version": token.agent.agent_version}
    if not run_finish(run, worker=_worker_label(token.agent), outcome=outcome, reporter=reporter):
        if RunResult.objects.filter(run_id=token.run_id, attempt=token.attempt).exists():
            return Run.objects.get(pk=token.run_id)
        raise _lost(token, Run.objects.filter(pk=token.run_id).first())
    TargetAgent.objects.filter(pk=token.agent_id, current_run_id=token.run_id).update(current_run=None)
    return Run.objects.get(pk=token.run_id)


def _judged_here(run: Run, outcome: StageOutcome, measurements: dict[str, bytes]) -> StageOutcome:
    """The agent's result judged by `runner_judged`, as a worker's run is: the files the runner measured into,
    as the agent sent them (signed with the result), against the golden the job named, read from the store."""
    job = runner_job(run, runner_inputs(run), WORKDIR)
    with tempfile.TemporaryDirectory(prefix="calculet-agent-result-") as tmp, contextlib.ExitStack() as stack:
        measured = Path(tmp)
        for name, data in measurements.items():
            (measured / name).write_bytes(data)
        local: dict[str, Path] = {}
        if run.stage in judging.JUDGED_STAGES:
            # What judging reads: the golden, and the package (its replays, its model, its own golden).
            for item in job.inputs:
                if item.name in (GOLDEN, CALBIN) and item.artifact is not None:
                    local[item.name] = stack.enter_context(blob_local_path(item.artifact.stored_blob))
        calbin = local.get(CALBIN, measured / CALBIN)
        return runner_judged(run, outcome, measured=measured, calbin=calbin, golden=local.get(GOLDEN), job=job)


def _example_not_run(outcome: StageOutcome, answer: Answer) -> StageOutcome:
    """The runner stage's verdict saying that the answer's minimal example was not run (docs/deploy.md: an agent
    runs only the operator's runner, never the vendor's code)."""
    example = {"ran": False, "command": answer.minimal_example_command, "detail": judging.EXAMPLE_NOT_RUN}
    reason = outcome.reason
    if answer.minimal_example_artifact_id and answer.minimal_example_command:
        reason = (
            judging.EXAMPLE_NOT_RUN_AFTER % {"reason": reason, "why": judging.EXAMPLE_NOT_RUN}
            if reason
            else judging.EXAMPLE_NOT_RUN
        )
    return StageOutcome(
        outcome.verdict, reason, outcome.findings, outcome.metrics, {**outcome.result, "minimal_example": example}
    )


def _audit_refusal(token: RunToken, why: str) -> None:
    with transaction.atomic():
        audit_record(
            actor=Machine(f"agent {token.agent.host}"),
            action="run.result_refused",
            obj=token.run,
            after={"attempt": token.attempt, "agent": token.agent_id, "why": why},
        )
