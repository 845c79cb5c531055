"""Query parameters are as strict as bodies (calculet.query): one the operation does not read, one given twice,
or a value outside its declaration is a 400 naming it, and the schema declares exactly what each reads."""

import re

import pytest
from drf_spectacular.generators import SchemaGenerator

from calculet import query
from calculet.query import TEXT_PATTERN, query_parameter_names, whole_number
from tests.factories import make_capability


def _errors(response) -> list[tuple[str, str]]:
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    return [(error["field"], error["message"]) for error in response.json()["errors"]]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/questions/"),
        ("get", "/api/v1/questions/V18/"),
        ("get", "/api/v1/me/"),
        ("get", "/api/v1/questions/V18/deliverables/"),
        ("post", "/api/v1/questions/V18/answers/"),
        ("patch", "/api/v1/questions/V18/"),
        ("get", "/api/v1/uploads/"),
    ],
)
def test_a_parameter_no_operation_reads_is_refused_naming_it(vendor_a, question_a, method, path):
    response = getattr(vendor_a.client(), method)(f"{path}?bogus=1&colour=red", {}, format="json")
    assert _errors(response) == [("bogus", "Unknown query parameter."), ("colour", "Unknown query parameter.")]


def test_a_list_parameter_is_unknown_to_a_write(vendor_a, question_a):
    """page_size means something to GET …/answers/, nothing to POST."""
    assert vendor_a.client().get("/api/v1/questions/V18/answers/?page_size=5").status_code == 200
    response = vendor_a.client().post("/api/v1/questions/V18/answers/?page_size=5", {}, format="json")
    assert _errors(response) == [("page_size", "Unknown query parameter.")]


def test_a_parameter_given_twice_is_refused(vendor_a, question_a):
    response = vendor_a.client().get("/api/v1/questions/?state=asked&state=closed")
    assert _errors(response) == [("state", "Given more than once.")]


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("page_size=abc", "page_size", "from 1 to 200"),
        ("page_size=0", "page_size", "from 1 to 200"),
        ("page_size=201", "page_size", "from 1 to 200"),
        ("page_size=-5", "page_size", "from 1 to 200"),
        ("page=0", "page", "whole number"),
        ("page=abc", "page", "whole number"),
        ("ordering=nope", "ordering", "Cannot order by 'nope'"),
        ("ordering=number,", "ordering", "Cannot order by ''"),
        ("ordering=", "ordering", "Name a field"),
        ("state=", "state", "Give a value"),
        ("ordering=-secret_field", "ordering", "Cannot order by '-secret_field'"),
        ("state=maybe", "state", "Select a valid choice"),
    ],
)
def test_list_parameters_out_of_their_declaration_are_refused(vendor_a, question_a, query, field, message):
    [(name, text)] = _errors(vendor_a.client().get(f"/api/v1/questions/?{query}"))
    assert name == field
    assert message in text


def test_unknown_parameters_and_bad_values_are_refused_in_one_response_in_their_order(vendor_a, question_a):
    """Each check alone used to stop the request: the unknown names first, then the first filter, the
    ordering, the page size, one per response."""
    response = vendor_a.client().get(
        "/api/v1/questions/?state=maybe&bogus=1&page_size=0&ordering=nope&page=x&priority=&state_x=2"
    )
    assert [name for name, _ in _errors(response)] == [
        "state",
        "bogus",
        "page_size",
        "ordering",
        "page",
        "priority",
        "state_x",
    ]


def test_the_organisation_filter_is_checked_with_the_others(pm):
    assert [name for name, _ in _errors(pm.client().get("/api/v1/organisations/?kind=planet&bogus=1"))] == [
        "kind",
        "bogus",
    ]


def test_list_parameters_within_their_declaration_are_read(vendor_a, question_a):
    response = vendor_a.client().get("/api/v1/questions/?page_size=200&page=1&ordering=-priority,number")
    assert response.status_code == 200
    assert response.json()["count"] == 1


def test_a_boolean_filter_takes_true_or_false_only(pm, question_a):
    make_capability("decode-batch-8", questions=[question_a], position=1)
    assert pm.client().get("/api/v1/capabilities/?pinned=false").json()["count"] == 1
    assert pm.client().get("/api/v1/capabilities/?pinned=true").json()["count"] == 0
    for value in ("maybe", "True", "1", ""):
        assert _errors(pm.client().get(f"/api/v1/capabilities/?pinned={value}")) == [
            ("pinned", "Either true or false.")
        ]


def test_an_empty_model_choice_is_no_filter_as_its_schema_allows(vendor_a, question_a):
    assert vendor_a.client().get("/api/v1/questions/?section=&capability=").status_code == 200


def test_an_id_filter_takes_whole_numbers_only(pm):
    assert pm.client().get("/api/v1/runs/?artifact=5&answer=7").status_code == 200
    for value in ("0.5", "", str(2**63)):
        [(name, _)] = _errors(pm.client().get(f"/api/v1/runs/?artifact={value}"))
        assert name == "artifact"


def test_an_empty_date_is_refused_as_its_format_says(pm):
    [(name, _)] = _errors(pm.client().get("/api/v1/audit/?created_before="))
    assert name == "created_before"


def test_an_audit_action_nothing_records_is_refused(pm, question_a):
    assert pm.client().get("/api/v1/audit/?action=question.update").status_code == 200
    [(name, _)] = _errors(pm.client().get("/api/v1/audit/?action=question.explode"))
    assert name == "action"


def test_a_method_the_operation_does_not_take_is_a_405_whatever_its_parameters(pm):
    response = pm.client().generic("TRACE", "/api/v1/audit/?page=1&bogus=1")
    assert response.status_code == 405


def test_a_view_without_ordering_fields_takes_no_ordering(pm):
    assert _errors(pm.client().get("/api/v1/webhooks/?ordering=id")) == [("ordering", "Unknown query parameter.")]


def test_a_download_takes_its_format(vendor_a, artifacts_a):
    artifact = artifacts_a["document"]
    assert vendor_a.client().get(f"/api/v1/artifacts/{artifact.pk}/download/?format=bin").status_code == 200
    response = vendor_a.client().get(f"/api/v1/artifacts/{artifact.pk}/download/?format=bin&inline=1")
    assert _errors(response) == [("inline", "Unknown query parameter.")]


def test_the_schema_declares_the_query_parameters_each_operation_reads(db):
    """The server's list (calculet.query.query_parameter_names) and the schema's, operation by operation:
    a parameter read but not declared, or declared but refused, fails here naming the operation."""
    generator = SchemaGenerator()
    schema = generator.get_schema(request=None, public=True)
    compared = 0
    mismatches = []
    for path, _, method, callback in generator.endpoints:
        operation = schema["paths"].get(path, {}).get(method.lower())
        if operation is None:
            continue  # the schema's and the docs' own views, left out of the schema
        declared = {item["name"] for item in operation.get("parameters", []) if item["in"] == "query"}
        read = query_parameter_names(generator.create_view(callback, method), method)
        if declared != read:
            mismatches.append(f"{method} {path}: declared {sorted(declared)}, read {sorted(read)}")
        compared += 1
    assert compared > 40
    assert mismatches == []


def test_the_schema_bounds_pages_and_patterns_orderings(db):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    parameters = {item["name"]: item["schema"] for item in schema["paths"]["/api/v1/questions/"]["get"]["parameters"]}
    assert parameters["page_size"] == {"type": "integer", "minimum": 1, "maximum": 200}
    assert parameters["page"] == {"type": "integer", "minimum": 1}
    assert parameters["ordering"]["pattern"].startswith("^-?(number|priority|due_date|state|updated_at)")
    audit = {item["name"]: item["schema"] for item in schema["paths"]["/api/v1/audit/"]["get"]["parameters"]}
    assert "question.update" in audit["action"]["enum"]
    runs = {item["name"]: item["schema"] for item in schema["paths"]["/api/v1/runs/"]["get"]["parameters"]}
    assert runs["artifact"] == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}


def test_a_nul_in_any_text_filter_is_a_400_naming_it_as_the_schema_says(pm, question_a):
    """Schemathesis counted `?version=a%00b` as valid (the schema said only "string") and got a 400; every text
    filter now declares TEXT_PATTERN, and each refuses a NUL naming itself, never a 500 or an unfiltered list."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert not re.match(TEXT_PATTERN, "a\x00b") and re.match(TEXT_PATTERN, "any text")
    checked = []
    for path, operations in schema["paths"].items():
        for item in operations.get("get", {}).get("parameters", []):
            if item["in"] == "query" and item["schema"].get("pattern") == TEXT_PATTERN:
                url = path.replace("{code}", question_a.code) + f"?{item['name']}=a%00b"
                assert _errors(pm.client().get(url)) == [(item["name"], "Null characters are not allowed.")], url
                checked.append(item["name"])
    assert len(checked) >= 18  # every text filter of every list (q, version, actor, organisation, ...)
    text_filters = [
        (path, item["name"])
        for path, operations in schema["paths"].items()
        for item in operations.get("get", {}).get("parameters", [])
        if item["in"] == "query" and item["schema"] == {"type": "string"}
    ]
    assert text_filters == []  # a text filter without the pattern


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        ("17", 17),
        ("2.3e+16", 23_000_000_000_000_000),
        ("2.3e16", 23_000_000_000_000_000),  # JSON's exponent sign is optional: read as `2.3e+16` is
        ("2.3E16", 23_000_000_000_000_000),
        ("5e1", 50),
        ("4.0", 4),
    ],
)
def test_a_whole_number_may_be_written_in_any_notation_a_json_number_has(raw, number):
    assert whole_number(raw) == number


@pytest.mark.parametrize("raw", ["0.5", "2.5e-1", "-1", "1e999", "0x10", " 5", "5 ", "", "e5", "1e", "٣"])
def test_what_is_not_a_whole_number_is_refused(raw):
    assert whole_number(raw) is None


def test_an_integer_parameter_written_as_schemathesis_writes_a_large_one_is_read(pm, question_a):
    """`2.315685896671196e+16` is an integer by the schema's rules (a JSON number with no fraction): it was a
    400 "whole number" from the id filters and the pages."""
    assert pm.client().get("/api/v1/runs/?artifact=2.315685896671196e%2B16").status_code == 200
    response = pm.client().get("/api/v1/questions/?page_size=2e0&page=1.0")
    assert response.status_code == 200
    assert response.json()["count"] == 1
    [(name, _)] = _errors(pm.client().get("/api/v1/runs/?artifact=2.5e-1"))
    assert name == "artifact"
    [(name, _)] = _errors(pm.client().get("/api/v1/questions/?page_size=2.01e2"))
    assert name == "page_size"


def test_an_exponent_without_its_sign_is_read_in_a_query_as_with_it(pm, question_a):
    """`+` in a query string is a space unless written %2B; `2.3e16` needs neither and means the same."""
    for raw in ("2.3e16", "2.3e%2B16"):
        assert pm.client().get(f"/api/v1/runs/?artifact={raw}").status_code == 200, raw
    refused = _errors(pm.client().get("/api/v1/questions/?page_size=2e16"))
    assert refused == [("page_size", "A whole number from 1 to 200.")]


def test_each_query_value_is_checked_once_per_request(pm, question_a, monkeypatch):
    """`check_query_parameters` reads the pagination, filters and ordering before the view; the view's own
    backends take that reading instead of checking the values (and looking up a section) a second time."""
    calls = []
    original_filters, original_integer = query.filter_value_errors, query.query_integer
    monkeypatch.setattr(query, "filter_value_errors", lambda *a: calls.append("filters") or original_filters(*a))
    monkeypatch.setattr(
        query, "query_integer", lambda r, name, **k: calls.append(name) or original_integer(r, name, **k)
    )
    make_capability("decode-batch-8", title="Decode batch 8", questions=[question_a])
    response = pm.client().get(
        "/api/v1/questions/", {"capability": "decode-batch-8", "page": "1", "page_size": "5", "ordering": "-number"}
    )
    assert response.status_code == 200 and response.json()["count"] == 1
    assert sorted(calls) == ["filters", "page", "page_size"]
    calls.clear()
    assert _errors(pm.client().get("/api/v1/questions/", {"capability": "none-such", "page_size": "0"})) == [
        ("capability", "Select a valid choice. That choice is not one of the available choices."),
        ("page_size", "A whole number from 1 to 200."),
    ]
