"""The API answers every request in its own error format, never with an HTML page or a 500."""

import pytest

from tests.vendor.fixtures import make_question


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
