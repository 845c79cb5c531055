"""Capabilities, the promotion gate and runs through the API."""

import pytest
from django.utils import timezone

from acceptance import stages
from acceptance.models import Chain, PromotionAttempt, Run
from acceptance.services import answer_submit, chain_start_for_answer
from evidence.models import Capability
from tests.factories import answer_draft, complete_answer, db_snapshot, pass_stages
from vendor.services.deliverables import deliverable_reject


def promote(client, slug, to, reason="tested"):
    return client.post(f"/api/v1/capabilities/{slug}/promotions/", {"to": to, "reason": reason}, format="json")


def test_a_demotion_with_a_reason_goes_through_the_gate(pm, capability):
    response = promote(pm.client(), capability.slug, "C4", reason="vendor withdrew the calbin")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["from_status"], body["to_status"], body["allowed"], body["actor"]) == ("C3", "C4", True, "pat")
    capability.refresh_from_db()
    assert capability.status == "C4"


def test_a_demotion_needs_a_reason(pm, capability):
    before = db_snapshot()
    response = promote(pm.client(), capability.slug, "C4", reason="")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "reason"
    assert db_snapshot() == before


def test_a_promotion_without_proof_is_blocked_with_reasons(pm, capability):
    response = promote(pm.client(), capability.slug, "C2")
    assert response.status_code == 409
    body = response.json()
    assert body["errors"][0]["code"] == "blocked"
    assert body["errors"][0]["field"] == "to"
    assert [reason["code"] for reason in body["reasons"]] == ["no_answer"]
    capability.refresh_from_db()
    assert capability.status == "C3"
    attempt = PromotionAttempt.objects.get()
    assert (attempt.allowed, attempt.to_status) == (False, "C2")
    listed = pm.client().get(f"/api/v1/capabilities/{capability.slug}/promotions/").json()["results"]
    assert [(a["allowed"], a["reasons"][0]["code"]) for a in listed] == [(False, "no_answer")]


@pytest.mark.parametrize(
    ("pinned_status", "to", "code"),
    [
        ("C4", "C2", "pinned_never_promoted"),
        ("C4", "C0", "pinned_never_promoted"),
        ("C3", "C1", "pinned_needs_full_proof"),
    ],
)
def test_pinned_capabilities_are_held_by_the_gate(pm, pinned_status, to, code):
    capability = Capability.objects.create(
        slug="multi-physical-device",
        title="Multi device",
        status=pinned_status,
        pinned=True,
        pinned_status=pinned_status,
    )
    response = promote(pm.client(), capability.slug, to)
    assert response.status_code == 409
    assert code in [reason["code"] for reason in response.json()["reasons"]]
    capability.refresh_from_db()
    assert capability.status == pinned_status


def test_unproven_chain_stages_are_named(pm, vendor_a, question_a, artifacts_a, capability):
    answer = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(answer.pk)
    response = promote(pm.client(), capability.slug, "C2")
    assert response.status_code == 409
    codes = {reason["code"] for reason in response.json()["reasons"]}
    assert codes <= {"stage_not_passed", "stage_stale"} and codes
    assert "golden" in " ".join(reason["message"] for reason in response.json()["reasons"])


@pytest.mark.parametrize("who", ["vendor_a", "viewer"])
def test_only_a_pm_asks_the_gate(request, capability, who):
    account = request.getfixturevalue(who)
    before = db_snapshot()
    assert promote(account.client(), capability.slug, "C4").status_code == 403
    assert db_snapshot() == before


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_a_capability_cannot_be_edited_directly(pm, capability, method):
    before = db_snapshot()
    response = getattr(pm.client(), method)(f"/api/v1/capabilities/{capability.slug}/", {"status": "C0"}, format="json")
    assert response.status_code == 405
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("body", "field"), [({"to": "C9"}, "to"), ({}, "to"), ({"to": "C1", "status": "C0"}, "status")]
)
def test_bad_promotion_requests_name_the_field(pm, capability, body, field):
    before = db_snapshot()
    response = pm.client().post(f"/api/v1/capabilities/{capability.slug}/promotions/", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert db_snapshot() == before


def test_capabilities_keep_statuses_and_grades_apart(pm, capability):
    body = pm.client().get("/api/v1/capabilities/").json()["results"][0]
    assert body["status"] == "C3"
    assert "grade" not in body


@pytest.fixture
def chains(vendor_a, vendor_b, question_a, question_b, artifacts_a, artifacts_b, capability):
    """Chains (and their first runs) for vendor A's and vendor B's complete answers."""
    answer_a = answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(complete_answer(artifacts_a)))
    answer_b = answer_submit(actor=vendor_b.user, question=question_b, draft=answer_draft(complete_answer(artifacts_b)))
    chain_start_for_answer(answer_a.pk)
    chain_start_for_answer(answer_b.pk)
    return {
        "run_a": Run.objects.filter(answer=answer_a).get(),
        "run_b": Run.objects.filter(answer=answer_b).get(),
    }


def test_vendors_read_only_the_runs_of_their_answers(chains, vendor_a, pm):
    client = vendor_a.client()
    listed = client.get("/api/v1/runs/").json()
    assert [run["id"] for run in listed["results"]] == [chains["run_a"].pk]
    assert listed["results"][0]["stage"] == "claim"
    assert client.get(f"/api/v1/runs/{chains['run_a'].pk}/").status_code == 200
    assert client.get(f"/api/v1/runs/{chains['run_b'].pk}/").status_code == 404
    assert pm.client().get("/api/v1/runs/").json()["count"] == 2
    assert pm.client().get("/api/v1/runs/?question=V19").json()["results"][0]["id"] == chains["run_b"].pk


def test_a_question_shows_its_chain(chains, vendor_a):
    body = vendor_a.client().get("/api/v1/questions/V18/").json()
    (chain,) = body["chains"]
    assert chain["target"] == "simulator"
    assert [stage["stage"] for stage in chain["stages"]] == stages.CHAIN_STAGES
    assert chain["stages"][0]["run"] == chains["run_a"].pk


def test_only_a_pm_reruns_and_only_a_finished_run(chains, vendor_a, pm):
    run = chains["run_a"]
    before = db_snapshot()
    assert vendor_a.client().post(f"/api/v1/runs/{run.pk}/rerun/").status_code == 403
    assert vendor_a.client().post(f"/api/v1/runs/{chains['run_b'].pk}/rerun/").status_code == 404
    busy = pm.client().post(f"/api/v1/runs/{run.pk}/rerun/")
    assert busy.status_code == 409
    assert db_snapshot() == before

    # The worker's verdict, as it would store it.
    Run.objects.filter(pk=run.pk).update(
        state=stages.FAILED, verdict=stages.FAIL, finished_at=timezone.now(), reason="no capability named"
    )
    rerun = pm.client().post(f"/api/v1/runs/{run.pk}/rerun/")
    assert rerun.status_code == 201, rerun.json()
    assert (rerun.json()["rerun_of"], rerun.json()["stage"]) == (run.pk, "claim")


def test_targets_are_readable(chains, vendor_a):
    listed = vendor_a.client().get("/api/v1/targets/").json()["results"]
    assert [target["slug"] for target in listed] == ["simulator"]
    assert vendor_a.client().get("/api/v1/targets/simulator/").json()["kind"] == "simulator"
    assert vendor_a.client().get("/api/v1/targets/nowhere/").status_code == 404


def test_the_gate_promotes_what_is_proven_and_no_further(pm, vendor_a, question_a, artifacts_a, capability):
    capability.deliverables.add(*question_a.deliverables.all())  # V18's package proves the batch, as seeded
    answer = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    pass_stages(chain, stages.CHAIN_STAGES[-1])  # every stage, but on the simulator only

    c0 = promote(pm.client(), capability.slug, "C0")
    assert c0.status_code == 409
    assert "no_hardware_runs" in [reason["code"] for reason in c0.json()["reasons"]]
    c1 = promote(pm.client(), capability.slug, "C1")
    assert c1.status_code == 409
    assert [reason["code"] for reason in c1.json()["reasons"]] == ["no_sdk_evidence"]
    c2 = promote(pm.client(), capability.slug, "C2")
    assert c2.status_code == 201, c2.json()
    assert (c2.json()["from_status"], c2.json()["to_status"], c2.json()["answer"]) == ("C3", "C2", answer.pk)
    assert c2.json()["runs"] and c2.json()["versions"]["calrt"] == "0.7.6"
    capability.refresh_from_db()
    assert capability.status == "C2"
    again = promote(pm.client(), capability.slug, "C2")
    assert again.status_code == 409 and again.json()["errors"][0]["field"] == "to"
    assert PromotionAttempt.objects.filter(capability=capability, to_status="C2").count() == 1


def test_a_rejected_package_blocks_the_promotion_naming_it(pm, vendor_a, question_a, artifacts_a, capability):
    package = question_a.deliverables.get()
    capability.deliverables.add(package)
    answer = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(answer.pk)
    pass_stages(Chain.objects.get(answer=answer), stages.CHAIN_STAGES[-1])
    deliverable_reject(package, actor=pm.user, reason="golden tensors were produced by the package itself")
    blocked = promote(pm.client(), capability.slug, "C2")
    assert blocked.status_code == 409
    assert [reason["code"] for reason in blocked.json()["reasons"]] == ["deliverable_rejected"]
    assert "package of V18 was rejected (golden tensors were produced" in blocked.json()["reasons"][0]["message"]
    assert Capability.objects.get(pk=capability.pk).status == "C3"
