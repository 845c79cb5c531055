"""Two approvals for what the seed keeps closed: device-reset (I10's privileged surface, C4 as "must not be
opened") moves only when two members of the integration team approved that move on the evidence it rests on;
a pinned capability goes to C4 and back the same way. From the service, the API, the page and the command."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from acceptance import stages
from acceptance.inputs import NOTE_MAX_CHARS, ApprovalRequest, approval_request, promotion_request
from acceptance.models import CapabilityApproval, Chain, Target
from acceptance.services import answer_submit, capability_promote, chain_start_for_answer, target_register
from acceptance.services.approvals import capability_approve
from calculet.actors import SYSTEM
from calculet.audit import audit_verify
from calculet.errors import ConflictError, DomainError, ForbiddenError
from calculet.models import AuditEntry
from evidence.models import Capability
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_account,
    make_capability,
    make_question,
    pass_stages,
    sdk_checked,
)


@pytest.fixture
def operator(db):
    return make_account("otto", "team", "operator")


@pytest.fixture
def reset(organisation):
    question = make_question("V50", organisation=organisation, state="asked", deliverable="reset-runs")
    capability = make_capability("device-reset", status="C4", questions=[question])
    capability.deliverables.add(*question.deliverables.all())
    return capability


@pytest.fixture
def reset_chain(reset, vendor_user, calbin, golden, simulator_online):
    answer = answer_submit(
        actor=vendor_user,
        question=reset.questions.get(),
        draft=answer_draft(complete_answer_data(capability=reset, calbin=calbin, golden=golden)),
    )
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer)


def status_of(capability) -> str:
    return Capability.objects.get(pk=capability.pk).status


def promote(capability, to, actor, reason=""):
    """Through the parse a page or a command makes, so a status or reason that cannot be one is refused."""
    return capability_promote(actor=actor, capability=capability, request=promotion_request(to, reason))


def test_device_reset_opens_only_with_two_members_approving_on_the_evidence(
    reset, reset_chain, pm_user, operator, vendor_user
):
    with pytest.raises(ConflictError) as nothing_yet:
        capability_approve(actor=pm_user, capability=reset, request=ApprovalRequest("C3"))
    assert nothing_yet.value.field == "to" and nothing_yet.value.reasons[0]["code"] == "no_sdk_evidence"
    sdk_checked(reset)
    blocked = promote(reset, "C3", pm_user)
    assert [r["code"] for r in blocked.reasons] == ["approval_missing"]
    assert "0 given (no one)" in blocked.reasons[0]["message"] and status_of(reset) == "C4"

    first = capability_approve(actor=pm_user, capability=reset, request=ApprovalRequest("C3", "reset scope reviewed"))
    assert (first.from_status, first.to_status, first.answer_id) == ("C4", "C3", reset_chain.answer_id)
    with pytest.raises(ConflictError, match="already approved"):
        capability_approve(actor=pm_user, capability=reset, request=ApprovalRequest("C3"))
    for outsider in (vendor_user, make_account("vera", "team", "viewer").user):
        with pytest.raises(ForbiddenError):
            capability_approve(actor=outsider, capability=reset, request=ApprovalRequest("C3"))
    with pytest.raises(DomainError, match="needs no approval"):
        capability_approve(actor=pm_user, capability=reset, request=ApprovalRequest("C4"))
    blocked = promote(reset, "C3", pm_user)
    assert "1 given (pam)" in blocked.reasons[0]["message"]

    capability_approve(actor=operator.user, capability=reset, request=ApprovalRequest("C3"))
    assert promote(reset, "C3", pm_user).allowed and status_of(reset) == "C3"
    # Spent: the next move needs approvals of its own.
    assert not CapabilityApproval.objects.filter(revoked_at__isnull=True).exists()
    assert {e.action for e in AuditEntry.objects.filter(action__startswith="capability.approv")} == {
        "capability.approve",
        "capability.approval_revoke",
    }
    assert audit_verify() == []


def test_an_approval_lapses_with_the_evidence_it_was_given_on(reset, reset_chain, pm_user, operator):
    sdk_checked(reset)
    for actor in (pm_user, operator.user):
        capability_approve(actor=actor, capability=reset, request=ApprovalRequest("C3"))
    assert promote(reset, "C3", pm_user).allowed
    pass_stages(reset_chain, stages.SOAK)
    for actor in (pm_user, operator.user):
        approval = capability_approve(actor=actor, capability=reset, request=ApprovalRequest("C2"))
    assert approval.runs.count() == 7
    # New simulator versions: the runs the approvals covered no longer hold.
    target_register(
        actor=SYSTEM, slug="simulator", kind=Target.SIMULATOR, calrt_version="0.7.7", driver_version="2.3.0",
        firmware_version="1.8.0", chip="calculet-2c",
    )  # fmt: skip
    blocked = promote(reset, "C2", pm_user)
    assert not blocked.allowed and "approval_missing" not in {r["code"] for r in blocked.reasons}
    revoked = CapabilityApproval.objects.filter(to_status="C2")
    assert all(a.revoked_at and "evidence it was given on lapsed" in a.revoked_reason for a in revoked)
    assert status_of(reset) == "C3"


def test_a_pinned_capability_goes_to_c4_and_back_only_with_two_approvals(pm_user, operator, question):
    sampling = make_capability("npu-sampling", status="C3", pinned_status="C3", questions=[question])
    blocked = promote(sampling, "C4", pm_user, reason="fuzz run")
    assert [r["code"] for r in blocked.reasons] == ["approval_missing"] and status_of(sampling) == "C3"
    for actor in (pm_user, operator.user):
        approval = capability_approve(actor=actor, capability=sampling, request=ApprovalRequest("C4"))
    assert approval.answer_id is None and not approval.runs.exists()
    assert promote(sampling, "C4", pm_user, reason="the sampling surface must stay shut").allowed
    assert [r["code"] for r in promote(sampling, "C3", pm_user).reasons] == ["approval_missing"]
    for actor in (pm_user, operator.user):
        capability_approve(actor=actor, capability=sampling, request=ApprovalRequest("C3"))
    assert promote(sampling, "C3", pm_user).allowed and status_of(sampling) == "C3"


@pytest.mark.parametrize("leaves", ["deactivated", "made a viewer"])
def test_an_approval_counts_only_while_its_approver_may_still_approve(pm_user, operator, question, leaves):
    """Two members approved npu-sampling's demotion to C4, then one of them left the team (deactivated) or no
    longer approves (a viewer now): the other cannot demote it alone on the approval left behind."""
    sampling = make_capability("npu-sampling", status="C3", pinned_status="C3", questions=[question])
    for actor in (pm_user, operator.user):
        capability_approve(actor=actor, capability=sampling, request=ApprovalRequest("C4"))
    if leaves == "deactivated":
        get_user_model().objects.filter(pk=operator.user.pk).update(is_active=False)
    else:
        operator.user.membership.role = "viewer"
        operator.user.membership.save(update_fields=["role"])
    blocked = promote(sampling, "C4", pm_user, reason="the sampling surface must stay shut")
    assert [r["code"] for r in blocked.reasons] == ["approval_missing"] and status_of(sampling) == "C3"
    revoked = CapabilityApproval.objects.get(approver=operator.user)
    assert revoked.revoked_at is not None and "may no longer approve" in revoked.revoked_reason
    assert AuditEntry.objects.filter(action="capability.approval_revoke", after__approver="otto").exists()
    assert CapabilityApproval.objects.get(approver=pm_user).revoked_at is None


def test_approvals_through_the_api_the_page_and_the_command(reset, reset_chain, pm_user, operator, client, capsys):
    sdk_checked(reset)
    url = f"/api/v1/capabilities/{reset.slug}/approvals/"
    assert operator.client().post(url, {"to": "C3", "bogus": 1}, format="json").status_code == 400
    made = operator.client().post(url, {"to": "C3", "note": "checked the reset scope"}, format="json")
    assert made.status_code == 201, made.json()
    assert (made.json()["approver"], made.json()["answer"], made.json()["runs"]) == ("otto", reset_chain.answer_id, [])
    assert operator.client().post(url, {"to": "C3"}, format="json").status_code == 409
    listed = operator.client().get(url).json()["results"]
    assert [a["approver"] for a in listed] == ["otto"]
    promoted = operator.client().post(f"/api/v1/capabilities/{reset.slug}/promotions/", {"to": "C3"}, format="json")
    assert promoted.status_code == 403  # an operator approves; a PM asks the gate

    client.force_login(pm_user)
    page = client.get(reverse("capability-detail", args=[reset.slug])).content.decode()
    assert 'id="capability-approvals"' in page and "approved by otto" in page
    body = client.post(
        reverse("capability-approve", args=[reset.slug]), {"to": "C3", "note": ""}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Your approval of the move to C3 is recorded." in body and "approved by pam" in body

    # What cannot be an approval is refused where it is parsed, naming the field, and records nothing.
    for posted, field, sentence in (
        ({"to": "C9"}, "to", "Unknown status"),
        ({"to": "C2", "note": "n" * (NOTE_MAX_CHARS + 1)}, "note", "A note holds at most 2000 characters."),
    ):
        refused = client.post(reverse("capability-approve", args=[reset.slug]), posted, HTTP_HX_REQUEST="true")
        assert sentence in refused.content.decode(), field
        api = operator.client().post(url, posted, format="json")
        assert api.status_code == 400 and api.json()["errors"][0]["field"] == field
    with pytest.raises(CommandError, match="^to: Unknown status 'C9'"):
        call_command("approve_capability", reset.slug, "C9", "--user", "otto")
    with pytest.raises(CommandError, match="^note: A note holds at most"):
        call_command("approve_capability", reset.slug, "C2", "--user", "otto", "--note", "n" * (NOTE_MAX_CHARS + 1))
    assert CapabilityApproval.objects.filter(capability=reset).count() == 2

    with pytest.raises(CommandError, match="already approved"):
        call_command("approve_capability", reset.slug, "C3", "--user", "otto")
    call_command("promote_capability", reset.slug, "C3", "--user", "pam")
    assert status_of(reset) == "C3"
    with pytest.raises(CommandError, match="nothing to approve"):
        call_command("approve_capability", reset.slug, "C2", "--user", "otto")
    assert "stage_not_passed" in capsys.readouterr().err


def test_an_approval_s_words_are_parsed_into_a_request_naming_the_field_that_cannot_be_one():
    assert approval_request("C3", "  checked the scope \n") == ApprovalRequest(to="C3", note="checked the scope")
    for to, note, field in (("C9", "", "to"), ("c3", "", "to"), ("C3", "n" * (NOTE_MAX_CHARS + 1), "note")):
        with pytest.raises(DomainError) as refused:
            approval_request(to, note)
        assert refused.value.field == field
    assert approval_request("C3", " " * (NOTE_MAX_CHARS + 5)).note == ""  # stripped before it is measured


def test_the_admin_shows_approvals_and_changes_none(reset, reset_chain, operator, client):
    sdk_checked(reset)
    approval = capability_approve(actor=operator.user, capability=reset, request=ApprovalRequest("C3"))
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    assert "otto" in client.get("/admin/acceptance/capabilityapproval/").content.decode()
    assert client.get("/admin/acceptance/capabilityapproval/add/").status_code == 403
    page = client.get(f"/admin/acceptance/capabilityapproval/{approval.pk}/change/").content.decode()
    assert 'name="_save"' not in page
    deleted = client.post(f"/admin/acceptance/capabilityapproval/{approval.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 403 and CapabilityApproval.objects.filter(pk=approval.pk).exists()
