"""The audit log says calculet's own words in its reader's language: a deliverable's reset on reassignment gives
its reason as a sentence kept with its parameters (the English one stays what the API gives), the decision it
undid says its reason as the deliverables panel does, and a promotion's gate reasons are listed by their labels."""

import ast
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

import acceptance.policy
from acceptance.finding_labels import GATE_REASON_LABELS
from calculet.audit import audit_record
from calculet.models import AuditEntry
from evidence.models import Capability
from tests.factories import put_to
from vendor.inputs import QuestionChanges
from vendor.models import Deliverable, Organisation, Question
from vendor.services.questions import question_update

DECIDED = "Static check of answer r1 passed: SDK calrt-sdk-0.7.6.tar 0.7.6: nothing found"
RESET = "the question was reassigned from acme to bolt: the decision was about acme's answers"


def _changes(page: str, entry: AuditEntry) -> str:
    row = page[page.index(f'<td class="num">{entry.id}</td>') :]
    return row[: row.index("</tr>")]


@pytest.fixture
def reset_entry(pm, acme, other_engineer, checklist) -> AuditEntry:
    """V18's decided deliverable, reset when the question moves from acme to bolt."""
    put_to(pm, acme, "V18", ask=True)
    question = Question.objects.get(code="V18")
    question.deliverables.update(state=Deliverable.ACCEPTED, reason=DECIDED, decided_at=timezone.now())
    bolt = Organisation.objects.get(slug="bolt")
    question_update(actor=pm, question=question, changes=QuestionChanges(organisation=bolt))
    return AuditEntry.objects.filter(action="deliverable.reset").first()


@pytest.mark.django_db
def test_a_deliverables_reset_on_reassignment_says_why_in_the_readers_language(pm_client, reset_entry):
    assert reset_entry.after["reason"] == RESET  # the English sentence, as the API gives it
    assert reset_entry.after["reason_sentence"]["params"] == {"previous": "acme", "now": "bolt"}
    url = reverse("audit-log")
    shown = {"action": "deliverable.reset"}

    chinese = _changes(pm_client.get(url, shown, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode(), reset_entry)
    assert "问题已从 acme 改派给 bolt：此前的决定针对的是 acme 的回答" in chinese
    assert "回答 r1 的静态检查通过：SDK calrt-sdk-0.7.6.tar 0.7.6：未发现问题" in chinese  # what it undid
    assert "reassigned" not in chinese and "Static check" not in chinese
    assert "reason_sentence" not in chinese  # the stored sentence is no change of its own

    english = _changes(pm_client.get(url, shown, HTTP_ACCEPT_LANGUAGE="en").content.decode(), reset_entry)
    decided = DECIDED.replace("nothing found", "no problem found")  # as the deliverables panel says it
    assert f'<span title="reason">Reason</span>: <span class="muted">{decided}</span> → {escape(RESET)}' in english


@pytest.mark.django_db
def test_the_api_gives_the_resets_english_reason_as_it_was(pm, reset_entry):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(pm)
    listed = client.get("/api/v1/audit/", {"action": "deliverable.reset"}, HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    reasons = {row["after"]["reason"] for row in listed["results"]}
    assert reasons == {RESET}


@pytest.mark.django_db
def test_a_promotions_gate_reasons_are_listed_by_their_labels(pm_client, pm, checklist):
    capability = Capability.objects.order_by("slug").first()
    audit_record(
        actor=pm,
        action="capability.promote",
        obj=capability,
        before={"status": "C0"},
        after={"status": "C1", "reasons": ["no_answer", "no_sdk_evidence"]},
    )
    url = reverse("audit-log")
    shown = {"action": "capability.promote"}
    english = pm_client.get(url, shown, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert (
        '<span title="reasons">Gate reasons</span>: <span class="muted">—</span> → no complete answer, '
        "no current E2 evidence" in english
    )
    chinese = pm_client.get(url, shown, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    gate_reasons = '<span class="muted">—</span> → 没有完整的回答、没有当前的 E2 证据'
    assert f'<span title="reasons">门禁原因</span>: {gate_reasons}' in chinese
    assert "no_answer" not in chinese and "no_sdk_evidence" not in chinese


def _gate_reason_codes() -> set[str]:
    """Every code the gate's `reason(code, …)` is given in acceptance/policy.py, literally or by a conditional."""
    tree = ast.parse(Path(acceptance.policy.__file__).read_text())
    codes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "reason" and node.args:
            codes |= {c.value for c in ast.walk(node.args[0]) if isinstance(c, ast.Constant)}
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["code"]:
            codes |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return {code for code in codes if isinstance(code, str)}


def test_every_gate_reason_has_a_label():
    codes = _gate_reason_codes()
    assert {"no_answer", "stage_stale", "stage_not_passed", "approval_missing"} <= codes  # the scan finds them
    assert codes == set(GATE_REASON_LABELS)
