"""The schema declares the limits the server holds answers and uploads to, from the one place they are kept
(acceptance/limits.py, the tus view's header rules): a bound changed in limits.py and not in the schema, a
key the schema names and the check refuses (or the other way round), or a metadata header the schema allows
and the server could never parse, fails here naming it."""

import re

import pytest
from drf_spectacular.generators import SchemaGenerator

from acceptance.limits import answer_limit_errors
from acceptance.recipes import RECIPES
from calculet.errors import DomainError
from vendor.api.uploads import METADATA_MAX_BYTES, metadata_parse


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def _declared(schema, component: str, field: str) -> dict:
    declared = schema["components"]["schemas"][component]["properties"][field]
    assert declared["additionalProperties"] is False
    return declared["properties"]


def _step(declared: dict) -> float:
    """The smallest move past a bound that the check must see: 1 for a whole number, a little for others."""
    return 1 if declared["type"] == "integer" else 1e-9


def _probe_recipes(key: str):
    probe, _, threshold = key.partition(".")
    return [
        recipe
        for recipe in RECIPES.values()
        if any(item.name == probe and threshold in item.thresholds for item in recipe.probes)
    ]


def _accepted(recipe, tolerances: dict, thresholds: dict) -> bool:
    return answer_limit_errors(recipe, tolerances, thresholds) == {}


def test_the_declared_tolerances_are_the_ones_the_check_takes_within_its_bounds(schema):
    for component in ("GoldenRequest", "Golden"):
        properties = _declared(schema, component, "tolerances")
        assert len(properties) == 15  # five tolerances, for every tensor or one of the two
        for name, declared in properties.items():
            low, high, step = declared["minimum"], declared["maximum"], _step(declared)
            assert _accepted(None, {name: low}, {}), name
            assert _accepted(None, {name: high}, {}), name
            assert not _accepted(None, {name: low - step}, {}), name
            assert not _accepted(None, {name: high + step}, {}), name
    assert not _accepted(None, {"atol": 0.1}, {})  # not declared, and refused


def test_the_declared_thresholds_are_the_ones_the_check_takes_within_its_bounds(schema):
    properties = _declared(schema, "AnswerInputRequest", "thresholds")
    soak = {name: declared for name, declared in properties.items() if "." not in name}
    assert set(soak) == {
        "golden_min_decode_steps",
        "soak_requests",
        "soak_concurrency",
        "soak_prompt_tokens",
        "soak_output_tokens",
        "min_decode_tokens_per_s",
        "soak_golden_samples",
        "soak_min_duration_s",
    }
    for name, declared in soak.items():
        low, high, step = declared["minimum"], declared["maximum"], _step(declared)
        assert _accepted(None, {}, {name: low}) and _accepted(None, {}, {name: high}), name
        assert not _accepted(None, {}, {name: low - step}), name
        assert not _accepted(None, {}, {name: high + step}), name
        if declared["type"] == "integer":
            assert not _accepted(None, {}, {name: low + 0.5}), name
    probes = {name: declared for name, declared in properties.items() if "." in name}
    assert "sampling.min_p_value" in probes and "s8.max_rel_vs_float" in probes
    for name, declared in probes.items():
        recipes = _probe_recipes(name)
        assert recipes, f"{name}: declared, but no recipe's probe has it"
        step = _step(declared)
        for bound in ("minimum", "maximum"):
            if bound in declared:
                assert any(_accepted(recipe, {}, {name: declared[bound]}) for recipe in recipes), (name, bound)
        if "minimum" in declared:
            assert not any(_accepted(recipe, {}, {name: declared["minimum"] - step}) for recipe in recipes), name
        if "maximum" in declared:
            assert not any(_accepted(recipe, {}, {name: declared["maximum"] + step}) for recipe in recipes), name


def test_every_threshold_a_recipe_takes_is_declared(schema):
    properties = _declared(schema, "AnswerInputRequest", "thresholds")
    probes = [probe for recipe in RECIPES.values() for probe in recipe.probes]
    taken = {f"{probe.name}.{threshold}" for probe in probes for threshold in probe.thresholds}
    assert taken and taken <= set(properties)


UPLOAD_METADATA_FORMED = ["kind Z29sZGVu,version MS4w", "kind Z29sZGVu, filename Zi5ucHo=", "kind", "a , b YQ=="]
UPLOAD_METADATA_MALFORMED = ["", "kind !!!", "kind Z29sZGV", "a b c", "kind Z29sZGVu,,version MS4w", "k\tZg=="]


def _upload_metadata(schema) -> dict:
    [declared] = [
        item["schema"]
        for item in schema["paths"]["/api/v1/uploads/"]["post"]["parameters"]
        if item["name"] == "Upload-Metadata"
    ]
    return declared


def test_the_declared_upload_metadata_is_what_the_server_parses(schema):
    declared = _upload_metadata(schema)
    assert declared["maxLength"] == METADATA_MAX_BYTES
    for header in UPLOAD_METADATA_FORMED:
        assert re.match(declared["pattern"], header), header
        metadata_parse(header)
    for header in (" kind Z29sZGVu", "kind Z29sZGVu "):  # HTTP drops them; a client cannot send them (requests refuses)
        assert not re.match(declared["pattern"], header), header
    for header in UPLOAD_METADATA_MALFORMED:
        assert not re.match(declared["pattern"], header), header
        with pytest.raises(DomainError):
            metadata_parse(header)


def _create(account, **headers):
    return account.client().post("/api/v1/uploads/", HTTP_TUS_RESUMABLE="1.0.0", HTTP_UPLOAD_LENGTH="5", **headers)


def test_upload_metadata_is_refused_as_too_large_just_past_its_declared_length(vendor_a, schema):
    declared = _upload_metadata(schema)
    limit = declared["maxLength"]
    at_limit, past_limit = "k" * limit, "k" * (limit + 1)  # one long key, no value
    assert re.match(declared["pattern"], at_limit) and re.match(declared["pattern"], past_limit)
    within = _create(vendor_a, HTTP_UPLOAD_METADATA=at_limit)
    assert (within.status_code, within.json()["errors"][0]["field"]) == (400, "Upload-Metadata.kind")
    beyond = _create(vendor_a, HTTP_UPLOAD_METADATA=past_limit)
    assert (beyond.status_code, beyond.json()["errors"][0]["code"]) == (431, "header_too_large")


def test_a_missing_upload_metadata_is_named_as_missing_not_malformed(vendor_a):
    response = _create(vendor_a)
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "Upload-Metadata", "code": "invalid", "message": "The Upload-Metadata header is required."}
    ]
