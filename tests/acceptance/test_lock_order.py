"""One lock order (docs/acceptance.md, "Lock order"): answers, verdicts, chain moves and question moves on the
same question never deadlock, and a verdict transaction that meets a database error is retried in place."""

import threading
from datetime import timedelta

import pytest
import requests
from django.db import InterfaceError, OperationalError, connection
from django.db.models import Q
from django.utils import timezone

from acceptance import selectors, stages
from acceptance.models import Chain, Run, RunResult
from acceptance.protocol import StageOutcome
from acceptance.services import target_ensure_simulator
from acceptance.services.agents import target_token_create
from acceptance.services.runs import finishing
from acceptance.services.runs.claiming import run_claim
from acceptance.services.runs.finishing import run_finish
from acceptance.services.runs.reporting import RunReporter
from calculet.actors import SYSTEM
from tests.acceptance.workers import wait_until
from tests.factories import complete_answer_data, make_artifact, make_capability, tiny_package_bytes
from vendor.services.organisations import token_create

CONCURRENT_ANSWERS = 20


def _post_answers(url: str, key: str, bodies: list[dict]) -> list[int]:
    """POST every body at once, each from its own thread (and so its own connection to the server)."""
    statuses: list[int] = [0] * len(bodies)
    start = threading.Barrier(len(bodies))

    def post(index: int) -> None:
        start.wait()
        response = requests.post(url, json=bodies[index], headers={"Authorization": f"Token {key}"}, timeout=120)
        statuses[index] = response.status_code

    threads = [threading.Thread(target=post, args=(index,)) for index in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def _settled(question) -> bool:
    return not Run.objects.filter(chain__question=question, state__in=stages.ACTIVE_STATES).exists()


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_answers_while_runs_finish_all_succeed_and_every_verdict_is_a_first_attempt(
    workers,
    live_server,
    vendor_user,
    question,
    capability,
    calbin,
    golden,
    tmp_path,
):
    # The server's checks on a Celery worker, the runner stages pulled by the simulator's agent from this server,
    # whose verdicts are then written by the server's own threads while the answers arrive.
    server_checks = workers.celery("default", "default")
    _, target_key = target_token_create(actor=SYSTEM, target=target_ensure_simulator(), name="this host")
    agent = workers.agent(live_server.url, target_key)
    _token, key = token_create(actor=vendor_user, user=vendor_user, name="concurrent answers")
    url = f"{live_server.url}/api/v1/questions/{question.code}/answers/"
    # A chain of another capability of the same question runs its stages on the worker while the answers
    # arrive: its verdicts lock the question the answers lock.
    other = make_capability("decode-batch-4", questions=[question])
    other.deliverables.add(*question.deliverables.all())  # V18's package proves it too
    package_b4, golden_b4 = tiny_package_bytes(tmp_path, decode_batch=4)
    calbin_b4 = make_artifact(vendor_user, package_b4, kind="calbin", version="1.0.4", file_name="b4.tar")
    golden_b4 = make_artifact(vendor_user, golden_b4, kind="golden", version="1.0.4", file_name="b4.npz")
    body = complete_answer_data(capability=other, calbin=calbin_b4, golden=golden_b4)
    assert _post_answers(url, key, [body]) == [201]
    running_on = Chain.objects.get(question=question, capability=other)
    wait_until(
        lambda: (
            Run.objects.filter(chain=running_on, stage__in=stages.RUNNER_STAGES, state=stages.RUNNING).exists()
            and RunResult.objects.filter(run__chain=running_on).exists()
        ),
        timeout=120,
        what="a runner stage of the other capability's chain at work, after its first verdict",
        workers=[agent, server_checks],
        sweep=False,
    )

    bodies = [
        complete_answer_data(capability=capability, calbin=calbin, golden=golden, summary=f"client {index}")
        for index in range(CONCURRENT_ANSWERS)
    ]
    started = timezone.now()
    statuses = _post_answers(url, key, bodies)
    ended = timezone.now()

    assert statuses == [201] * CONCURRENT_ANSWERS
    # The other chain was at work while the answers arrived: a run of it started before the burst ended and
    # finished after it started (or had not finished yet).
    overlapping = Run.objects.filter(chain=running_on, started_at__lte=ended).filter(
        Q(finished_at__gte=started) | Q(finished_at__isnull=True)
    )
    assert overlapping.exists()
    wait_until(
        lambda: _settled(question), timeout=300, what="every run to end", workers=[agent, server_checks], sweep=False
    )
    chain = Chain.objects.get(question=question, capability=capability)
    assert chain.answer.revision == CONCURRENT_ANSWERS + 1  # the chain checks the newest answer
    assert RunResult.objects.filter(run__chain=chain).exists()
    assert all(state == stages.PASSED for _, state, _ in selectors.chain_stages(running_on))
    assert list(Run.objects.exclude(attempt__lte=1).values_list("pk", "attempt")) == []
    assert list(RunResult.objects.exclude(attempt=1).values_list("run", "attempt")) == []
    assert "worker was lost" not in "".join(Run.objects.values_list("log", flat=True))
    assert "deadlock" not in server_checks.log_text()
    assert "did not answer (5" not in agent.log_text()  # no post of the agent's met a server error


def _claimed_claim_run(chain) -> Run:
    run = Run.objects.get(chain=chain, stage=stages.CLAIM, state=stages.QUEUED)
    status, claimed = run_claim(run.pk, "test-worker")
    assert status == "claimed"
    return claimed


def _fail_first(monkeypatch, times: int) -> list[str]:
    """Make the first `times` verdict transactions fail on a real database error raised inside them
    (a statement timeout), after the run's row is locked."""
    failures: list[str] = []
    real = finishing._finish_locked

    def finish_or_fail(*args, **kwargs):
        if len(failures) < times:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = 1")
                try:
                    cursor.execute("SELECT pg_sleep(1)")
                except OperationalError as error:
                    failures.append(str(error))
                    raise
        return real(*args, **kwargs)

    monkeypatch.setattr(finishing, "_finish_locked", finish_or_fail)
    return failures


@pytest.mark.django_db(transaction=True)
def test_a_verdict_transaction_that_fails_on_a_database_error_is_retried_in_place(
    monkeypatch, simulator_online, answer
):
    monkeypatch.setattr(finishing, "VERDICT_RETRY_PAUSE_SECONDS", 0.01)
    chain = Chain.objects.get(answer=answer)
    run = _claimed_claim_run(chain)
    reporter = RunReporter(run)
    reporter.note("checked the claim")
    failures = _fail_first(monkeypatch, 2)

    assert run_finish(run, worker="test-worker", outcome=StageOutcome(stages.PASS, "ok"), reporter=reporter)

    assert len(failures) == 2 and "statement timeout" in failures[0]
    run.refresh_from_db()
    assert (run.state, run.attempt) == (stages.PASSED, 1)
    assert "checked the claim" in run.log  # the output is written once, by the attempt that committed
    assert run.log.count("checked the claim") == 1
    assert list(RunResult.objects.filter(run=run).values_list("attempt", "verdict")) == [(1, stages.PASS)]
    assert Run.objects.filter(chain=chain, stage=stages.ARTIFACT, state=stages.QUEUED).exists()


def _drop_connection(failures: list[str], times: int):
    """An execute wrapper that closes the database connection under each of the first `times` statements, as
    a database going away does: the statement fails on the closed connection, and the next try connects again."""

    def drop(execute, sql, params, many, context):
        if len(failures) >= times:
            return execute(sql, params, many, context)
        context["connection"].connection.close()
        try:
            return execute(sql, params, many, context)
        except (OperationalError, InterfaceError) as error:
            failures.append(str(error))
            raise

    return drop


@pytest.mark.django_db(transaction=True)
def test_a_verdict_write_waits_out_a_database_outage_within_the_lease(monkeypatch, simulator_online, answer):
    """Twenty dropped connections in a row, more than the five tries a verdict used to get: one verdict, by the
    attempt that ran the stage, and the chain moves on."""
    monkeypatch.setattr(finishing, "VERDICT_RETRY_PAUSE_SECONDS", 0.01)
    chain = Chain.objects.get(answer=answer)
    run = _claimed_claim_run(chain)
    reporter = RunReporter(run)
    failures: list[str] = []

    with connection.execute_wrapper(_drop_connection(failures, 20)):
        assert run_finish(run, worker="test-worker", outcome=StageOutcome(stages.PASS, "ok"), reporter=reporter)

    assert len(failures) == 20
    run.refresh_from_db()
    assert (run.state, run.attempt) == (stages.PASSED, 1)
    assert list(RunResult.objects.filter(run=run).values_list("attempt", "verdict")) == [(1, stages.PASS)]
    assert Run.objects.filter(chain=chain, stage=stages.ARTIFACT, state=stages.QUEUED).exists()


@pytest.mark.django_db(transaction=True)
def test_a_verdict_write_gives_up_when_the_lease_runs_out(monkeypatch, settings, simulator_online, answer):
    """An outage longer than the lease: the error is raised (the message goes back to the broker) once the
    attempt no longer holds the run, and nothing is written."""
    monkeypatch.setattr(finishing, "VERDICT_RETRY_PAUSE_SECONDS", 0.01)
    settings.ACCEPTANCE_RUN_LEASE_SECONDS = 2  # time for more than the old five tries, on a loaded machine too
    settings.ACCEPTANCE_RUN_HEARTBEAT_SECONDS = 0.05  # the longest pause between tries
    chain = Chain.objects.get(answer=answer)
    run = _claimed_claim_run(chain)
    failures: list[str] = []

    with (
        pytest.raises((OperationalError, InterfaceError)),
        connection.execute_wrapper(_drop_connection(failures, 10**6)),
    ):
        run_finish(run, worker="test-worker", outcome=StageOutcome(stages.PASS, "ok"), reporter=RunReporter(run))

    assert timezone.now() >= run.lease_expires_at - timedelta(seconds=0.05)
    assert len(failures) > 5
    run.refresh_from_db()
    assert run.state == stages.RUNNING  # nothing written: the lease and the sweeper take it from here
    assert not RunResult.objects.filter(run=run).exists()
