"""The API answers every request in its own error format, never with an HTML page or a 500."""

import pytest
from rest_framework.test import APIClient

from tests.factories import db_snapshot, make_question


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/nowhere/"),
        ("post", "/api/v1/nowhere/"),
        ("get", "/api/v1/questions/%00/"),
        ("get", "/api/v1/questions/V18%0A/answers/"),
        ("get", "/api/v1/evidence/%00/"),
        ("get", "/api/v1/artifacts/abc/"),
        ("patch", "/api/v1/uploads/not-a-uuid/"),
        ("get", "/api/v1/capabilities/a%00b/"),
    ],
)
def test_no_endpoint_is_a_json_404(pm, method, path):
    response = getattr(pm.client(), method)(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"][0]["code"] == "not_found"


def test_offsets_postgresql_refuses_are_turned_into_utc(pm):
    make_question("V18")
    response = pm.client().get("/api/v1/audit/", {"created_after": "0109-02-26T21:01:34+21:46"})
    assert response.status_code == 200
    response = pm.client().get("/api/v1/audit/", {"created_after": "0001-01-01T00:00:00+01:00"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "created_after"


@pytest.mark.parametrize("name", ["a\u0000b", "x" * 101, "with space"])
def test_odd_names_in_answer_maps_are_refused(vendor_a, question_a, name):
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", {"thresholds": {name: 1.0}}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "thresholds"


DEEP_JSON = "[" * 1000 + "]" * 1000


@pytest.mark.parametrize(
    ("account", "method", "path"),
    [
        ("vendor_a", "post", "/api/v1/questions/V18/answers/"),
        ("pm", "patch", "/api/v1/questions/V18/"),
        ("pm", "post", "/api/v1/capabilities/decode-batch-8/promotions/"),
    ],
)
def test_deeply_nested_json_is_a_clean_400_that_changes_nothing(request, question_a, capability, account, method, path):
    client = request.getfixturevalue(account).client()
    before = db_snapshot()
    response = getattr(client, method)(path, DEEP_JSON, content_type="application/json")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "nested deeper" in response.json()["errors"][0]["message"]
    assert db_snapshot() == before


def test_brackets_inside_strings_do_not_count_as_nesting(vendor_a, question_a):
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", {"summary": "[" * 500 + '"\\' + "{" * 500}, format="json"
    )
    assert response.status_code == 201


@pytest.mark.parametrize("content_type", ["multipart/form-data; boundary=x", "application/x-www-form-urlencoded"])
def test_json_operations_take_json_only(vendor_a, question_a, content_type):
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", "summary=x", content_type=content_type)
    assert response.status_code == 415
    assert response.json()["errors"][0]["code"] == "unsupported_media_type"


@pytest.fixture
def database_away(db):
    """The database really unreachable: the connection is closed and pointed at a port nobody listens on."""
    from django.db import connection

    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"
    yield
    connection.close()
    connection.settings_dict["PORT"] = port


def test_a_database_outage_is_a_503_with_retry_after(pm, question_a, database_away):
    response = pm.client().get("/api/v1/questions/")
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response.json()["errors"][0]["code"] == "unavailable"


@pytest.fixture
def signed_in(client, pm):
    client.force_login(pm.user)
    return client


def test_a_database_outage_on_a_page_is_a_503_too(signed_in, database_away):
    response = signed_in.get("/questions/")
    assert response.status_code == 503
    assert response["Retry-After"] == "30"


def test_failed_authentications_are_throttled_per_address(pm, question_a):
    guesser = APIClient(REMOTE_ADDR="203.0.113.7")
    guesser.credentials(HTTP_AUTHORIZATION="Token not-a-real-key")
    for _ in range(20):
        assert guesser.get("/api/v1/questions/").status_code == 401
    refused = guesser.get("/api/v1/questions/")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    # The address is refused even with a good key; another address is not.
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {pm.key}")
    assert guesser.get("/api/v1/questions/").status_code == 429
    assert pm.client().get("/api/v1/questions/").status_code == 200
