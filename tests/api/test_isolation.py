"""Every endpoint, as vendor A on vendor B's objects, and with no, an expired or a revoked token."""

import datetime
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from acceptance import stages
from acceptance.models import Chain, Run
from acceptance.selectors import attention
from acceptance.services import answer_submit, chain_start_for_answer
from calculet.actors import SYSTEM
from calculet.errors import ConflictError
from calculet.models import AuditEntry
from tests.factories import (
    answer_draft,
    complete_answer,
    db_snapshot,
    make_chain,
    make_question,
    make_run,
    make_run_evidence,
    pass_stages,
)
from vendor.inputs import ArtifactDeclaration
from vendor.models import ApiToken, Question
from vendor.services.deliverables import deliverable_accept
from vendor.services.organisations import token_create, token_revoke
from vendor.services.uploads import upload_create

CHUNK = {"HTTP_TUS_RESUMABLE": "1.0.0", "HTTP_UPLOAD_OFFSET": "0", "content_type": "application/offset+octet-stream"}


@pytest.fixture
def world(pm, vendor_a, vendor_b, question_a, question_b, artifacts_a, artifacts_b, capability):
    """Vendor B's answer, artifacts, upload and token, next to vendor A's own question."""
    answer_b = answer_submit(actor=vendor_b.user, question=question_b, draft=answer_draft(complete_answer(artifacts_b)))
    chain_start_for_answer(answer_b.pk)
    upload_b = upload_create(
        actor=vendor_b.user,
        length=10,
        declaration=ArtifactDeclaration(kind="golden", version="3.0", file_name="g.npz", sha256="a" * 64),
    )
    token_b = ApiToken.objects.get(user=vendor_b.user)
    capability.questions.add(question_b)
    run_b = Run.objects.get(answer=answer_b)
    return {
        "question": question_b.code,
        "own_question": question_a.code,
        "answer": answer_b.pk,
        "artifact": artifacts_b["golden"].pk,
        "upload": str(upload_b.pk),
        "token": token_b.pk,
        "run": run_b.pk,
        "capability": capability.slug,
        "evidence": make_run_evidence(run_b, grade="E4", capability=capability).code,
    }


def endpoints(w: dict) -> list[tuple[str, str, dict]]:
    """(method, path, extra) for every operation that takes an object: all must answer 404 to vendor A."""
    question = f"/api/v1/questions/{w['question']}/"
    upload = f"/api/v1/uploads/{w['upload']}/"
    return [
        ("get", question, {}),
        ("patch", question, {"data": {"priority": "p0"}, "format": "json"}),
        ("get", f"{question}answers/", {}),
        ("post", f"{question}answers/", {"data": {"version": "1.0"}, "format": "json"}),
        ("get", f"{question}answers/{w['answer']}/", {}),
        ("get", f"/api/v1/questions/{w['own_question']}/answers/{w['answer']}/", {}),
        ("get", f"/api/v1/artifacts/{w['artifact']}/", {}),
        ("get", f"/api/v1/artifacts/{w['artifact']}/download/", {}),
        ("get", f"/api/v1/artifacts/{w['artifact']}/download/", {"HTTP_RANGE": "bytes=0-3"}),
        ("head", upload, {"HTTP_TUS_RESUMABLE": "1.0.0"}),
        ("get", upload, {}),
        ("patch", upload, {"data": b"0123456789", **CHUNK}),
        ("delete", upload, {"HTTP_TUS_RESUMABLE": "1.0.0"}),
        ("delete", f"/api/v1/tokens/{w['token']}/", {}),
        ("get", f"/api/v1/runs/{w['run']}/", {}),
        ("post", f"/api/v1/runs/{w['run']}/rerun/", {}),
        ("get", f"/api/v1/evidence/{w['evidence']}/", {}),
    ]


def collections() -> list[tuple[str, str, dict]]:
    return [
        ("get", "/api/v1/me/", {}),
        ("get", "/api/v1/questions/", {}),
        ("get", "/api/v1/artifacts/", {}),
        ("post", "/api/v1/artifacts/", {"data": {"kind": "golden"}, "format": "multipart"}),
        ("get", "/api/v1/uploads/", {}),
        (
            "post",
            "/api/v1/uploads/",
            {"HTTP_TUS_RESUMABLE": "1.0.0", "HTTP_UPLOAD_LENGTH": "10", "HTTP_UPLOAD_METADATA": "kind Z29sZGVu"},
        ),
        ("get", "/api/v1/tokens/", {}),
        ("post", "/api/v1/tokens/", {"data": {"name": "sneaky"}, "format": "json"}),
        ("get", "/api/v1/organisations/", {}),
        ("get", "/api/v1/evidence/", {}),
        ("get", "/api/v1/capabilities/", {}),
        ("get", "/api/v1/runs/", {}),
        ("get", "/api/v1/targets/", {}),
        ("get", "/api/v1/audit/", {}),
    ]


def call(client, method, path, extra):
    return getattr(client, method)(path, **extra)


def test_vendor_a_gets_404_on_every_object_of_vendor_b(world, vendor_a):
    client = vendor_a.client()
    before = db_snapshot()
    for method, path, extra in endpoints(world):
        response = call(client, method, path, extra)
        assert response.status_code == 404, (method, path, response.status_code)
        if method != "head":
            assert response.json()["errors"][0]["code"] == "not_found", (method, path)
    assert db_snapshot() == before


def test_vendor_a_sees_none_of_vendor_bs_objects_in_lists(world, vendor_a):
    client = vendor_a.client()
    assert [q["code"] for q in client.get("/api/v1/questions/").json()["results"]] == [world["own_question"]]
    assert {a["organisation"] for a in client.get("/api/v1/artifacts/").json()["results"]} == {"acme"}
    assert client.get("/api/v1/uploads/").json()["count"] == 0
    assert [o["slug"] for o in client.get("/api/v1/organisations/").json()["results"]] == ["acme"]
    assert [t["name"] for t in client.get("/api/v1/tokens/").json()["results"]] == ["created with the user"]
    capability = client.get(f"/api/v1/capabilities/{world['capability']}/").json()
    assert capability["questions"] == [world["own_question"]]
    assert client.get("/api/v1/questions/?organisation=bolt").json()["count"] == 0
    assert client.get("/api/v1/artifacts/?organisation=bolt").json()["count"] == 0
    assert client.get("/api/v1/runs/").json()["count"] == 0
    assert client.get("/api/v1/runs/?question=V19").json()["count"] == 0
    assert client.get("/api/v1/evidence/?origin=run").json()["count"] == 0
    assert world["evidence"] not in capability["evidence"]
    assert client.get(f"/api/v1/capabilities/?question={world['question']}").json()["count"] == 0
    assert client.get(f"/api/v1/capabilities/?question={world['own_question']}").json()["count"] == 1


def test_vendor_a_cannot_use_vendor_bs_artifact_ids(world, vendor_a, artifacts_a):
    data = complete_answer(artifacts_a)
    data["executable_assets"] = [world["artifact"]]
    before = db_snapshot()
    response = vendor_a.client().post(f"/api/v1/questions/{world['own_question']}/answers/", data, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "field": "executable_assets[0]",
        "code": "not_found",
        "message": f"Artifact {world['artifact']} not found.",
    }
    assert db_snapshot() == before


def test_the_audit_log_is_for_pms_only(world, vendor_a, viewer, pm):
    assert vendor_a.client().get("/api/v1/audit/").status_code == 403
    assert viewer.client().get("/api/v1/audit/").status_code == 403
    assert pm.client().get("/api/v1/audit/").status_code == 200


def bad_clients(vendor_a) -> dict[str, APIClient]:
    expired, expired_key = token_create(actor=SYSTEM, user=vendor_a.user, name="expired")
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    revoked, revoked_key = token_create(actor=SYSTEM, user=vendor_a.user, name="revoked")
    token_revoke(actor=SYSTEM, token=revoked)
    clients = {"no token": APIClient(), "unknown token": APIClient()}
    clients["unknown token"].credentials(HTTP_AUTHORIZATION="Token clt_not-a-real-key")
    for name, key in [("expired", expired_key), ("revoked", revoked_key)]:
        clients[name] = APIClient()
        clients[name].credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return clients


def test_no_expired_or_revoked_token_gets_401_everywhere(world, vendor_a):
    own = {
        "question": world["own_question"],
        "own_question": world["own_question"],
        "answer": world["answer"],
        "artifact": world["artifact"],
        "upload": world["upload"],
        "token": world["token"],
        "run": world["run"],
        "capability": world["capability"],
        "evidence": world["evidence"],
    }
    every = [
        *endpoints(world),
        *endpoints(own),
        *collections(),
        ("get", f"/api/v1/capabilities/{world['capability']}/", {}),
        ("get", "/api/v1/evidence/B01/", {}),
        ("get", f"/api/v1/capabilities/{world['capability']}/promotions/", {}),
        ("post", f"/api/v1/capabilities/{world['capability']}/promotions/", {"data": {"to": "C4"}, "format": "json"}),
        ("get", "/api/v1/targets/simulator/", {}),
    ]
    clients = bad_clients(vendor_a)
    before = db_snapshot()
    requests = 0
    for name, client in clients.items():
        for method, path, extra in every:
            # Each from an address of its own: what answers is the token check, not the per-address limit on
            # failed checks (tests/api/test_errors.py covers that).
            requests += 1
            client.defaults["REMOTE_ADDR"] = f"10.{requests // 250}.{requests % 250}.1"
            response = call(client, method, path, extra)
            assert response.status_code == 401, (name, method, path, response.status_code)
            assert response["WWW-Authenticate"] == "Token"
    assert db_snapshot() == before


def test_the_schema_and_docs_are_public(client):
    assert client.get(reverse("api:schema")).status_code == 200
    docs = client.get(reverse("api:docs"))
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()  # the docs page's assets are served from the project


def test_tokens_are_throttled_per_token(vendor_a, vendor_b, monkeypatch):
    from django.core.cache import cache

    from vendor.authentication import TokenRateThrottle

    cache.clear()
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": "3/min"})
    client_a = vendor_a.client()
    assert [client_a.get("/api/v1/me/").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert client_a.get("/api/v1/me/").json()["errors"][0]["code"] == "throttled"
    assert vendor_b.client().get("/api/v1/me/").status_code == 200


def test_with_a_redis_cache_the_counts_are_shared_by_every_web_worker(vendor_a, monkeypatch, settings):
    """Counts kept in Redis, not in the process, so all gunicorn workers see the same ones."""
    import redis

    from vendor.authentication import TokenRateThrottle

    # Under a prefix of this test's own: other test runs may use the same Redis database at the same time, and
    # clearing the cache would empty the whole database.
    cache_url = settings.REDIS_URL.rsplit("/", 1)[0] + "/15"
    prefix = f"test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": cache_url,
            "KEY_PREFIX": prefix,
        }
    }
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": "3/min"})
    client_a = vendor_a.client()
    assert [client_a.get("/api/v1/me/").status_code for _ in range(4)] == [200, 200, 200, 429]
    client = redis.Redis.from_url(cache_url)
    assert len(client.keys(f"{prefix}:*throttle_token*")) == 1
    client.delete(*client.keys(f"{prefix}:*"))


def test_a_pm_can_create_and_revoke_their_own_tokens(pm):
    client = pm.client()
    created = client.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    key = created.json()["key"]
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert other.get("/api/v1/me/").status_code == 200
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert all("key" not in token for token in listed)
    assert client.delete(f"/api/v1/tokens/{created.json()['id']}/").status_code == 204
    assert other.get("/api/v1/me/").status_code == 401


def test_questions_never_answered_by_another_vendor_leak_nothing(vendor_a, vendor_b):
    make_question("V30")  # put to no one
    assert vendor_a.client().get("/api/v1/questions/V30/").status_code == 404
    assert vendor_a.client().get("/api/v1/questions/V30/answers/").status_code == 404


def test_a_reassigned_question_owes_afresh_and_shows_the_new_vendor_nothing_of_the_old(
    client, pm, vendor_a, vendor_b, question_a, artifacts_a, artifacts_b, capability
):
    """V18 answered and proven by vendor A, then moved to vendor B: B sees its package owed, with no reason and
    no progress, through the API and the pages; the reset is in the audit log; A's chain that finishes later
    accepts nothing, and the question closes only on B's own proof."""
    package = question_a.deliverables.get()
    capability.deliverables.add(package)
    answer_a = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(answer_a.pk)
    pass_stages(Chain.objects.get(answer=answer_a), stages.CHAIN_STAGES[-1])
    package.refresh_from_db()
    assert package.state == "accepted" and f"answer {answer_a.pk}" in package.reason
    late_a = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(late_a.pk)

    moved = pm.client().patch("/api/v1/questions/V18/", {"organisation": "bolt"}, format="json")
    assert moved.status_code == 200, moved.json()
    reset = AuditEntry.objects.get(action="deliverable.reset")
    assert reset.before["state"] == "accepted"
    assert reset.after["state"] == "owed" and "reassigned from acme to bolt" in reset.after["reason"]

    listed = vendor_b.client().get("/api/v1/questions/V18/deliverables/").json()
    assert [(d["key"], d["state"], d["reason"], d["decided_at"]) for d in listed] == [("package", "owed", "", None)]
    assert listed[0]["progress"] == {"simulator": "none", "hardware": "none"} and listed[0]["answered"] is False
    detail = vendor_b.client().get("/api/v1/questions/V18/").json()
    assert [(d["state"], d["reason"]) for d in detail["deliverables"]] == [("owed", "")] and detail["chains"] == []
    client.force_login(vendor_b.user)
    page = client.get(reverse("question-detail", args=["V18"])).content.decode()
    row = page[page.index('id="deliverable-package"') :]
    row = row[: row.index("</tr>")]
    assert ">Owed</span>" in row and "passed" not in row and f"answer {answer_a.pk}" not in page
    home = client.get(reverse("vendor-home")).content.decode()
    assert 'id="owed-V18-package"' in home

    # A's later chain passes every stage after the move: it decides nothing about what B owes.
    pass_stages(Chain.objects.get(answer=late_a), stages.CHAIN_STAGES[-1])
    package.refresh_from_db()
    assert package.state == "owed"
    with pytest.raises(ConflictError) as refused:
        deliverable_accept(package, actor=SYSTEM, reason="A's proof", answer=late_a)
    assert refused.value.field == "answer"
    assert Question.objects.get(code="V18").state != "closed"
    blocked = pm.client().post(f"/api/v1/capabilities/{capability.slug}/promotions/", {"to": "C2", "reason": ""})
    assert [reason["code"] for reason in blocked.json()["reasons"]] == ["deliverable_owed"]

    # B's own answer and proof are what close it.
    answer_b = answer_submit(
        actor=vendor_b.user,
        question=Question.objects.get(code="V18"),
        draft=answer_draft({**complete_answer(artifacts_b), "capability": capability.slug}),
    )
    chain_start_for_answer(answer_b.pk)
    pass_stages(Chain.objects.get(answer=answer_b), stages.CHAIN_STAGES[-1])
    package.refresh_from_db()
    assert package.state == "accepted" and f"answer {answer_b.pk}" in package.reason
    assert Question.objects.get(code="V18").state == "closed"
    listed = vendor_b.client().get("/api/v1/questions/V18/deliverables/").json()
    assert listed[0]["progress"]["simulator"] == "passed" and listed[0]["answered"] is True


def test_the_lists_show_a_reassigned_question_with_no_standing_from_the_previous_organisations_chains(
    client, pm, vendor_a, vendor_b, question_a, artifacts_a, capability
):
    """V18's chain of vendor A's answer passed its first four stages before the PM moved V18 to vendor B: B's
    home page shows V18 with no chain standing, and so do the team's question list and its stage filter, as the
    deliverables' progress ignores A's runs."""
    question_a.deliverables.get().capabilities.add(capability)
    answer_a = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(answer_a.pk)
    pass_stages(Chain.objects.get(answer=answer_a), stages.GOLDEN)

    def home_standing(account) -> str:
        client.force_login(account.user)
        home = client.get(reverse("vendor-home")).content.decode()
        row = home[home.index('href="/questions/V18/"') :]
        row = row[: row.index("</tr>")]
        return row[row.index('<td class="chain-standing">') :].split(">", 1)[1].split("<", 1)[0]

    assert home_standing(vendor_a) != "—"  # A's own chain stands at its failure stage
    assert pm.client().patch("/api/v1/questions/V18/", {"organisation": "bolt"}, format="json").status_code == 200

    assert home_standing(vendor_b) == "—"
    client.force_login(pm.user)
    listed = client.get(reverse("question-list"), {"q": "V18"}).content.decode()
    assert 'href="/questions/V18/"' in listed and 'data-standing=""' in listed
    found = client.get(reverse("question-list"), {"stage": stages.FAILURE}).content.decode()
    assert 'href="/questions/V18/"' not in found


def test_the_dashboards_attention_reads_a_reassigned_question_by_the_new_organisations_work(
    pm, vendor_a, vendor_b, question_a
):
    """Vendor A's latest answer to V18 is incomplete and its chain failed; once V18 is put to vendor B, the
    team's attention lists say V18 owes its package, not that its answer is incomplete or its chain failed."""
    chain = make_chain(question_a, vendor_a.user)  # on an answer that is only a summary
    make_run(chain, stages.CLAIM, stages.FAILED)
    before = attention().questions
    assert question_a.pk in before["incomplete"] and question_a.pk in before["chain_failed"]
    assert pm.client().patch("/api/v1/questions/V18/", {"organisation": "bolt"}, format="json").status_code == 200
    after = attention().questions
    assert question_a.pk in after["owed"]
    assert question_a.pk not in after["incomplete"] and question_a.pk not in after["chain_failed"]
