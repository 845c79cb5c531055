"""The promotion gate from every entry point: the service, a model save, queryset writes, the admin and the
management command. Every attempt is stored; only the gate moves a status."""

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from acceptance import stages
from acceptance.inputs import promotion_request
from acceptance.models import Chain, PromotionAttempt, Target
from acceptance.selectors import capability_status_basis
from acceptance.services import answer_submit, capability_promote, chain_start_for_answer, target_register
from calculet.actors import SYSTEM
from calculet.audit import audit_verify
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.models import AuditEntry
from evidence.models import Capability
from evidence.status_guard import StatusWriteError
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_artifact,
    make_capability,
    make_user,
    pass_stages,
    sdk_checked,
)
from vendor.services.deliverables import deliverable_accept, deliverable_reject


@pytest.fixture
def capability(question):
    """decode-batch-8 proven by the question's package, as the seed links V18's packages to their batches."""
    capability = make_capability("decode-batch-8", status="C3", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    return capability


@pytest.fixture
def chain(answer, simulator_online):
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer, target=simulator_online)


@pytest.fixture
def hardware_chain(answer, chain):
    target_register(
        actor=SYSTEM,
        slug="board-1",
        kind=Target.HARDWARE,
        runner_command="board-runner --device 0",
        calrt_version="0.7.6",
        driver_version="2.3.0",
        firmware_version="1.8.0",
        chip="calculet-2c",
    )
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer, target__slug="board-1")


def promote(capability, to, actor, reason=""):
    """Through the parse a page or a command makes, so a status or reason that cannot be one is refused."""
    return capability_promote(actor=actor, capability=capability, request=promotion_request(to, reason))


def status_of(capability) -> str:
    return Capability.objects.get(pk=capability.pk).status


def test_a_blocked_attempt_is_stored_with_its_reasons_and_changes_nothing(chain, capability, pm_user):
    attempt = promote(capability, "C1", pm_user)
    assert not attempt.allowed
    assert (attempt.from_status, attempt.to_status, attempt.policy_version) == ("C3", "C1", "seed-grades-v2")
    assert {r["code"] for r in attempt.reasons} == {"stage_not_passed", "no_sdk_evidence"}
    assert status_of(capability) == "C3"
    stored = PromotionAttempt.objects.get(pk=attempt.pk)
    assert stored.reasons == attempt.reasons and stored.actor == pm_user
    entry = AuditEntry.objects.get(action="capability.promotion_blocked")
    assert entry.after["attempt"] == attempt.pk


def test_promotion_follows_the_evidence_the_seed_asks_for(chain, capability, pm_user):
    pass_stages(chain, stages.ARTIFACT)
    blocked = promote(capability, "C2", pm_user)
    assert not blocked.allowed and "Isolated runner (runner) is pending on simulator" in blocked.reasons[0]["message"]
    runs = pass_stages(chain, stages.SOAK)
    c2 = promote(capability, "C2", pm_user)
    assert c2.allowed and status_of(capability) == "C2"
    assert set(c2.runs.values_list("pk", flat=True)) == {run.pk for run in runs[-7:]}
    assert c2.versions == {"calrt": "0.7.6", "driver": "2.3.0", "firmware": "1.8.0", "chip": "calculet-2c"}
    blocked = promote(capability, "C1", pm_user)
    assert [r["code"] for r in blocked.reasons] == ["no_sdk_evidence"]
    sdk_checked(capability)
    c1 = promote(capability, "C1", pm_user)
    assert c1.allowed and status_of(capability) == "C1"
    assert AuditEntry.objects.filter(action="capability.promote").count() == 2
    assert AuditEntry.objects.filter(action="capability.promote").last().after["versions"] == c2.versions
    assert audit_verify() == []


def test_a_request_for_the_status_it_already_has_is_refused_and_stores_nothing(capability, pm_user):
    with pytest.raises(ConflictError) as error:
        promote(capability, "C3", pm_user)
    assert error.value.field == "to" and "already C3" in error.value.message
    assert not PromotionAttempt.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="capability.").exists()


def test_c0_needs_every_stage_on_an_attested_hardware_target(hardware_chain, chain, capability, pm_user):
    pass_stages(chain, stages.SOAK)
    sdk_checked(capability)
    blocked = promote(capability, "C0", pm_user)
    assert [r["code"] for r in blocked.reasons] == ["no_hardware_runs"]
    pass_stages(hardware_chain, stages.INTEGRATION)
    blocked = promote(capability, "C0", pm_user)
    assert [r["code"] for r in blocked.reasons] == ["stage_not_passed"]
    assert "soak" in blocked.reasons[0]["message"] and "board-1" in blocked.reasons[0]["message"]
    double = {"kind": "simulator", "double": True, "calrt": "0.7.6", "driver": "2.3.0", "firmware": "1.8.0"}
    pass_stages(hardware_chain, stages.SOAK, device=double)
    blocked = promote(capability, "C0", pm_user)
    assert [r["code"] for r in blocked.reasons] == ["no_hardware_runs"]
    pass_stages(hardware_chain, stages.SOAK)
    promoted = promote(capability, "C0", pm_user)
    assert promoted.allowed and status_of(capability) == "C0"
    assert promoted.runs.filter(target__slug="board-1").count() == 5


def test_a_new_artifact_version_takes_the_proof_away(
    chain, capability, pm_user, vendor_user, question, golden, calbin_bytes, organisation, tmp_path
):
    pass_stages(chain, stages.SOAK)
    newer_calbin = make_artifact(vendor_user, calbin_bytes, kind="calbin", version="1.1.0", file_name="t.tar")
    newer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=newer_calbin, golden=golden)),
    )
    chain_start_for_answer(newer.pk)
    blocked = promote(capability, "C2", pm_user)
    assert not blocked.allowed
    assert {r["code"] for r in blocked.reasons} == {"stage_not_passed", "stage_stale"}
    assert blocked.answer == newer


def test_pinned_capabilities_hold(question, pm_user, chain, hardware_chain):
    pinned_c3 = make_capability("npu-sampling", status="C3", pinned_status="C3", questions=[question])
    pinned_c4 = make_capability("multi-device-0-7-6", status="C4", pinned_status="C4", questions=[question])
    for capability in (pinned_c3, pinned_c4):
        for to in ("C2", "C1", "C0"):
            attempt = promote(capability, to, pm_user)
            assert not attempt.allowed
    assert promote(pinned_c3, "C2", pm_user).reasons[0]["code"] == "pinned_needs_full_proof"
    assert promote(pinned_c4, "C3", pm_user).reasons[0]["code"] == "pinned_never_promoted"
    assert (status_of(pinned_c3), status_of(pinned_c4)) == ("C3", "C4")


def test_demotion_needs_a_reason_and_is_audited(chain, capability, pm_user):
    with pytest.raises(DomainError) as error:
        promote(capability, "C4", pm_user, reason="  ")
    assert error.value.field == "reason"
    demoted = promote(capability, "C4", pm_user, reason="the vendor withdrew the calbin")
    assert demoted.allowed and status_of(capability) == "C4"
    entry = AuditEntry.objects.get(action="capability.demote")
    assert entry.before == {"status": "C3"} and entry.after["reason"] == "the vendor withdrew the calbin"


def test_unknown_status_and_non_pm_actors_are_refused_before_anything_is_stored(capability, pm_user, vendor_user):
    with pytest.raises(DomainError) as error:
        promote(capability, "C9", pm_user)
    assert error.value.field == "to"
    with pytest.raises(ForbiddenError):
        promote(capability, "C2", vendor_user)
    viewer = make_user("vic", "team", "viewer")
    with pytest.raises(ForbiddenError):
        promote(capability, "C2", viewer)
    assert PromotionAttempt.objects.count() == 0


def test_a_direct_model_save_of_the_status_raises(capability):
    capability.status = "C0"
    with pytest.raises(StatusWriteError):
        capability.save()
    capability.refresh_from_db()
    capability.title = "Decode batch 8, renamed"
    capability.save()  # other fields are not the gate's business
    assert status_of(capability) == "C3"


def test_queryset_writes_of_the_status_raise(capability):
    with pytest.raises(StatusWriteError):
        Capability.objects.filter(pk=capability.pk).update(status="C0")
    capability.status = "C0"
    with pytest.raises(StatusWriteError):
        Capability.objects.bulk_update([capability], ["status"])
    with pytest.raises(StatusWriteError):
        Capability._base_manager.filter(pk=capability.pk).update(status="C0")
    upsert = Capability(slug=capability.slug, title=capability.title, status="C0")
    with pytest.raises(StatusWriteError):
        Capability.objects.bulk_create(
            [upsert], update_conflicts=True, unique_fields=["slug"], update_fields=["status"]
        )
    assert status_of(capability) == "C3"


@pytest.fixture
def admin_client_logged_in(client, db):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("root", "root@example.org", "pw")
    client.force_login(admin)
    return client


def test_the_admin_shows_the_status_read_only_and_ignores_a_posted_one(admin_client_logged_in, capability):
    url = f"/admin/evidence/capability/{capability.pk}/change/"
    page = admin_client_logged_in.get(url)
    assert page.status_code == 200
    assert b'name="status"' not in page.content
    response = admin_client_logged_in.post(
        url,
        {
            "slug": capability.slug,
            "title": "Decode batch 8",
            "description": "",
            "scope": "",
            "position": 0,
            "status": "C0",
        },
    )
    assert response.status_code == 302
    assert status_of(capability) == "C3"


def test_the_admin_action_goes_through_the_gate(admin_client_logged_in, chain, capability):
    url = "/admin/evidence/capability/"
    form = admin_client_logged_in.post(url, {"action": "change_status", "_selected_action": [capability.pk]})
    assert form.status_code == 200 and b"promotion gate" in form.content
    response = admin_client_logged_in.post(
        url,
        {"action": "change_status", "_selected_action": [capability.pk], "apply": "1", "to": "C0", "reason": ""},
        follow=True,
    )
    assert b"blocked" in response.content
    assert status_of(capability) == "C3"
    attempt = PromotionAttempt.objects.get()
    assert (attempt.allowed, attempt.actor_label) == (False, "root")
    pass_stages(chain, stages.SOAK)
    admin_client_logged_in.post(
        url, {"action": "change_status", "_selected_action": [capability.pk], "apply": "1", "to": "C2", "reason": ""}
    )
    assert status_of(capability) == "C2"


def test_the_command_exits_non_zero_with_the_reasons_when_blocked(chain, capability, capsys):
    with pytest.raises(CommandError, match="blocked: decode-batch-8 stays C3"):
        call_command("promote_capability", "decode-batch-8", "C1")
    assert "no_sdk_evidence" in capsys.readouterr().err
    assert status_of(capability) == "C3"
    pass_stages(chain, stages.SOAK)
    sdk_checked(capability)
    call_command("promote_capability", "decode-batch-8", "C1")
    assert status_of(capability) == "C1"
    with pytest.raises(CommandError, match="reason: A demotion needs a reason"):
        call_command("promote_capability", "decode-batch-8", "C3")
    assert PromotionAttempt.objects.get(allowed=True).actor_label == "manage.py promote_capability"


def test_the_gate_costs_the_same_queries_whatever_the_number_of_runs(chain, capability, pm_user):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            promote(capability, "C0", pm_user)
        return len(captured)

    pass_stages(chain, stages.SOAK)
    few = queries()
    for _ in range(20):
        pass_stages(chain, stages.SOAK)
    assert queries() == few


@pytest.mark.django_db(transaction=True)
def test_two_promotions_at_once_exactly_one_takes_effect(answer, simulator_online, capability, pm_user):
    chain_start_for_answer(answer.pk)
    pass_stages(Chain.objects.get(answer=answer), stages.SOAK)
    barrier = threading.Barrier(2)
    attempts, refused = [], []

    def ask():
        barrier.wait()
        try:
            attempts.append(promote(Capability.objects.get(pk=capability.pk), "C2", pm_user))
        except ConflictError as error:
            refused.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.allowed for a in attempts] == [True]
    assert len(refused) == 1 and "already C2" in refused[0].message
    assert status_of(capability) == "C2" and PromotionAttempt.objects.count() == 1
    assert AuditEntry.objects.filter(action="capability.promote").count() == 1
    assert audit_verify() == []


def test_a_status_names_its_versions_and_new_target_versions_make_re_verification_due(
    chain, capability, pm_user, client
):
    pass_stages(chain, stages.SOAK)
    assert promote(capability, "C2", pm_user).allowed
    capability.refresh_from_db()
    basis = capability_status_basis(capability)
    assert basis.versions == {"calrt": "0.7.6", "driver": "2.3.0", "firmware": "1.8.0", "chip": "calculet-2c"}
    assert basis.reverification_due == []

    target_register(
        actor=SYSTEM, slug="simulator", kind=Target.SIMULATOR, calrt_version="0.7.7", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c",
    )  # fmt: skip
    basis = capability_status_basis(capability)
    assert [due["target"].slug for due in basis.reverification_due] == ["simulator"]
    assert ("artifact", stages.QUEUED) in basis.reverification_due[0]["stages"]
    client.force_login(pm_user)
    body = client.get(f"/capabilities/{capability.slug}/").content.decode()
    assert 'id="status-versions"' in body and "calrt 0.7.6" in body
    assert "Re-verification due" in body and "CalRT 0.7.7" in body


def test_only_a_passing_sdk_check_at_the_answers_version_is_e2_for_the_gate(chain, capability, pm_user):
    pass_stages(chain, stages.SOAK)
    assert promote(capability, "C2", pm_user).allowed
    other_version = sdk_checked(capability, calrt="0.8.0")
    assert [r["code"] for r in promote(capability, "C1", pm_user).reasons] == ["no_sdk_evidence"]
    failed = sdk_checked(capability)
    deliverable_reject(failed.deliverable, actor=SYSTEM, reason="static check failed: KvManager::Apply missing")
    rejected = promote(capability, "C1", pm_user).reasons
    assert [r["code"] for r in rejected] == ["deliverable_rejected"]
    assert (
        f"SDK deliverable V18 {failed.deliverable.key} (static check failed: KvManager::Apply missing)"
        in (rejected[0]["message"])
    )
    other_version.deliverable.refresh_from_db()
    assert other_version.deliverable.state == "accepted"  # accepted, but for CalRT 0.8.0
    deliverable_accept(failed.deliverable, actor=SYSTEM, reason="static check passed")
    assert promote(capability, "C1", pm_user).allowed


def test_a_rejected_calbin_promotes_nothing_from_the_service_the_page_the_admin_or_the_command(
    chain, capability, pm_user, admin_client_logged_in, capsys
):
    pass_stages(chain, stages.SOAK)
    package = chain.answer.deliverable
    package.refresh_from_db()
    assert package.state == "accepted"  # every stage passed: the package was accepted on its proof
    deliverable_reject(package, actor=pm_user, reason="the PM found the expert block corrupted")
    blocked = promote(capability, "C2", pm_user)
    assert not blocked.allowed and [r["code"] for r in blocked.reasons] == ["deliverable_rejected"]
    assert "package of V18 was rejected (the PM found the expert block corrupted)" in blocked.reasons[0]["message"]
    page = Client()
    page.force_login(pm_user)
    body = page.post(
        f"/capabilities/{capability.slug}/promote", {"to": "C2", "reason": ""}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert 'id="promotion-blocked"' in body and "<code>deliverable_rejected</code>" in body
    admin_client_logged_in.post(
        "/admin/evidence/capability/",
        {"action": "change_status", "_selected_action": [capability.pk], "apply": "1", "to": "C2", "reason": ""},
    )
    with pytest.raises(CommandError, match="blocked: decode-batch-8 stays C3"):
        call_command("promote_capability", "decode-batch-8", "C2")
    assert "deliverable_rejected" in capsys.readouterr().err
    attempts = PromotionAttempt.objects.order_by("pk")
    assert [(a.allowed, a.actor_label) for a in attempts] == [
        (False, "pam"),
        (False, "pam"),
        (False, "root"),
        (False, "manage.py promote_capability"),
    ]
    assert all(a.reasons[0]["code"] == "deliverable_rejected" for a in attempts)
    assert status_of(capability) == "C3"
    deliverable_accept(package, actor=pm_user, reason="re-examined: the block is intact")
    assert promote(capability, "C2", pm_user).allowed
