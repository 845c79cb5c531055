"""The agent's endpoints from outside, as an agent calls them: tokens scoped to one target, revocation, the
claim, signed results (forged, twice, late) and the lease. A health job stands for any runner stage."""

import base64
import io
import json
from datetime import timedelta

import pytest
from calculet_agent.signing import SIGNATURE_HEADER, public_key_text, sign
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from rest_framework.test import APIClient

from acceptance import stages
from acceptance.models import Run, RunResult, Target, TargetAgent, TargetToken
from acceptance.protocol import SCHEMA_VERSION
from acceptance.services import runs_sweep, target_ensure_simulator, target_health_check_start, target_register
from acceptance.services.agents import target_token_create, target_token_revoke
from calculet.actors import SYSTEM
from calculet.models import AuditEntry

pytestmark = pytest.mark.django_db

ENDED_WITH_ERROR = {"exit_code": 1, "limit_hit": None, "reason": "the runner exited with 1", "sandbox": {}}


class Agent:
    """One agent: its key pair and target token, speaking to the API as calculet-agent does."""

    def __init__(self, token_key: str):
        self.key = Ed25519PrivateKey.generate()
        self.token_key = token_key
        self.http = APIClient()
        self.agent_id: int | None = None

    def post(self, path, payload, *, auth=None, headers=None):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        auth = auth or f"Target {self.token_key}"
        return self.http.generic(
            "POST", f"/api/v1/agent/{path}", body, content_type="application/json", HTTP_AUTHORIZATION=auth,
            headers=headers or {},
        )  # fmt: skip

    def register(self, host="board-host-1"):
        answer = self.post("register/", {"host": host, "public_key": public_key_text(self.key), "agent_version": "t"})
        if answer.status_code == 200:
            self.agent_id = answer.json()["agent"]
        return answer

    def claim(self):
        return self.post("claim/", {"agent": self.agent_id})

    def result(self, claimed: dict, report: dict, *, signature: str | None = None, key=None):
        bound = {"run": claimed["run"], "attempt": claimed["job"]["attempt"]}
        body = json.dumps({"chunks": [], "result_file": None, **bound, **report}).encode()
        signature = sign(key or self.key, body) if signature is None else signature
        return self.post(
            f"runs/{claimed['run']}/result/", body, auth=f"Run {claimed['run_token']}",
            headers={SIGNATURE_HEADER: signature} if signature else {},
        )  # fmt: skip


@pytest.fixture
def simulator():
    return target_ensure_simulator()


@pytest.fixture
def agent(simulator):
    _, key = target_token_create(actor=SYSTEM, target=simulator, name="host 1")
    agent = Agent(key)
    assert agent.register().status_code == 200
    return agent


@pytest.fixture
def health_run(agent, simulator):
    assert agent.claim().status_code == 204  # the first poll: the target is served from now on
    return target_health_check_start(simulator)


def test_a_claim_takes_the_run_once_and_gives_a_run_token_for_that_attempt(agent, health_run):
    claimed = agent.claim()
    assert claimed.status_code == 200, claimed.json()
    job = claimed.json()["job"]
    assert claimed.json()["run"] == health_run.pk and job["stage"] == stages.HEALTH
    assert [item["name"] for item in job["inputs"]] == ["inputs/calbin.tar"]
    health_run.refresh_from_db()
    assert health_run.state == stages.RUNNING and health_run.worker.startswith("agent board-host-1")
    assert agent.claim().status_code == 204  # a second agent of the target would find nothing either
    fetched = agent.http.get(
        f"/api/v1/agent/runs/{health_run.pk}/inputs/{job['inputs'][0]['sha256']}/",
        HTTP_AUTHORIZATION=f"Run {claimed.json()['run_token']}",
        HTTP_RANGE="bytes=10-",
    )
    assert fetched.status_code == 206 and fetched["Content-Range"].startswith("bytes 10-")
    other = agent.http.get(
        f"/api/v1/agent/runs/{health_run.pk}/inputs/{'0' * 64}/",
        HTTP_AUTHORIZATION=f"Run {claimed.json()['run_token']}",
    )
    assert other.status_code == 403 and "is not an input" in other.json()["errors"][0]["message"]


def test_a_result_sent_twice_is_one_verdict(agent, health_run):
    claimed = agent.claim().json()
    first = agent.result(claimed, ENDED_WITH_ERROR)
    again = agent.result(claimed, ENDED_WITH_ERROR)
    assert first.status_code == again.status_code == 200, first.json()
    assert first.json() == again.json() and first.json()["verdict"] == stages.ERROR
    assert RunResult.objects.filter(run=health_run).count() == 1
    assert AuditEntry.objects.filter(action="run.finish", object_id=str(health_run.pk)).count() == 1


def test_a_forged_or_missing_signature_is_refused_and_audited(agent, health_run):
    claimed = agent.claim().json()
    forged = agent.result(claimed, ENDED_WITH_ERROR, key=Ed25519PrivateKey.generate())
    assert forged.status_code == 403
    assert forged.json()["errors"][0]["field"] == "signature"
    unsigned = agent.result(claimed, ENDED_WITH_ERROR, signature="")
    assert unsigned.status_code == 403
    tampered_body_signature = sign(agent.key, b"{}")
    assert agent.result(claimed, ENDED_WITH_ERROR, signature=tampered_body_signature).status_code == 403
    assert not RunResult.objects.filter(run=health_run).exists()
    health_run.refresh_from_db()
    assert health_run.state == stages.RUNNING
    assert AuditEntry.objects.filter(action="run.result_refused", object_id=str(health_run.pk)).count() == 3


def test_a_measurement_file_changed_after_signing_is_refused_and_audited(agent, health_run):
    """The measurement files travel in the signed body: changing one after signing breaks the signature."""
    claimed = agent.claim().json()
    signed = {**ENDED_WITH_ERROR, "chunks": [], "result_file": None, "run": claimed["run"], "attempt": 1}
    signed["measurements"] = {"golden-actual.npz": base64.b64encode(b"what the runner measured").decode()}
    body = json.dumps(signed).encode()
    signature = sign(agent.key, body)
    tampered = body.replace(
        signed["measurements"]["golden-actual.npz"].encode(), base64.b64encode(b"other").decode().encode()
    )
    refused = agent.post(
        f"runs/{claimed['run']}/result/", tampered, auth=f"Run {claimed['run_token']}",
        headers={SIGNATURE_HEADER: signature},
    )  # fmt: skip
    assert refused.status_code == 403 and refused.json()["errors"][0]["field"] == "signature"
    assert AuditEntry.objects.filter(action="run.result_refused", object_id=str(health_run.pk)).count() == 1
    # Signed as sent, it is still not a file a health job measures into.
    wrong = agent.post(
        f"runs/{claimed['run']}/result/", body, auth=f"Run {claimed['run_token']}",
        headers={SIGNATURE_HEADER: signature},
    )  # fmt: skip
    assert (
        wrong.status_code == 400
        and "A health result carries no golden-actual.npz" in wrong.json()["errors"][0]["message"]
    )
    assert not RunResult.objects.filter(run=health_run).exists()


def test_a_late_result_after_the_run_was_sent_again_is_refused_naming_why(agent, health_run):
    late = agent.claim().json()
    Run.objects.filter(pk=health_run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    lapsed = agent.result(late, ENDED_WITH_ERROR)
    assert lapsed.status_code == 409 and "lease of attempt 1" in lapsed.json()["errors"][0]["message"]
    runs_sweep()
    again = agent.claim().json()
    assert again["run"] == health_run.pk and again["job"]["attempt"] == 2
    refused = agent.result(late, ENDED_WITH_ERROR)
    assert refused.status_code == 409
    assert "was sent again: attempt 2 holds it" in refused.json()["errors"][0]["message"]
    heartbeat = agent.post(f"runs/{health_run.pk}/heartbeat/", {"chunks": []}, auth=f"Run {late['run_token']}")
    assert heartbeat.status_code == 409
    assert agent.result(again, ENDED_WITH_ERROR).status_code == 200
    assert list(RunResult.objects.filter(run=health_run).values_list("attempt", flat=True)) == [2]


def test_a_revoked_target_token_stops_the_agent_and_its_run_token(agent, health_run):
    claimed = agent.claim().json()
    target_token_revoke(actor=SYSTEM, token=health_run.target.tokens.get())
    assert agent.claim().status_code == 401
    heartbeat = agent.post(f"runs/{health_run.pk}/heartbeat/", {"chunks": []}, auth=f"Run {claimed['run_token']}")
    assert heartbeat.status_code == 401
    assert agent.result(claimed, ENDED_WITH_ERROR).status_code == 401
    # Its lease is not renewed: once it lapses, the sweeper sends the run again.
    Run.objects.filter(pk=health_run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    runs_sweep()
    health_run.refresh_from_db()
    assert health_run.state == stages.QUEUED and health_run.attempt == 1


def test_another_targets_token_reaches_neither_its_runs_nor_its_agents(agent, health_run):
    board = target_register(
        actor=SYSTEM, slug="board-1", kind=Target.HARDWARE, calrt_version="0.7.6", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c", runner_command="/opt/runner",
    )  # fmt: skip
    _, board_key = target_token_create(actor=SYSTEM, target=board, name="board host")
    intruder = Agent(board_key)
    intruder.key = agent.key  # the simulator agent's key, offered for another target
    refused = intruder.register()
    assert refused.status_code == 403 and refused.json()["errors"][0]["field"] == "public_key"
    intruder = Agent(board_key)
    assert intruder.register().status_code == 200
    assert intruder.claim().status_code == 204  # the simulator's queued health run is not the board's
    assert intruder.post("claim/", {"agent": agent.agent_id}).status_code == 403
    claimed = agent.claim().json()
    board_run = target_health_check_start(board)
    wrong_run = agent.post(f"runs/{board_run.pk}/heartbeat/", {"chunks": []}, auth=f"Run {claimed['run_token']}")
    assert wrong_run.status_code == 403
    assert agent.post("claim/", {"agent": agent.agent_id}, auth="Target clt_target_guessed").status_code == 401


def test_heartbeats_renew_the_lease_and_write_each_output_chunk_once(agent, health_run):
    claimed = agent.claim().json()
    health_run.refresh_from_db()
    before = health_run.lease_expires_at
    chunks = [{"index": 0, "stream": "stdout", "text": "first line\n"}]
    auth = f"Run {claimed['run_token']}"
    for _ in range(2):  # the first answer was lost on the way back: the agent sends the same chunk again
        assert agent.post(f"runs/{health_run.pk}/heartbeat/", {"chunks": chunks}, auth=auth).status_code == 204
    chunks.append({"index": 1, "stream": "stderr", "text": "PROGRESS 40 fetching\n"})
    assert agent.post(f"runs/{health_run.pk}/heartbeat/", {"chunks": chunks}, auth=auth).status_code == 204
    health_run.refresh_from_db()
    assert health_run.log.count("first line") == 1
    assert health_run.progress == 40 and health_run.lease_expires_at > before
    bad = agent.post(f"runs/{health_run.pk}/heartbeat/", {"chunks": [{"index": -1}]}, auth=auth)
    assert bad.status_code == 400


def test_a_passing_result_of_the_runner_is_judged_by_the_server(agent, health_run, simulator):
    claimed = agent.claim().json()
    result = {
        "schema_version": 2, "stage": stages.HEALTH, "verdict": "pass", "checks": [], "metrics": {},
        "device": {"kind": "simulator", **simulator.registered_versions()},
    }  # fmt: skip
    report = {**ENDED_WITH_ERROR, "exit_code": 0, "result_file": base64.b64encode(json.dumps(result).encode()).decode()}
    answer = agent.result(claimed, report)
    assert answer.status_code == 200 and answer.json()["verdict"] == stages.PASS, answer.json()
    health_run.refresh_from_db()
    assert health_run.result["agent"]["host"] == "board-host-1"
    wrong_device = {**result, "device": {**result["device"], "firmware": "9.9.9"}}
    second = target_health_check_start(simulator)
    claimed = agent.claim().json()
    assert claimed["run"] == second.pk
    report["result_file"] = base64.b64encode(json.dumps(wrong_device).encode()).decode()
    answer = agent.result(claimed, report)
    assert answer.json()["verdict"] == stages.ERROR and "firmware 9.9.9" in answer.json()["reason"]


BOARD = {
    "calrt_version": "0.7.6", "driver_version": "2.3.0", "firmware_version": "1.8.0", "chip": "calculet-2c",
    "runner_command": "/opt/runner",
}  # fmt: skip


def board_agent() -> tuple[Target, Agent]:
    board = target_register(actor=SYSTEM, slug="board-1", kind=Target.HARDWARE, **BOARD)
    _, key = target_token_create(actor=SYSTEM, target=board, name="board host")
    return board, Agent(key)


def register_board(agent: Agent, **sent):
    payload = {"host": "lab-3", "public_key": public_key_text(agent.key), "agent_version": "t", **sent}
    answer = agent.post("register/", payload)
    assert answer.status_code == 200, answer.json()
    agent.agent_id = answer.json()["agent"]
    return answer


def test_what_the_host_registers_waits_for_a_pm_s_approval_and_no_run_is_claimed_before(pm_client, vendor_user):
    """The host is the vendor's: the versions and runner it says the board has are not taken on its word. Its
    first registration and every change wait, the board out of rotation, until a PM or operator approves."""
    board, agent = board_agent()
    digest = "ab" * 32
    register_board(agent, firmware_version="1.9.0", runner_command="/opt/runner-2 --fast", runner_digest=digest)
    board.refresh_from_db()
    # Nothing the host said is applied yet: the board keeps what the team registered.
    assert (board.firmware_version, board.runner_command, board.runner_digest) == ("1.8.0", "/opt/runner", "")
    pending = board.registration_pending
    assert pending["first"] is True and pending["host"] == "lab-3"
    assert pending["changes"] == {
        "runner_command": ["/opt/runner", "/opt/runner-2 --fast"],
        "runner_digest": ["", digest],
        "firmware_version": ["1.8.0", "1.9.0"],
    }
    health = target_health_check_start(board)
    assert agent.claim().status_code == 204  # not even the health check runs on what is not approved
    health.refresh_from_db()
    assert health.state == stages.PENDING and health.attempt == 0
    shown = pm_client.get("/api/v1/targets/board-1/").json()
    assert shown["in_rotation"] is False and shown["health"] == Target.DEGRADED
    assert shown["health_reason"].startswith("out of rotation until a PM or operator approves the first registration")
    assert "firmware_version 1.8.0 -> 1.9.0" in shown["health_reason"]
    assert "runner_command /opt/runner -> /opt/runner-2 --fast" in shown["health_reason"]
    assert AuditEntry.objects.filter(action="target.registration_pending", object_id=str(board.pk)).count() == 1

    # A vendor cannot approve what its own host said.
    vendor = APIClient()
    vendor.force_login(vendor_user)
    refused = vendor.post("/api/v1/targets/board-1/registration/approve/")
    assert refused.status_code == 403
    approved = pm_client.post("/api/v1/targets/board-1/registration/approve/")
    assert approved.status_code == 200, approved.json()
    assert approved.json()["registration_pending"] == {}
    board.refresh_from_db()
    assert (board.firmware_version, board.runner_command, board.runner_digest) == (
        "1.9.0", "/opt/runner-2 --fast", digest,
    )  # fmt: skip
    assert board.registration_approved_at is not None
    approval = AuditEntry.objects.get(action="target.registration_approve", object_id=str(board.pk))
    assert approval.actor_label == "pam" and approval.after["firmware_version"] == "1.9.0"
    assert pm_client.post("/api/v1/targets/board-1/registration/approve/").status_code == 409  # nothing waits
    # Approved, the health check that waited is claimed.
    claimed = agent.claim()
    assert claimed.status_code == 200 and claimed.json()["run"] == health.pk

    # The same registration again needs nothing; a changed runner (the same command, another file) does.
    register_board(agent, firmware_version="1.9.0", runner_command="/opt/runner-2 --fast", runner_digest=digest)
    board.refresh_from_db()
    assert board.registration_pending == {}
    register_board(agent, runner_command="/opt/runner-2 --fast", runner_digest="cd" * 32)
    board.refresh_from_db()
    assert board.registration_pending["first"] is False
    assert board.registration_pending["changes"] == {"runner_digest": [digest, "cd" * 32]}
    assert pm_client.get("/api/v1/targets/board-1/").json()["in_rotation"] is False
    # Sent back to what was approved, it waits no more (and is audited as withdrawn).
    register_board(agent, runner_command="/opt/runner-2 --fast", runner_digest=digest)
    board.refresh_from_db()
    assert board.registration_pending == {}
    assert AuditEntry.objects.filter(action="target.registration_withdrawn", object_id=str(board.pk)).count() == 1
    bad = agent.post("register/", {"host": "lab-3", "public_key": "not a key", "agent_version": "t"})
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "public_key"
    bad = agent.post(
        "register/", {"host": "lab-3", "public_key": public_key_text(agent.key), "agent_version": "t",
                      "runner_digest": "not hex"},
    )  # fmt: skip
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "runner_digest"


def test_the_simulator_s_agent_changing_its_versions_waits_for_approval_too(agent, simulator, pm_user):
    """The simulator's versions are calculet's own, so its agent's first registration needs no approval; a
    version it says differs does, as a board's."""
    simulator.refresh_from_db()
    assert simulator.registration_pending == {}
    answer = agent.post(
        "register/", {"host": "board-host-1", "public_key": public_key_text(agent.key), "agent_version": "t",
                      "calrt_version": "9.9.9", "runner_command": "ignored: the simulator runs its own"},
    )  # fmt: skip
    assert answer.status_code == 200
    simulator.refresh_from_db()
    assert simulator.registration_pending["changes"] == {"calrt_version": [simulator.calrt_version, "9.9.9"]}
    health = target_health_check_start(simulator)
    assert agent.claim().status_code == 204
    health.refresh_from_db()
    assert health.state == stages.PENDING


def test_the_admin_and_the_command_approve_a_registration_and_only_a_pm_or_operator_may(
    client, capsys, pm_user, vendor_user
):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    board, agent = board_agent()
    register_board(agent)  # a board's first agent registration waits even when it says nothing new
    call_command("target_registration", "show", "board-1")
    shown = capsys.readouterr().out.strip()
    assert shown == "out of rotation until a PM or operator approves the first registration agent lab-3 sent"
    register_board(agent, chip="calculet-3")
    call_command("target_registration", "show", "board-1")
    assert "chip calculet-2c -> calculet-3" in capsys.readouterr().out
    with pytest.raises(CommandError, match="Only a PM or an operator"):
        call_command("target_registration", "approve", "board-1", "--user", vendor_user.username)
    call_command("target_registration", "approve", "board-1", "--user", pm_user.username)
    assert "approved by pam" in capsys.readouterr().out
    board.refresh_from_db()
    assert board.chip == "calculet-3" and board.registration_pending == {}

    register_board(agent, chip="calculet-4")
    pm_user.is_staff = pm_user.is_superuser = True  # the admin, as the PM
    pm_user.save()
    client.force_login(pm_user)
    client.post("/admin/acceptance/target/", {"action": "approve_registration", "_selected_action": [board.pk]})
    board.refresh_from_db()
    assert board.chip == "calculet-4" and board.registration_pending == {}
    assert AuditEntry.objects.filter(action="target.registration_approve").count() == 2


def test_the_integration_team_makes_and_revokes_tokens_in_the_admin_and_with_the_command(simulator, client, capsys):
    from django.contrib.auth.models import User
    from django.core.management import call_command

    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.post(
        "/admin/acceptance/target/", {"action": "make_agent_token", "_selected_action": [simulator.pk]}, follow=True
    )
    shown = page.content.decode()
    key = shown.split("key ", 1)[1].split(" ", 1)[0]
    token = simulator.tokens.get()
    assert key.startswith("clt_target_") and token.key_hash != key and key not in token.key_hash
    assert Agent(key).register().status_code == 200
    client.post("/admin/acceptance/targettoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert Agent(key).register().status_code == 401

    call_command("target_token", "create", "simulator", "--name", "lab host")
    made = capsys.readouterr().out.strip().splitlines()[-1]
    assert Agent(made).register().status_code == 200
    newest = simulator.tokens.order_by("-pk").first()
    call_command("target_token", "revoke", str(newest.pk))
    assert Agent(made).register().status_code == 401
    assert AuditEntry.objects.filter(action="target_token.revoke").count() == 2


def test_the_command_makes_a_host_s_token_anew_into_a_file_only_its_owner_reads(db, tmp_path, capsys):
    """As `scripts/dev.py run` makes the simulator's at each start: the bundled target made on first use, the
    token of that name made before revoked, the new key written to the agent's token file and never printed."""
    from django.core.management import call_command

    key_file = tmp_path / "agent" / "token"
    call_command("target_token", "create", "simulator", "--name", "laptop", "--replace", "--key-file", str(key_file))
    first = key_file.read_text().strip()
    _, other_key = target_token_create(actor=SYSTEM, target=target_ensure_simulator(), name="lab host")
    call_command("target_token", "create", "simulator", "--name", "laptop", "--replace", "--key-file", str(key_file))
    second = key_file.read_text().strip()
    output = capsys.readouterr().out
    assert first not in output and second not in output and f"its key is in {key_file}" in output
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert Agent(first).register().status_code == 401  # replaced
    assert Agent(second).register().status_code == 200
    assert Agent(other_key).register().status_code == 200  # another host's token of the target is left alone
    live = target_ensure_simulator().tokens.filter(revoked_at__isnull=True)
    assert sorted(live.values_list("name", flat=True)) == ["lab host", "laptop"]
    # Without --replace a second token of the name is made beside the first, as before.
    call_command("target_token", "create", "simulator", "--name", "laptop")
    assert live.filter(name="laptop").count() == 2


@pytest.fixture
def pm_client(client, pm_user):
    client.force_login(pm_user)
    return client


def test_a_run_served_by_an_agent_records_its_time_split_and_the_agent_its_state(agent, health_run, pm_client):
    claimed = agent.claim().json()
    agent_row = TargetAgent.objects.get(pk=agent.agent_id)
    assert agent_row.current_run_id == health_run.pk
    health_run.refresh_from_db()
    assert health_run.timing["queue_wait"] >= 0 and set(health_run.timing) == {"queue_wait"}
    page = pm_client.get("/").content.decode()
    assert "board-host-1" in page and f"running #{health_run.pk}" in page

    report = {**ENDED_WITH_ERROR, "timing": {"fetch": 1.25, "runner": 2.5}}
    assert agent.result(claimed, report).status_code == 200
    health_run.refresh_from_db()
    assert set(health_run.timing) == {"queue_wait", "fetch", "runner", "post"}, health_run.timing
    assert (health_run.timing["fetch"], health_run.timing["runner"]) == (1.25, 2.5)
    assert 0 <= health_run.timing["post"] < 60
    assert agent.post("claim/", {"agent": agent.agent_id, "cache_bytes": 3 * 1024**2}).status_code == 204
    agent_row.refresh_from_db()
    assert agent_row.current_run_id is None and agent_row.cache_bytes == 3 * 1024**2
    assert agent_row.last_poll_at is not None
    page = pm_client.get("/").content.decode()
    assert "idle" in page and "3.0\xa0MB" in page

    shown = pm_client.get(f"/api/v1/runs/{health_run.pk}/").json()
    assert shown["timing"] == health_run.timing
    [served] = pm_client.get("/api/v1/targets/simulator/").json()["agents"]
    assert (served["host"], served["current_run"], served["cache_bytes"]) == ("board-host-1", None, 3 * 1024**2)
    # A negative time is not a time.
    second = target_health_check_start(health_run.target)
    claimed = agent.claim().json()
    assert claimed["run"] == second.pk
    refused = agent.result(claimed, {**ENDED_WITH_ERROR, "timing": {"fetch": -1}})
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "timing.fetch"


def test_the_target_is_pulled_while_it_has_a_live_token_and_no_longer_once_the_last_is_revoked(simulator):
    first, _ = target_token_create(actor=SYSTEM, target=simulator, name="host 1")
    second, _ = target_token_create(actor=SYSTEM, target=simulator, name="host 2")
    simulator.refresh_from_db()
    assert simulator.pulled
    target_token_revoke(actor=SYSTEM, token=first)
    simulator.refresh_from_db()
    assert simulator.pulled  # host 2's agents still serve it
    target_token_revoke(actor=SYSTEM, token=second)
    simulator.refresh_from_db()
    assert not simulator.pulled  # its runs go to its Celery queue again
    revoked = AuditEntry.objects.filter(action="target_token.revoke").order_by("pk")
    assert [entry.after["pulled"] for entry in revoked] == [True, False]
    target_token_create(actor=SYSTEM, target=simulator, name="host 3")
    simulator.refresh_from_db()
    assert simulator.pulled


def test_a_target_token_is_named_by_its_command_which_refuses_a_blank_name_and_cuts_a_long_one(simulator):
    with pytest.raises(CommandError, match=r"^name: Name the token \(the host it is for\)\.$"):
        call_command("target_token", "create", "simulator", "--name", "   ", stdout=io.StringIO())
    assert not TargetToken.objects.exists()
    call_command("target_token", "create", "simulator", "--name", f"  host {'x' * 200}  ", stdout=io.StringIO())
    token = TargetToken.objects.get()
    assert token.name == f"host {'x' * 95}"
    assert AuditEntry.objects.get(action="target_token.create").after["name"] == token.name


def test_a_signed_result_posted_for_another_run_is_refused_and_audited(agent, health_run, simulator):
    """The signed body names its run and attempt: the same bytes posted with another run's token prove nothing."""
    claimed = agent.claim().json()
    assert agent.result(claimed, ENDED_WITH_ERROR).status_code == 200
    second_run = target_health_check_start(simulator)
    claimed_again = agent.claim().json()
    assert claimed_again["run"] == second_run.pk
    body = json.dumps(
        {"chunks": [], "result_file": None, "run": claimed["run"], "attempt": 1, **ENDED_WITH_ERROR}
    ).encode()
    replayed = agent.post(
        f"runs/{second_run.pk}/result/", body, auth=f"Run {claimed_again['run_token']}",
        headers={SIGNATURE_HEADER: sign(agent.key, body)},
    )  # fmt: skip
    assert replayed.status_code == 403, replayed.json()
    error = replayed.json()["errors"][0]
    assert error["field"] == "run" and f"signed for run {health_run.pk} attempt 1" in error["message"]
    second_run.refresh_from_db()
    assert second_run.state == stages.RUNNING and not RunResult.objects.filter(run=second_run).exists()
    assert AuditEntry.objects.filter(action="run.result_refused", object_id=str(second_run.pk)).count() == 1


@pytest.mark.parametrize(
    ("sandbox", "field"),
    [([], "sandbox"), ({"detached_processes": "many"}, "sandbox.detached_processes"),
     ({"detached_processes": -5}, "sandbox.detached_processes"),
     # What jsonb cannot store: each used to end the post in a 500 from the database.
     ({"detached_processes": 0, "load": float("nan")}, None),
     ({"detached_processes": 0, "load": float("inf")}, None),
     ({"detached_processes": 0, "note": "a\x00b"}, None),
     ({"detached_processes": 0, "note": "\ud800"}, None),
     ({"detached_processes": 0, "deep": json.loads("[" * 40 + "]" * 40)}, None)],
)  # fmt: skip
def test_a_malformed_sandbox_record_is_a_400_naming_it_and_changes_nothing(agent, health_run, sandbox, field):
    claimed = agent.claim().json()
    answer = agent.result(claimed, {**ENDED_WITH_ERROR, "sandbox": sandbox})
    assert answer.status_code == 400, answer.content
    assert answer.json()["errors"][0]["field"] == field
    health_run.refresh_from_db()
    assert health_run.state == stages.RUNNING and not RunResult.objects.filter(run=health_run).exists()


def test_a_pm_approves_a_registration_with_the_dashboard_s_button(pm_client, vendor_user):
    board, agent = board_agent()
    register_board(agent, driver_version="2.4.0")
    page = pm_client.get("/").content.decode()
    assert "driver_version 2.3.0 -&gt; 2.4.0" in page
    assert 'action="/targets/board-1/registration/approve"' in page
    chinese = pm_client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "暂停接收运行，直到 PM 或操作员批准 agent lab-3 发来的首次注册：driver_version 2.3.0 -&gt; 2.4.0" in chinese
    vendor = APIClient()
    vendor.force_login(vendor_user)
    assert vendor.post("/targets/board-1/registration/approve").status_code == 404
    board.refresh_from_db()
    assert board.registration_pending
    done = pm_client.post("/targets/board-1/registration/approve", follow=True).content.decode()
    assert "The registration of board-1 is approved." in done
    board.refresh_from_db()
    assert board.driver_version == "2.4.0" and board.registration_pending == {}
    assert 'action="/targets/board-1/registration/approve"' not in done
    chinese = pm_client.post("/targets/board-1/registration/approve", follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "目标 board-1 没有等待批准的 agent 注册。" in chinese.content.decode()


@pytest.mark.parametrize(
    ("metric", "why"),
    [
        ("NaN", "NaN is not JSON"),
        ("1e400", "1e400 is past a double's range"),
        ('"a\\u0000b"', "metrics.m holds a NUL character"),
        ('"\\udc00"', "metrics.m holds a lone surrogate"),
    ],
)
def test_a_result_file_the_database_cannot_store_ends_the_run_in_a_protocol_error(agent, health_run, metric, why):
    """Python's json.dump writes NaN for a float NaN: a careless runner's metric used to make the agent's post
    a 500 (the run then waited for its lease), not a verdict."""
    claimed = agent.claim().json()
    result = (
        f'{{"schema_version": {SCHEMA_VERSION}, "stage": "{claimed["job"]["stage"]}", "verdict": "fail", '
        f'"checks": [{{"name": "x", "passed": false, "detail": "d"}}], "metrics": {{"m": {metric}}}}}'
    )
    report = {
        **ENDED_WITH_ERROR,
        "exit_code": 0,
        "reason": "",
        "result_file": base64.b64encode(result.encode()).decode(),
    }
    answer = agent.result(claimed, report)
    assert answer.status_code == 200, answer.content
    assert answer.json()["verdict"] == stages.ERROR
    assert answer.json()["reason"] == f"runner protocol violated: the result file is not JSON: {why}"
