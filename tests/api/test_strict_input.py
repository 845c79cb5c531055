"""Input is read one way only: a value of another JSON type than its field's is refused, not coerced, in every
input serializer (calculet.api.StrictSerializer), and every field's error is reported at once."""

import importlib
import inspect
import json
import pkgutil

import pytest
from rest_framework import serializers

from calculet.api import StrictSerializer
from calculet.errors import DomainError
from tests.factories import complete_answer, db_snapshot
from vendor.inputs import QuestionChanges
from vendor.services.questions import question_update


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        ({"summary": 5}, "summary", "a string"),
        ({"version": 7.6}, "version", "a string"),
        ({"summary": True}, "summary", "a string"),
        ({"thresholds": {"soak_requests": "16"}}, "thresholds.soak_requests", "a number"),
        ({"thresholds": {"soak_requests": True}}, "thresholds.soak_requests", "a number"),
        ({"executable_assets": ["16"]}, "executable_assets[0]", "an integer"),
        ({"executable_assets": [True]}, "executable_assets[0]", "an integer"),
        ({"executable_assets": {"0": 1}}, "executable_assets", "an array"),
        ({"minimal_example": {"artifact": "16"}}, "minimal_example.artifact", "an integer"),
        ({"minimal_example": {"command": 5}}, "minimal_example.command", "a string"),
        ({"error_paths": [{"scenario": "kv", "expect_code": "17"}]}, "error_paths[0].expect_code", "an integer"),
        ({"golden": {"tolerances": {"max_abs": "0.02"}}}, "golden.tolerances.max_abs", "a number"),
        ({"golden": {"tolerances": []}}, "golden.tolerances", "an object"),
        ({"compatibility": {"calrt": 7}}, "compatibility.calrt", "a string"),
    ],
)
def test_answers_of_the_wrong_json_type_are_refused_naming_the_field(
    vendor_a, question_a, artifacts_a, change, field, expected
):
    body = {**complete_answer(artifacts_a), **change}
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [error["field"] for error in errors] == [field]
    assert f"Expected {expected}" in errors[0]["message"]
    assert db_snapshot() == before


def test_the_number_itself_is_taken_where_its_string_is_refused(vendor_a, question_a, artifacts_a):
    body = {**complete_answer(artifacts_a), "thresholds": {"soak_requests": "16"}}
    assert vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json").status_code == 400
    body["thresholds"] = {"soak_requests": 16}
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["thresholds"] == {"soak_requests": 16}


@pytest.mark.parametrize("spelling", ["1.0", "2.3e16", "2.3e+16", "2.3E16"])
def test_an_integer_field_refuses_every_spelling_of_a_json_fraction_or_exponent_alike(
    vendor_a, question_a, artifacts_a, spelling
):
    """A body is read by JSON's parser: `2.3e16` and `2.3e+16` are one number, and an integer field takes
    neither, as it takes no `1.0` (only a query string, which has no types, reads them as whole numbers)."""
    body = json.dumps({**complete_answer(artifacts_a), "error_paths": [{"scenario": "kv", "expect_code": "N"}]})
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", body.replace('"N"', spelling), content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "error_paths[0].expect_code", "code": "invalid", "message": "Expected an integer, got a number."}
    ]


@pytest.mark.parametrize("spelling", ["23", "23.0", "2.3e1", "2.3e+1", "2.3E1"])
def test_a_whole_number_limit_reads_every_spelling_of_its_value_alike(vendor_a, question_a, artifacts_a, spelling):
    body = json.dumps({**complete_answer(artifacts_a), "thresholds": {"soak_requests": "N"}})
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", body.replace('"N"', spelling), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["thresholds"] == {"soak_requests": 23}


def test_every_wrong_field_is_reported_at_once(vendor_a, question_a, artifacts_a):
    body = {
        **complete_answer(artifacts_a),
        "summary": 5,
        "version": "not a version",
        "colour": "red",
        "error_paths": [{"scenario": "kv", "expect_code": "17", "retry": 1}],
    }
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400
    fields = sorted(error["field"] for error in response.json()["errors"])
    assert fields == ["colour", "error_paths[0].expect_code", "error_paths[0].retry", "summary", "version"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"state_reason": 5}, "state_reason"),
        ({"priority": 1}, "priority"),
        ({"due_date": 20261231}, "due_date"),
        ({"assignee": True}, "assignee"),
    ],
)
def test_question_changes_of_the_wrong_type_are_refused(pm, question_a, body, field):
    before = db_snapshot()
    response = pm.client().patch("/api/v1/questions/V18/", body, format="json")
    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == [field]
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": 1}, "email"),
        ({"muted": "answer"}, "muted"),
        ({"muted": [1]}, "muted[0]"),
        ({"language": True}, "language"),
    ],
)
def test_preferences_of_the_wrong_type_are_refused(vendor_a, body, field):
    before = db_snapshot()
    response = vendor_a.client().patch("/api/v1/me/notification-preferences/", body, format="json")
    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == [field]
    assert db_snapshot() == before


def _input_serializers():
    for app in ("acceptance", "vendor", "evidence", "calculet"):
        package = importlib.import_module(app)
        for module in pkgutil.walk_packages(package.__path__, f"{app}."):
            if ".migrations" in module.name or ".management" in module.name:
                continue
            for name, value in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
                if name.endswith("InputSerializer") and issubclass(value, serializers.BaseSerializer):
                    yield value


def test_every_input_serializer_is_strict():
    """A new input serializer built on DRF's own Serializer would coerce and drop keys again."""
    found = set(_input_serializers())
    assert len(found) > 10
    assert [cls.__qualname__ for cls in found if not issubclass(cls, StrictSerializer)] == []


def test_a_plain_serializer_would_have_coerced_what_the_strict_one_refuses():
    """The wrong delivery: DRF's fields on their own read "16" as 16, true as 1.0 and 5 as "5"."""

    class Plain(serializers.Serializer):
        count = serializers.IntegerField()
        rate = serializers.FloatField()
        name = serializers.CharField()

    class Strict(StrictSerializer, Plain):
        pass

    body = {"count": "16", "rate": True, "name": 5}
    plain = Plain(data=body)
    assert plain.is_valid() and plain.validated_data == {"count": 16, "rate": 1.0, "name": "5"}
    strict = Strict(data=body)
    assert not strict.is_valid()
    assert sorted(strict.errors) == ["count", "name", "rate"]


@pytest.mark.parametrize("calrt", ["nonsense range", "latest", "=>0.7", "0.7.6 or later", "~=1"])
def test_a_compatibility_range_that_is_no_specifier_set_is_refused_naming_its_key(
    vendor_a, question_a, artifacts_a, calrt
):
    body = {
        **complete_answer(artifacts_a),
        "compatibility": {**complete_answer(artifacts_a)["compatibility"], "calrt": calrt},
    }
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "compatibility.calrt"
    assert "not a version range" in error["message"]
    assert db_snapshot() == before


@pytest.mark.parametrize("calrt", [">=0.7.6,<0.8", "0.7.6", "v0.7.6", "==0.7.*", "~=0.7.6", "0.7.6-rc1"])
def test_specifier_sets_and_bare_versions_are_taken(vendor_a, question_a, artifacts_a, calrt):
    body = {
        **complete_answer(artifacts_a),
        "compatibility": {**complete_answer(artifacts_a)["compatibility"], "calrt": calrt},
    }
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["compatibility"]["calrt"] == calrt


def test_the_service_reports_every_range_and_limit_error_at_once(vendor_a, question_a, artifacts_a):
    body = {
        **complete_answer(artifacts_a),
        "compatibility": {"calrt": "nonsense", "driver": "also nonsense", "firmware": ">=1.8", "chip": "calculet-2c"},
        "thresholds": {"soak_requests": 1},
    }
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, format="json")
    assert response.status_code == 400
    assert sorted(error["field"] for error in response.json()["errors"]) == [
        "compatibility.calrt",
        "compatibility.driver",
        "thresholds.soak_requests",
    ]


def test_a_state_reason_over_its_limit_is_refused_by_the_api_and_the_service(pm, question_a):
    before = db_snapshot()
    body = {"state": "deferred", "state_reason": "r" * 2001}
    response = pm.client().patch("/api/v1/questions/V18/", body, format="json")
    assert [error["field"] for error in response.json()["errors"]] == ["state_reason"]
    with pytest.raises(DomainError) as error:
        question_update(actor=pm.user, question=question_a, changes=QuestionChanges(**body))
    assert error.value.field == "state_reason"
    assert db_snapshot() == before
