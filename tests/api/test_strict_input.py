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
from vendor.models import Answer
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


# Every integer field of an answer's body: where it sits, and a value it takes (`{calbin}`/`{golden}`: the id).
INTEGER_FIELDS = {
    "error_paths[0].expect_code": ("error_paths", 0, "expect_code", "17"),
    "executable_assets[0]": ("executable_assets", 0, None, "{calbin}"),
    "minimal_example.artifact": ("minimal_example", "artifact", None, "{calbin}"),
    "golden.artifacts[0]": ("golden", "artifacts", 0, "{golden}"),
    "thresholds.golden_min_decode_steps": ("thresholds", "golden_min_decode_steps", None, "16"),
    "thresholds.soak_requests": ("thresholds", "soak_requests", None, "16"),
    "thresholds.soak_concurrency": ("thresholds", "soak_concurrency", None, "16"),
    "thresholds.soak_prompt_tokens": ("thresholds", "soak_prompt_tokens", None, "256"),
    "thresholds.soak_output_tokens": ("thresholds", "soak_output_tokens", None, "64"),
    "thresholds.soak_golden_samples": ("thresholds", "soak_golden_samples", None, "16"),
}


def _with_integer(artifacts, field: str, text: str) -> str:
    """The complete answer's JSON with `field` written as `text` (a JSON number, as it is sent)."""
    outer, middle, inner, _ = INTEGER_FIELDS[field]
    body = {**complete_answer(artifacts), "thresholds": {}}
    holder = body.setdefault(outer, {})
    if inner is not None:
        holder[middle][inner] = "N"
    else:
        holder[middle] = "N"
    return json.dumps(body).replace('"N"', text)


def _stored(answer, field: str):
    outer, middle, inner, _ = INTEGER_FIELDS[field]
    value = {
        "error_paths": lambda: answer.error_paths,
        "executable_assets": lambda: [a.pk for a in answer.executable_assets.all()],
        "minimal_example": lambda: {"artifact": answer.minimal_example_artifact_id},
        "golden": lambda: {"artifacts": [a.pk for a in answer.golden_artifacts.all()]},
        "thresholds": lambda: answer.thresholds,
    }[outer]()[middle]
    return value if inner is None else value[inner]


@pytest.mark.parametrize("field", INTEGER_FIELDS)
@pytest.mark.parametrize("spelling", ["{n}", "{n}.0", "{n}.000", "{n}e0", "{n}0E-1"])
def test_every_integer_field_reads_a_whole_number_in_any_notation_and_stores_an_int(
    vendor_a, question_a, artifacts_a, field, spelling
):
    """One rule for every integer field (docs/api.md): a whole number is that integer however JSON writes it;
    `expect_code: 17.0` and `soak_requests: 16.0` alike are stored as the int, never as a float."""
    ids = {"calbin": artifacts_a["calbin"].pk, "golden": artifacts_a["golden"].pk}
    number = INTEGER_FIELDS[field][3].format(**ids)
    body = _with_integer(artifacts_a, field, spelling.format(n=number))
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    stored = _stored(Answer.objects.get(pk=response.json()["id"]), field)
    assert stored == int(number) and type(stored) is int, (field, stored)
    assert f'"{field.rpartition(".")[2].partition("[")[0]}"' in response.content.decode()
    # Parsed, not searched as text: a timestamp such as "…:16.042Z" holds "16.0".
    assert int(number) not in _floats(response.json()), (field, response.content)


def _floats(value) -> list[float]:
    """Every float anywhere in a JSON document."""
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for item in value.values() for f in _floats(item)]
    if isinstance(value, list):
        return [f for item in value for f in _floats(item)]
    return []


@pytest.mark.parametrize("field", INTEGER_FIELDS)
def test_every_integer_field_refuses_a_fraction_naming_the_field(vendor_a, question_a, artifacts_a, field):
    before = db_snapshot()
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", _with_integer(artifacts_a, field, "16.5"), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert [error["field"] for error in response.json()["errors"]] == [field]
    assert db_snapshot() == before


@pytest.mark.parametrize("spelling", ["2.3e16", "2.3e+16", "2.3E16", "23000000000000000.0"])
def test_an_integer_field_reads_every_spelling_of_a_large_whole_number_as_one(
    vendor_a, question_a, artifacts_a, spelling
):
    """Read from the number's text: 2.3e16 is 23000000000000000 (out of an error code's range), whichever way
    it is written."""
    body = _with_integer(artifacts_a, "error_paths[0].expect_code", spelling)
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, content_type="application/json")
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert (error["field"], error["code"]) == ("error_paths[0].expect_code", "max_value")


@pytest.mark.parametrize("spelling", ["23", "23.0", "2.3e1", "2.3e+1", "2.3E1"])
def test_a_whole_number_limit_reads_every_spelling_of_its_value_alike(vendor_a, question_a, artifacts_a, spelling):
    body = json.dumps({**complete_answer(artifacts_a), "thresholds": {"soak_requests": "N"}})
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", body.replace('"N"', spelling), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert '"thresholds":{"soak_requests":23}' in response.content.decode()
    assert type(Answer.objects.get(pk=response.json()["id"]).thresholds["soak_requests"]) is int


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
