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
    assert errors["current"] == errors["current-s8"] == errors["current-b1"] == []
    assert [f.code for f in errors["A16"]] and all("A16" in f.message for f in errors["A16"])
    # A17's label is its defect; a package without a prefill then lacks one for each check that looks.
    assert "A17" in errors["A17"][0].message
    assert {f.code for f in errors["A17"][1:]} <= {"submodel_missing"}


def test_a_schema_that_holds_passes_for_metadata():
    report = check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata")
    assert report.passed, report.findings
    assert report.draft == "https://json-schema.org/draft/2020-12/schema"
    assert report.checked["accepted"] == {"current": True, "current-s8": True, "current-b1": True}
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
        ("rejects_current", "current-b1"),
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
    report = check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata", asks="version")
    assert report.passed, report.findings


def test_a_schema_naming_no_version_fails_v47():
    unversioned = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    unversioned["properties"]["schema_version"] = {"type": "integer"}
    assert check_schema(unversioned, "package-metadata").passed  # V08's check cannot tell
    report = check_schema(unversioned, "package-metadata", asks="version")
    assert codes(report) == ["version_not_pinned"] * 3  # 999, 1 and 3; the string "2" is no integer
    assert "schema_version 999" in report.findings[0].message


def test_a_schema_leaving_a_field_optional_fails_v47_naming_it():
    lax = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    lax["required"] = [name for name in lax["required"] if name not in ("name", "schema_version")]
    report = check_schema(lax, "package-metadata", asks="version")
    assert codes(report) == ["field_not_required", "field_not_required"]
    assert [f.detail["field"] for f in report.findings] == ["schema_version", "name"]


def test_only_a_metadata_schema_is_asked_a_fix_and_only_one_the_check_knows():
    with pytest.raises(ValueError):
        check_schema(PACKAGE_METADATA_SCHEMA, "trace", asks="version")
    with pytest.raises(ValueError, match="not 'spelling'"):
        check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata", asks="spelling")


# The seed's weakest fix: "the unit is not MB" and "the first sub-model is not llm_decode". It passes V08's check
# (it rejects A16 and A17 as the seed found them) and fails each question's own.
WEAK_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "properties": {
        "memory": {"properties": {"device_memory_required": {"properties": {"unit": {"not": {"const": "MB"}}}}}},
        "submodels": {"prefixItems": [{"properties": {"smodel_type": {"not": {"const": "llm_decode"}}}}]},
    },
}


@pytest.mark.parametrize("asks", ["version", "units", "A16", "A17", "compatibility"])
def test_the_schema_that_holds_passes_each_question_s_fix(asks):
    report = check_schema(PACKAGE_METADATA_SCHEMA, "package-metadata", asks=asks)
    assert report.passed, report.findings
    assert report.checked["asks"] == asks


@pytest.mark.parametrize(
    ("asks", "expected"),
    [
        ("version", ["version_not_pinned"] * 4 + ["field_not_required"] * 4),
        ("units", ["field_without_unit"] * 6),
        ("A16", ["unit_not_fixed"] * (3 + 6) + ["unit_not_required"] * 3),  # every drawn size but the one in MB
        ("A17", ["submodel_type_unchecked"] * 3),
        (
            "compatibility",
            ["compatibility_not_required"] + ["compatibility_incomplete"] * 4 + ["range_not_machine_readable"] * 4,
        ),
    ],
)
def test_a_schema_refusing_only_mb_and_a_first_llm_decode_fails_each_question_s_fix(asks, expected):
    assert check_schema(WEAK_SCHEMA, "package-metadata").passed  # V08's check cannot tell
    assert codes(check_schema(WEAK_SCHEMA, "package-metadata", asks=asks)) == expected


def test_v48_names_the_size_field_left_without_a_unit():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["properties"]["param_blocks"]["items"]["properties"]["size"] = {"type": "integer"}
    report = check_schema(schema, "package-metadata", asks="units")
    assert codes(report) == ["field_without_unit"]
    assert report.findings[0].detail["field"] == "param_blocks/*/size"
    assert "param_blocks/0/size, param_blocks/1/size" in report.findings[0].message
    # A unit the field carries counts only when the schema requires it: device_memory_required's unit optional.
    optional = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    optional["$defs"]["size_on_a_board"] = {
        "type": "object",
        "properties": {"value": {"type": "integer", "maximum": 2**36}, "unit": {"enum": ["B"]}},
    }
    report = check_schema(optional, "package-metadata", asks="units")
    assert [f.detail["field"] for f in report.findings] == ["memory/device_memory_required"]
    # And only when it must be a unit: required, but any string.
    free = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    free["$defs"]["size_on_a_board"] = {
        "type": "object",
        "required": ["value", "unit"],
        "properties": {"value": {"type": "integer", "maximum": 2**36}, "unit": {"type": "string"}},
    }
    report = check_schema(free, "package-metadata", asks="units")
    assert codes(report) == ["accepts_defect", "field_without_unit"]  # A16's MB too: V08's check says so
    assert report.findings[1].detail["field"] == "memory/device_memory_required"


def test_v48_finds_a_unit_given_through_a_reference_in_a_branch():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["$defs"]["bytes"] = {"anyOf": [{"type": "integer", "unit": "KiB"}, {"type": "null"}]}
    report = check_schema(schema, "package-metadata", asks="units")
    assert report.passed, report.findings
    assert report.checked["units"]["param_blocks/0/size"] == ["KiB"]


def test_v33_refuses_a16_whatever_its_unit():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["$defs"]["size_on_a_board"]["oneOf"][0]["properties"]["value"] = {"type": "integer"}  # any bytes
    report = check_schema(schema, "package-metadata", asks="A16")
    assert codes(report) == ["unit_not_fixed"] * 2  # A16's 16 TiB in B, and the size drawn in B
    assert "written as 17592186044416 B" in report.findings[0].message


def test_v43_refuses_a_label_checked_by_position():
    """Prefill first and labelled so, decode second and labelled so: the swapped package gets through."""
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    del schema["properties"]["submodels"]["contains"]
    del schema["$defs"]["submodel"]["if"], schema["$defs"]["submodel"]["then"], schema["$defs"]["submodel"]["else"]
    schema["properties"]["submodels"]["prefixItems"] = [
        {"properties": {"smodel_type": {"const": "llm_prefill"}}},
        {"properties": {"smodel_type": {"const": "llm_decode"}}},
    ]
    assert check_schema(schema, "package-metadata").passed
    report = check_schema(schema, "package-metadata", asks="A17")
    assert codes(report) == ["submodel_type_unchecked"]
    assert "the sub-models in the other order" in report.findings[0].message


def test_v43_refuses_a_type_told_by_batch_rather_than_by_name():
    """Prefill is batch 1, decode anything else: every mislabelling of a decode at batch 8 is caught, and the
    seed's own decode (M06), at batch 1 like its prefill, is refused."""
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    del schema["properties"]["submodels"]["contains"]
    schema["$defs"]["submodel"]["if"] = {"properties": {"batch": {"const": 1}}}
    schema["$defs"]["submodel"]["then"] = {"properties": {"smodel_type": {"const": "llm_prefill"}}}
    schema["$defs"]["submodel"]["else"] = {"properties": {"smodel_type": {"const": "llm_decode"}}}
    report = check_schema(schema, "package-metadata", asks="A17")
    assert [(f.code, f.detail["sample"]) for f in report.findings] == [("rejects_current", "current-b1")]
    assert "decode batch 1, as the seed's (M06)" in report.findings[0].message


def test_v46_refuses_a_range_in_words_and_a_missing_key():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["properties"]["compatibility"]["properties"]["calrt"] = {"type": "string"}
    schema["properties"]["compatibility"]["required"].remove("firmware")
    report = check_schema(schema, "package-metadata", asks="compatibility")
    assert codes(report) == ["compatibility_incomplete", "range_not_machine_readable"]
    assert report.findings[0].detail["key"] == "firmware"


# A vendor's schema that knows the checks rather than holding the fix: each passed its question's check before.


def test_v48_counts_no_unit_in_a_branch_the_value_never_takes():
    """Sizes of any integer, their unit in a branch for strings: the check's probe is a string, the sizes are not."""
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["$defs"]["bytes"] = {"anyOf": [{"type": "integer"}, {"type": "string", "unit": "B"}]}
    report = check_schema(schema, "package-metadata", asks="units")
    assert codes(report) == ["field_without_unit"] * 5
    assert "memory/chiplets/*/dram" in report.findings[0].message
    under_not = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    under_not["$defs"]["bytes"] = {"type": "integer", "not": {"type": "string", "unit": "B"}}
    assert codes(check_schema(under_not, "package-metadata", asks="units")) == ["field_without_unit"] * 5


def test_v48_refuses_a_unit_said_in_a_description_only():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["$defs"]["bytes"] = {"type": "integer", "minimum": 0, "description": "in bytes (B)"}
    assert codes(check_schema(schema, "package-metadata", asks="units")) == ["field_without_unit"] * 5


def test_v33_refuses_a_schema_that_knows_the_sizes_probed():
    """A16's 16 MiB-or-16 TiB restated in each unit refused by value, 32 TiB and any other size accepted."""
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["$defs"]["size_on_a_board"] = {
        "type": "object",
        "required": ["value", "unit"],
        "properties": {
            "unit": {"enum": ["B", "KB", "KiB", "MB", "MiB", "GB", "GiB"]},
            "value": {"not": {"enum": [16777216, 17592186044416, 17179869184, 16384]}},
        },
    }
    report = check_schema(schema, "package-metadata", asks="A16", seed=5)
    assert codes(report) == ["unit_not_fixed"] * 7
    assert report.checked["seed"] == 5 and len(report.checked["impossible_sizes"]) == 7
    assert "more than 1 TiB" in report.findings[0].message


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (("driver", {"type": "string"}), "driver"),
        (("firmware", {"type": "string"}), "firmware"),
        (("calrt", {"type": "string", "not": {"const": "0.7.6 or any later release"}}), "calrt"),
        (("chip", {}), "chip"),
    ],
    ids=["driver-in-words", "firmware-in-words", "calrt-knowing-the-words-probed", "chips-in-a-sentence"],
)
def test_v46_refuses_each_range_in_words(change, key):
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["properties"]["compatibility"]["properties"][change[0]] = change[1]
    report = check_schema(schema, "package-metadata", asks="compatibility")
    assert codes(report) == ["range_not_machine_readable"]
    assert report.findings[0].detail["key"] == key


def test_v47_refuses_a_schema_that_knows_the_version_probed():
    schema = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    schema["properties"]["schema_version"] = {"not": {"const": 999}}
    report = check_schema(schema, "package-metadata", asks="version")
    assert [f.detail["version"] for f in report.findings] == [1, 3, "2"]
