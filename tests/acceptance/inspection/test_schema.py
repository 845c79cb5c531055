import copy

import pytest

from acceptance.inspection.samples import metadata_packages, samples_for
from acceptance.inspection.schema import check_schema
from npu_sim.calbin import validate
from tests.inspection_builders import PACKAGE_METADATA_SCHEMA, PERMISSIVE_SCHEMA


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_the_samples_are_what_the_simulator_says_they_are():
    metadata = samples_for("package-metadata")
    by_name = {s.name: s.document for s in metadata.accept + metadata.reject}
    assert by_name["current"]["decode_batch"] == 8
    assert by_name["current-s8"]["layout"] == "single_chiplet" and by_name["current-s8"]["dtypes"]["v_cache"] == "s8"
    assert by_name["A16"]["memory"]["device_memory_required"] == {"value": 16777216, "unit": "MB"}
    assert [s["smodel_type"] for s in by_name["A17"]["submodels"]] == ["llm_decode", "llm_decode"]
    # A trace is the vendor's own format, held to its own sample (test_trace.py): the simulator has none for it.
    with pytest.raises(ValueError, match="schema subject must be one of package-metadata, not 'trace'"):
        samples_for("trace")
    # Each call gives its own copy.
    samples_for("package-metadata").accept[0].document["name"] = "changed"
    assert samples_for("package-metadata").accept[0].document["name"] != "changed"


def test_the_samples_are_packages_npu_sim_s_validator_judges_so(tmp_path):
    packages = metadata_packages(tmp_path)
    errors = {name: [f for f in validate(path) if f.severity == "error"] for name, path in packages.items()}
    assert errors["current"] == [] and errors["current-s8"] == []
    assert [f.code for f in errors["A16"]] and all("A16" in f.message for f in errors["A16"])
    # A17's label is its defect; a package without a prefill then lacks one for each check that looks.
    assert "A17" in errors["A17"][0].message
    assert {f.code for f in errors["A17"][1:]} <= {"submodel_missing"}


def test_a_schema_that_holds_passes_for_metadata():
    report = check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata")
    assert report.passed, report.findings
    assert report.draft == "https://json-schema.org/draft/2020-12/schema"
    assert report.checked["accepted"] == {"current": True, "current-s8": True}
    assert set(report.checked["rejected"]) == {"A16", "A17"}
    assert all(report.checked["rejected"].values())


def test_a_schema_that_accepts_the_seed_s_defects_fails():
    report = check_schema(PERMISSIVE_SCHEMA, "package-metadata")
    assert [(f.code, f.detail["sample"]) for f in report.findings] == [
        ("accepts_defect", "A16"),
        ("accepts_defect", "A17"),
    ]
    assert "16777216 MB" in report.findings[0].message


def test_a_schema_that_only_catches_a16_still_fails_on_a17():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    del schema["properties"]["submodels"]["contains"]
    del schema["$defs"]["submodel"]["if"], schema["$defs"]["submodel"]["then"]
    report = check_schema(schema, "package-metadata")
    assert [(f.code, f.detail["sample"]) for f in report.findings] == [("accepts_defect", "A17")]


def test_a_schema_that_rejects_the_current_package_fails():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["properties"]["layout"] = {"const": "ep"}
    report = check_schema(schema, "package-metadata")
    assert [(f.code, f.detail["sample"]) for f in report.findings] == [
        ("rejects_current", "current"),
        ("rejects_current", "current-s8"),
    ]
    assert "/layout: 'ep' was expected" in report.findings[0].message


def test_the_answer_s_own_current_metadata_must_be_accepted():
    vendor = samples_for("package-metadata").accept[0].document
    vendor["memory"]["device_memory_required"] = {"value": 3, "unit": "GiB"}
    assert check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata", also_accept={"vendor": vendor}).passed
    vendor["layout"] = "hybrid"
    report = check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata", also_accept={"vendor": vendor})
    assert [(f.code, f.detail["sample"]) for f in report.findings] == [("rejects_current", "vendor")]


@pytest.mark.parametrize(
    ("field_format", "good", "bad"),
    [("uri", "https://vendor.example/packages/b8", "not a uri"), ("date-time", "2026-08-02T10:00:00Z", "yesterday")],
)
@pytest.mark.parametrize(
    "draft", ["https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"]
)
def test_the_formats_a_schema_names_are_checked(draft, field_format, good, bad):
    vendor = samples_for("package-metadata").accept[0].document
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA) | {"$schema": draft}
    schema["properties"]["source"] = {"type": "string", "format": field_format}
    assert check_schema(schema, "package-metadata", also_accept={"vendor": vendor | {"source": good}}).passed
    report = check_schema(schema, "package-metadata", also_accept={"vendor": vendor | {"source": bad}})
    assert [(f.code, f.detail["sample"]) for f in report.findings] == [("rejects_current", "vendor")]
    assert f"is not a '{field_format}'" in report.findings[0].message


@pytest.mark.parametrize(
    ("schema", "code"),
    [
        ({"type": "objekt"}, "schema_invalid"),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}, "schema_draft_unsupported"),
        (["not", "an", "object"], "schema_invalid"),
        ({"$ref": "https://schemas.example.invalid/calbin.json"}, "schema_unresolvable"),
    ],
)
def test_a_schema_that_cannot_be_used_fails(schema, code):
    report = check_schema(schema, "package-metadata")
    assert codes(report) == [code]


def test_an_unknown_subject_is_refused():
    with pytest.raises(ValueError, match="schema subject must be one of package-metadata, not 'onnx'"):
        check_schema(PACKAGE_METADATA_SCHEMA, "onnx")


def test_v47_s_schema_pins_the_version_and_requires_the_fields():
    report = check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata", versioned=True)
    assert report.passed, report.findings


def test_a_schema_naming_no_version_fails_v47():
    unversioned = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    unversioned["properties"]["schema_version"] = {"type": "integer"}
    assert check_schema(unversioned, "package-metadata").passed  # V08's check cannot tell
    report = check_schema(unversioned, "package-metadata", versioned=True)
    assert codes(report) == ["version_not_pinned"]
    assert "schema_version 999" in report.findings[0].message


def test_a_schema_leaving_a_field_optional_fails_v47_naming_it():
    lax = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    lax["required"] = [name for name in lax["required"] if name not in ("name", "schema_version")]
    report = check_schema(lax, "package-metadata", versioned=True)
    assert codes(report) == ["field_not_required", "field_not_required"]
    assert [f.detail["field"] for f in report.findings] == ["schema_version", "name"]


def test_only_a_metadata_schema_is_held_to_a_version():
    with pytest.raises(ValueError):
        check_schema(PACKAGE_METADATA_SCHEMA, "trace", versioned=True)
