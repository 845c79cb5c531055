import io
import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from acceptance.inputs import PromotionRequest
from acceptance.models import PromotionAttempt
from acceptance.services import capability_promote
from evidence.models import Capability, EvidenceItem, EvidenceTable, PathAlias
from vendor.models import Question

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.mark.django_db
def test_matrix_shows_status_and_evidence_grades_apart(pm_client, checklist):
    body = pm_client.get(reverse("capability-matrix")).content.decode()
    multi_board = Capability.objects.get(slug="multi-board")
    assert multi_board.pinned and multi_board.status == "C3"
    row = body[body.index(reverse("capability-detail", args=["multi-board"])) :].split("</tr>")[0]
    assert 'class="badge status status-C3"' in row
    assert "pinned" in row
    assert 'class="badge grade"' in row and "E2" in row


@pytest.mark.django_db
def test_a_blocked_promotion_shows_its_reasons_in_place_and_changes_nothing(pm_client, checklist):
    capability = Capability.objects.get(slug="kv-manager-api")
    before = capability.status
    response = pm_client.post(
        reverse("capability-promote", args=[capability.slug]), {"to": "C0", "reason": "vendor says so"}, **HTMX
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<section class="panel" id="capability-promotion"')
    attempt = PromotionAttempt.objects.get(capability=capability)
    assert not attempt.allowed and attempt.reasons
    for reason in attempt.reasons:
        assert reason["code"] in body
    assert "Nothing changed." in body
    capability.refresh_from_db()
    assert capability.status == before


@pytest.mark.django_db
def test_a_demotion_needs_a_reason_and_then_goes_through(pm_client, checklist):
    capability = Capability.objects.get(slug="kv-manager-api")
    assert capability.status == "C1"
    url = reverse("capability-promote", args=[capability.slug])
    body = pm_client.post(url, {"to": "C2", "reason": ""}, **HTMX).content.decode()
    assert "A demotion needs a reason." in body
    capability.refresh_from_db()
    assert capability.status == "C1"

    body = pm_client.post(url, {"to": "C2", "reason": "the adapter is not wired"}, **HTMX).content.decode()
    assert "The gate allowed C1 → C2." in body
    capability.refresh_from_db()
    assert capability.status == "C2"
    page = pm_client.get(reverse("capability-detail", args=[capability.slug])).content.decode()
    assert "the adapter is not wired" in page


@pytest.mark.django_db
def test_a_reason_has_a_length_limit_shown_with_its_count(pm_client, pm, checklist):
    url = reverse("capability-promote", args=["kv-manager-api"])
    page = pm_client.get(reverse("capability-detail", args=["kv-manager-api"])).content.decode()
    assert 'maxlength="2000"' in page and 'data-for="promotion-reason" data-limit="2000"' in page
    assert ">0/2000</span>" in page
    body = pm_client.post(url, {"to": "C2", "reason": "x" * 2001}, **HTMX).content.decode()
    assert "A reason holds at most 2000 characters." in body and ">2001/2000</span>" in body
    assert not PromotionAttempt.objects.exists()
    assert Capability.objects.get(slug="kv-manager-api").status == "C1"
    api = APIClient()
    api.force_login(pm)
    response = api.post(
        "/api/v1/capabilities/kv-manager-api/promotions/", {"to": "C2", "reason": "x" * 2001}, format="json"
    )
    assert (response.status_code, response.json()["errors"][0]["field"]) == (400, "reason")
    assert not PromotionAttempt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "shown"),
    [
        ({"table": "Z"}, "Table: Select a valid choice. Z is not one of the available choices."),
        ({"grade": "E9"}, "Evidence grade: Select a valid choice. E9 is not one of the available choices."),
    ],
)
def test_evidence_register_shows_invalid_filters_as_errors(pm_client, checklist, params, shown):
    response = pm_client.get(reverse("evidence-register"), params)
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="filter-errors"' in body and shown in body
    assert 'id="evidence-B01"' not in body


@pytest.mark.django_db
def test_without_javascript_a_promotion_redirects_to_the_page_with_its_decision(pm_client, checklist):
    """Post/redirect/get: the browser ends on the capability page, and a reload asks the gate nothing."""
    url = reverse("capability-promote", args=["kv-manager-api"])
    response = pm_client.post(url, {"to": "C0", "reason": ""})
    attempt = PromotionAttempt.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/capabilities/kv-manager-api/?attempt={attempt.pk}#capability-promotion"
    body = pm_client.get(response["Location"]).content.decode()
    assert "<html" in body and 'id="promotion-blocked"' in body
    assert "Blocked: C1 → C0 is not proven. Nothing changed." in body
    assert "asked C0, stayed C1" in body
    pm_client.get(response["Location"])
    assert PromotionAttempt.objects.count() == 1
    # An attempt of another capability is not shown as this one's decision.
    other = pm_client.get(reverse("capability-detail", args=["expert-parallel"]), {"attempt": attempt.pk})
    assert 'id="promotion-blocked"' not in other.content.decode()


@pytest.mark.django_db
def test_without_javascript_a_refused_request_comes_back_on_the_whole_page(pm_client, checklist):
    response = pm_client.post(reverse("capability-promote", args=["kv-manager-api"]), {"to": "C2", "reason": ""})
    assert response.status_code == 400
    body = response.content.decode()
    assert "<html" in body and "A demotion needs a reason." in body
    assert not PromotionAttempt.objects.exists()


@pytest.mark.django_db
def test_only_a_pm_asks_the_gate(client, viewer, checklist):
    client.force_login(viewer)
    assert "Ask the gate" not in client.get(reverse("capability-detail", args=["kv-manager-api"])).content.decode()
    response = client.post(reverse("capability-promote", args=["kv-manager-api"]), {"to": "C2", "reason": "x"})
    assert response.status_code == 404
    assert not PromotionAttempt.objects.exists()


@pytest.mark.django_db
def test_evidence_register_filters_by_table_grade_status_and_defect(pm_client, checklist):
    body = pm_client.get(reverse("evidence-register"), {"table": "R", "mark": "defect"}).content.decode()
    expected = EvidenceItem.objects.filter(table__prefix="R", defect=True).values_list("code", flat=True)
    assert sorted(expected) == ["R05", "R06", "R07", "R13", "R14", "R19"]
    for code in expected:
        assert f'id="evidence-{code}"' in body
    assert body.count('<tr id="evidence-') == len(expected)

    body = pm_client.get(reverse("evidence-register"), {"grade": "E3", "status": "C4"}).content.decode()
    assert body.count('<tr id="evidence-') == 1 and 'id="evidence-I05"' in body


@pytest.mark.django_db
def test_evidence_register_expands_aliases_and_lists_archives(pm_client, checklist):
    body = pm_client.get(reverse("evidence-register"), {"table": "R"}).content.decode()
    expanded = "outputs/Calculet-NPU-analysis-bundle-20260801/remote-export/extracted/llama.cpp-full/llama.cpp"
    assert f"{expanded}/src/llama-calrt.cpp:41-44" in body
    assert "ebb143415bc44456599265d07e0b0057497d8708ebafb23f53435d0c189622d8" in body


def _one_of_each():
    table = EvidenceTable.objects.create(prefix="Z", section=99, title="few")
    alias = PathAlias.objects.create(name="$FEW", path="few", expanded_path="few", position=99)
    item = EvidenceItem.objects.create(code="Z01", table=table, conclusion="few")
    item.grades.create(grade="E1")
    item.statuses.create(status="C2")
    item.sources.create(position=1, raw="`$FEW/a:1`", alias=alias, path="a", lines=":1")
    capability = Capability.objects.create(slug="few", title="few", status="C2")
    capability.evidence.set([item])
    return capability


@pytest.mark.django_db
def test_evidence_and_capability_pages_query_counts_do_not_grow_with_rows(pm_client, pm, django_assert_num_queries):
    capability = _one_of_each()
    capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C1"))
    urls = [reverse("evidence-register"), reverse("capability-matrix"), reverse("capability-detail", args=["few"])]
    counts = []
    for url in urls:
        with CaptureQueriesContext(connection) as few:
            assert pm_client.get(url).status_code == 200
        counts.append(len(few.captured_queries))

    call_command("import_checklist", stdout=io.StringIO())
    capability.evidence.set(EvidenceItem.objects.all()[:40])
    capability.questions.set(Question.objects.all()[:20])
    for to_status in ["C0", "C1", "C0", "C1"]:
        capability_promote(actor=pm, capability=capability, request=PromotionRequest(to=to_status))
    for url, count in zip(urls, counts, strict=True):
        with django_assert_num_queries(count):
            pm_client.get(url)


@pytest.mark.django_db
def test_the_page_says_what_the_gate_would_say_for_each_higher_status_and_stores_nothing(pm_client, checklist):
    capability = Capability.objects.get(slug="decode-batch-8")
    assert capability.status == "C3"
    body = pm_client.get(reverse("capability-detail", args=[capability.slug])).content.decode()
    dry_run = body[body.index('id="capability-dry-run"') :].split("</ul>\n    ")[0]
    for status in ("C2", "C1", "C0"):
        assert f'class="badge status status-{status}">{status}</span>' in dry_run
    assert "C4" not in dry_run and "would be blocked" in dry_run and "no_answer" in dry_run
    assert not PromotionAttempt.objects.exists()


@pytest.mark.django_db
def test_a_vendor_sees_no_dry_run(client, acme_engineer, checklist):
    client.force_login(acme_engineer)
    body = client.get(reverse("capability-detail", args=["decode-batch-8"])).content.decode()
    assert 'id="capability-dry-run"' not in body


@pytest.mark.django_db
def test_evidence_register_lists_the_seed_items_and_groups_run_evidence_under_them(pm_client, checklist):
    """Runs add no rows: their evidence is counted under the seed items its capability cites, or under "From
    runs" when that capability cites none."""
    seed_total = EvidenceItem.objects.filter(origin=EvidenceItem.SEED).count()
    cited = Capability.objects.get(slug="kv-manager-api")
    seed_item = cited.evidence.order_by("code").first()
    uncited = Capability.objects.create(slug="no-seed-item", title="Cites nothing", status="C4")
    for n in range(1, 4):
        item = EvidenceItem.objects.create(code=f"RUN-{n}", origin=EvidenceItem.RUN, conclusion="run", grade_text="E4")
        (cited if n < 3 else uncited).evidence.add(item)
    response = pm_client.get(reverse("evidence-register"), {"table": seed_item.code[0]})
    body = response.content.decode()
    assert "RUN-1" not in re.findall(r'<tr id="evidence-([^"]+)"', body)
    row = body[body.index(f'<tr id="evidence-{seed_item.code}"') :]
    row = row[: row.index("</tr>")]
    assert "2 run items" in row and "<code>RUN-2</code>" in row and cited.title in row
    assert "1 run item proves a capability that cites none of the checklist's items" in body
    all_rows = pm_client.get(reverse("evidence-register")).content.decode()
    assert f"{seed_total} items" in all_rows


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("slug", "english", "chinese"),
    [
        ("decode-batch-8", "the vendor&#x27;s package on the simulator", "厂商的包在模拟器上"),
        (
            "kv-manager-api",
            "calculet&#x27;s integration against the documented semantics (simulator)",
            "calculet 按文档语义的集成（模拟器）",
        ),
    ],
)
def test_the_page_says_what_its_runs_prove(pm_client, checklist, slug, english, chinese):
    """A probe that checks the package tests the vendor's package; one that drives the runtime's calls tests the
    simulator's own implementation of them (E4): only the board's runs test the vendor's runtime."""
    url = reverse("capability-detail", args=[slug])
    body = pm_client.get(url).content.decode()
    panel = body[body.index('id="capability-run-meaning"') :].split("</section>")[0]
    assert f"On the simulator: {english}" in panel and "On an attested board: the board" in panel
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    panel = pm_client.get(url).content.decode().split('id="capability-run-meaning"')[1].split("</section>")[0]
    assert f"在模拟器上: {chinese}" in panel and "在经证实的板卡上: 板卡" in panel


@pytest.mark.django_db
def test_a_capability_without_probes_says_nothing_of_runs(pm_client, checklist):
    body = pm_client.get(reverse("capability-detail", args=["calbin-metadata-schema"])).content.decode()
    assert 'id="capability-run-meaning"' not in body
