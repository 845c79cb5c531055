"""Every page and its API twin decide alike: for each role and each object, both let the user through or
both refuse. Decisions come from `vendor.access` alone, so a page and an endpoint cannot drift apart."""

import pytest
from django.test import Client
from django.urls import reverse

from acceptance import stages
from calculet.models import AuditEntry
from evidence.models import Capability
from tests.factories import (
    make_capability,
    make_chain,
    make_question,
    make_run,
    make_run_evidence,
    make_seed_evidence,
    make_user,
    put_to,
)
from vendor.models import Organisation, Question

ROLES = ["pm", "operator", "viewer", "vendor_a", "vendor_b", "nobody"]


@pytest.fixture
def world(db):
    users = {
        "pm": make_user("ada", "team", "pm"),
        "operator": make_user("otto", "team", "operator"),
        "viewer": make_user("victor", "team", "viewer"),
        "vendor_a": make_user("ann", "acme", "vendor"),
        "vendor_b": make_user("bob", "bolt", "vendor"),
    }
    make_question("V18")
    make_question("V19")
    put_to(users["pm"], Organisation.objects.get(slug="acme"), "V18", ask=True)
    put_to(users["pm"], Organisation.objects.get(slug="bolt"), "V19", ask=True)
    capability = make_capability(
        "decode-batch-8", title="Decode batch 8", questions=Question.objects.filter(code__in=["V18", "V19"])
    )
    runs = {}
    for vendor, code in (("vendor_a", "V18"), ("vendor_b", "V19")):
        chain = make_chain(Question.objects.get(code=code), users[vendor], capability=capability)
        runs[code] = make_run(chain, stages.CLAIM, stages.PASSED)
    return {"users": users, "runs": runs}


def _client(world, role) -> Client:
    client = Client()
    if role != "nobody":
        client.force_login(world["users"][role])
    return client


def _let_through(response) -> bool:
    """Reached the rule (done, redirected or refused for its input) rather than refused for who asked; a
    redirect to the login page is a refusal."""
    if response.status_code == 302:
        return not response["Location"].startswith(reverse("login"))
    return response.status_code in (200, 201, 204, 400, 409)


def _twins(world):
    """(name, page request, API request): the same object or action, once in the browser, once in the API."""
    run_a, run_b = world["runs"]["V18"], world["runs"]["V19"]
    return [
        ("question of vendor A", ("get", "/questions/V18/", {}), ("get", "/api/v1/questions/V18/", {})),
        ("question of vendor B", ("get", "/questions/V19/", {}), ("get", "/api/v1/questions/V19/", {})),
        (
            "edit a question",
            ("post", "/questions/V18/ticket", {"priority": "urgent"}),
            ("patch", "/api/v1/questions/V18/", {"priority": "urgent"}),
        ),
        (
            "capability",
            ("get", "/capabilities/decode-batch-8/", {}),
            ("get", "/api/v1/capabilities/decode-batch-8/", {}),
        ),
        ("capability matrix", ("get", "/capabilities/", {}), ("get", "/api/v1/capabilities/", {})),
        ("evidence register", ("get", "/evidence/", {}), ("get", "/api/v1/evidence/", {})),
        (
            "ask the gate",
            ("post", "/capabilities/decode-batch-8/promote", {"to": "C9"}),
            ("post", "/api/v1/capabilities/decode-batch-8/promotions/", {"to": "C9"}),
        ),
        (
            "re-run vendor A's stage",
            ("post", f"/runs/{run_a.pk}/rerun", {}),
            ("post", f"/api/v1/runs/{run_a.pk}/rerun/", {}),
        ),
        (
            "re-run vendor B's stage",
            ("post", f"/runs/{run_b.pk}/rerun", {}),
            ("post", f"/api/v1/runs/{run_b.pk}/rerun/", {}),
        ),
        ("audit log", ("get", "/audit/", {}), ("get", "/api/v1/audit/", {})),
        (
            "vendor A's thread",
            ("get", "/questions/V18/comments", {}),
            ("get", "/api/v1/questions/V18/comments/", {}),
        ),
        (
            "write in vendor A's thread",
            ("post", "/questions/V18/comments", {"body": ""}),
            ("post", "/api/v1/questions/V18/comments/", {"body": ""}),
        ),
        (
            "notification preferences",
            ("get", "/notifications/", {}),
            ("get", "/api/v1/me/notification-preferences/", {}),
        ),
        ("webhooks", ("get", "/webhooks/", {}), ("get", "/api/v1/webhooks/", {})),
    ]


# Who gets through, per twin, whatever the entry point.
EXPECTED = {
    "question of vendor A": {"pm", "operator", "viewer", "vendor_a"},
    "question of vendor B": {"pm", "operator", "viewer", "vendor_b"},
    "edit a question": {"pm"},
    "capability": {"pm", "operator", "viewer", "vendor_a", "vendor_b"},
    "capability matrix": {"pm", "operator", "viewer", "vendor_a", "vendor_b"},
    "evidence register": {"pm", "operator", "viewer", "vendor_a", "vendor_b"},
    "ask the gate": {"pm"},
    "re-run vendor A's stage": {"pm"},
    "re-run vendor B's stage": {"pm"},
    "audit log": {"pm"},
    "vendor A's thread": {"pm", "operator", "viewer", "vendor_a"},
    "write in vendor A's thread": {"pm", "vendor_a"},
    "notification preferences": {"pm", "operator", "viewer", "vendor_a", "vendor_b"},
    "webhooks": {"pm"},
}


def _send(client, method, path, data, *, api):
    if method == "get":
        return client.get(path, data)
    if api:
        return getattr(client, method)(path, data, content_type="application/json")
    return client.post(path, data)


@pytest.mark.parametrize("role", ROLES)
def test_every_page_and_its_endpoint_decide_alike(world, role):
    client = _client(world, role)
    audit_rows = AuditEntry.objects.count()
    for name, (page_method, page_path, page_data), (api_method, api_path, api_data) in _twins(world):
        page = _send(client, page_method, page_path, page_data, api=False)
        api = _send(client, api_method, api_path, api_data, api=True)
        expected = role in EXPECTED[name]
        assert (_let_through(page), _let_through(api), name) == (expected, expected, name), (
            f"{role} on {name}: page {page.status_code}, API {api.status_code}"
        )
    if role != "pm":  # only the PM's re-runs may have written anything
        assert AuditEntry.objects.count() == audit_rows


def test_a_vendor_sees_the_same_questions_on_its_page_and_in_the_api(world):
    client = _client(world, "vendor_a")
    page = client.get("/vendor/").content.decode()
    api = client.get("/api/v1/questions/").json()
    assert [question["code"] for question in api["results"]] == ["V18"]
    assert "V18" in page and "V19" not in page


# Whose run evidence each role reads, beside the seed's public evidence.
RUN_EVIDENCE_READERS = {
    "pm": {"vendor_a", "vendor_b"},
    "operator": {"vendor_a", "vendor_b"},
    "viewer": {"vendor_a", "vendor_b"},
    "vendor_a": {"vendor_a"},
    "vendor_b": {"vendor_b"},
}
QUESTION_OF = {"vendor_a": "V18", "vendor_b": "V19"}


@pytest.fixture
def evidence(world):
    """The seed's public item (E2) and each vendor's run evidence on the shared capability: A's graded E4
    (simulator), B's E0 (hardware), so the capability matrix's grades tell whose evidence it counted."""
    capability = Capability.objects.get(slug="decode-batch-8")
    codes = {"seed": make_seed_evidence("Z01", grade="E2", capabilities=[capability]).code}
    for vendor, grade in (("vendor_a", "E4"), ("vendor_b", "E0")):
        codes[vendor] = make_run_evidence(world["runs"][QUESTION_OF[vendor]], grade=grade, capability=capability).code
    return codes


@pytest.mark.parametrize("role", sorted(RUN_EVIDENCE_READERS))
def test_run_evidence_is_read_only_by_its_organisation_on_every_page_endpoint_filter_and_count(world, evidence, role):
    client = _client(world, role)
    readable = {evidence["seed"], *(evidence[vendor] for vendor in RUN_EVIDENCE_READERS[role])}
    hidden = set(evidence.values()) - readable

    listed = client.get("/api/v1/evidence/", {"page_size": 200}).json()
    assert {item["code"] for item in listed["results"]} == readable
    assert listed["count"] == len(readable)
    runs_only = client.get("/api/v1/evidence/", {"origin": "run"}).json()
    assert {item["code"] for item in runs_only["results"]} == readable - {evidence["seed"]}
    assert {code: client.get(f"/api/v1/evidence/{code}/").status_code for code in evidence.values()} == {
        code: 200 if code in readable else 404 for code in evidence.values()
    }

    capability = client.get("/api/v1/capabilities/decode-batch-8/").json()
    assert set(capability["evidence"]) == readable
    [listed_capability] = client.get("/api/v1/capabilities/").json()["results"]
    assert set(listed_capability["evidence"]) == readable
    for vendor, code in QUESTION_OF.items():
        linked = client.get("/api/v1/capabilities/", {"question": code}).json()["count"]
        assert linked == (1 if vendor in RUN_EVIDENCE_READERS[role] else 0), (role, code)

    register = client.get("/evidence/", {"page_size": 200}).content.decode()
    page = client.get("/capabilities/decode-batch-8/").content.decode()
    for code in readable:
        assert code in page, (role, code)
    for code in hidden:
        assert code not in register and code not in page, (role, code)
    # The register lists the seed's items, each counting the run evidence the reader may read under it.
    assert "1 item</p>" in register
    row = register[register.index(f'<tr id="evidence-{evidence["seed"]}"') :]
    runs = len(readable) - 1
    assert f"{runs} run item{'s' if runs > 1 else ''}" in row[: row.index("</tr>")]
    matrix = client.get("/capabilities/").content.decode()
    grades = {"E2", *({"vendor_a": "E4", "vendor_b": "E0"}[vendor] for vendor in RUN_EVIDENCE_READERS[role])}
    assert {grade for grade in ("E0", "E2", "E4") if f">{grade}</span>" in matrix} == grades
