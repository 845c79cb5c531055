from evidence.seed.capabilities import CAPABILITIES, QUESTION_CAPABILITIES
from evidence.seed.deliverables import KINDS, QUESTION_DELIVERABLES, SCHEMA_ASKS, SCHEMA_SUBJECTS, TOOL_INPUTS
from evidence.seed.parser import parse_checklist

SLUGS = {seed.slug for seed in CAPABILITIES}
ALL = [(code, d) for code, deliverables in QUESTION_DELIVERABLES.items() for d in deliverables]


def test_every_question_of_the_seed_has_a_deliverable(seed_text):
    codes = {q.code for q in parse_checklist(seed_text).questions}
    assert len(codes) == 60
    assert set(QUESTION_DELIVERABLES) == codes
    assert all(QUESTION_DELIVERABLES[code] for code in codes)


def test_keys_are_unique_slugs_within_a_question():
    for code, deliverables in QUESTION_DELIVERABLES.items():
        keys = [d.key for d in deliverables]
        assert len(keys) == len(set(keys)), code
        for key in keys:
            assert key == key.lower() and key.replace("-", "").isalnum() and len(key) <= 50, (code, key)


def test_each_kind_carries_what_its_acceptance_needs():
    for code, d in ALL:
        assert d.kind in KINDS, (code, d.key)
        assert d.title and d.title[0].isupper(), (code, d.key)
        assert set(d.capabilities) <= SLUGS, (code, d.key)
        assert len(d.capabilities) == len(set(d.capabilities)), (code, d.key)
        if d.kind in ("calbin", "sdk"):
            assert d.capabilities, (code, d.key)
        if d.kind == "document":
            assert d.checklist and not d.capabilities, (code, d.key)
        else:
            assert not d.checklist, (code, d.key)
        assert (d.schema_of in SCHEMA_SUBJECTS) == (d.kind == "schema"), (code, d.key)


def test_every_linked_capability_is_proven_by_a_deliverable_of_its_question():
    for code, slugs in QUESTION_CAPABILITIES.items():
        proven = {slug for d in QUESTION_DELIVERABLES[code] for slug in d.capabilities}
        assert set(slugs) <= proven, code
    # ...and a deliverable proves only what its question is linked to, so no question moves a stranger.
    for code, d in ALL:
        assert set(d.capabilities) <= set(QUESTION_CAPABILITIES.get(code, ())), (code, d.key)


def test_every_capability_has_a_question_that_can_prove_it():
    proven = {slug for _, d in ALL for slug in d.capabilities}
    # V36 asks for a roadmap, its API and a migration: a document. No question of the seed asks for a running
    # multi-device package, so the two multi-device capabilities are moved by none of them.
    assert SLUGS - proven == {"multi-board", "multi-physical-device-calrt-0-7-6"}
    assert {d.kind for d in QUESTION_DELIVERABLES["V36"]} == {"document"}


def test_the_acceptance_column_s_kinds():
    kinds = {code: {d.kind for d in deliverables} for code, deliverables in QUESTION_DELIVERABLES.items()}
    # One package per decode batch: a batch-8 package proves nothing about batch 16.
    assert [(d.kind, d.capabilities) for d in QUESTION_DELIVERABLES["V18"]] == [
        ("calbin", ("decode-batch-4",)),
        ("calbin", ("decode-batch-8",)),
        ("calbin", ("decode-batch-16",)),
    ]
    for code in ("V17", "V23", "V25", "V26", "V30", "V31", "V35", "V32", "V51"):
        assert "calbin" in kinds[code], code
    # V31 is two models one per chiplet, not section 13's two models on one chiplet; V26 is DoShift's table,
    # proven by the probe that shifts, not by sequence min/max.
    assert QUESTION_CAPABILITIES["V31"] == ("two-models-two-chiplets",)
    assert QUESTION_CAPABILITIES["V26"] == ("kv-manager-api",)
    assert QUESTION_CAPABILITIES["V23"] == ("job-cancel-timeout",)
    for code in ("V12", "V55"):
        assert "sdk" in kinds[code], code
    for code in ("V01", "V03", "V59"):
        assert "container_image" in kinds[code], code
    for code in ("V08", "V33", "V37", "V43", "V46", "V47", "V48"):
        assert "schema" in kinds[code], code
    for code in ("V02", "V09", "V28", "V29", "V34", "V36", "V39", "V40", "V41", "V44", "V56", "V60"):
        assert "document" in kinds[code], code
    assert {d.schema_of for d in QUESTION_DELIVERABLES["V37"] if d.kind == "schema"} == {"trace"}
    # Only written answers: these close their question and move no capability.
    for code in ("V02", "V09", "V29", "V34", "V39", "V40", "V41", "V44", "V56", "V60"):
        assert kinds[code] == {"document"}, code
        assert code not in QUESTION_CAPABILITIES, code


def test_every_c1_capability_of_section_10_has_an_sdk_deliverable(seed_text):
    items = {item.code: item for item in parse_checklist(seed_text).items}
    section_10_c1 = {
        seed.slug
        for seed in CAPABILITIES
        if seed.status == "C1" and any(code.startswith("I") and code in items for code in seed.evidence)
    }
    assert section_10_c1 >= {"fixed-task-infer", "parallel-mode", "golden-readback", "full-debug", "error-codes"}
    by_sdk = {slug for _, d in ALL if d.kind == "sdk" for slug in d.capabilities}
    # The error codes are a table in a header (I15: calrt_errorlist.def), not entry points: runs prove them.
    assert section_10_c1 - by_sdk == {"error-codes"}


def test_alternatives_come_in_groups_and_v45_closes_on_the_sdk_or_the_erratum():
    for code, deliverables in QUESTION_DELIVERABLES.items():
        groups = [d.either for d in deliverables if d.either]
        assert all(groups.count(group) >= 2 for group in groups), code
    v45 = {d.key: (d.kind, d.either) for d in QUESTION_DELIVERABLES["V45"]}
    assert v45 == {"relocation-api": ("sdk", "relocation"), "relocation-erratum": ("document", "relocation")}


def test_each_metadata_schema_question_asks_its_own_fix():
    """V08 asks for the format's schema (the check every metadata schema gets); the others each a fix of it."""
    asks = {code: d.asks for code, d in ALL if d.kind == "schema" and d.schema_of == "package-metadata"}
    assert asks == {"V08": "", "V33": "A16", "V43": "A17", "V46": "compatibility", "V47": "version", "V48": "units"}
    assert set(asks.values()) - {""} == set(SCHEMA_ASKS)
    assert all(d.kind == "schema" for _, d in ALL if d.asks)


def test_v04_s_onnx_is_c02_s_and_v01_s_container_holds_c03_and_c04(seed_text):
    """The hash and the commits are the seed's own (section 1's C02, C03, C04; section 12's V02, V04)."""
    (v04,) = [d for d in QUESTION_DELIVERABLES["V04"] if d.kind == "onnx"]
    assert v04.sha256_prefix == "316f06" and "hash `316f06...`" in seed_text
    (v01,) = QUESTION_DELIVERABLES["V01"]
    assert v01.commits == (("calcc", "575c2d"), ("tvm", "7aebd1"))
    assert "calcc `575c2d...` 和 TVM `7aebd1...`" in seed_text
    assert [d for _, d in ALL if d.sha256_prefix] == [v04] and [d for _, d in ALL if d.commits] == [v01]
    (v05,) = [d for d in QUESTION_DELIVERABLES["V05"] if d.kind == "tool"]
    assert v05.runs_on in TOOL_INPUTS and [d for _, d in ALL if d.kind == "tool"] == [v05]


def test_only_v07s_image_must_list_its_components_files_in_the_sbom():
    """V07 asks how passes, codegen, C oplib and kernels correspond: its SBOM is compared with the image's
    files; the other images (V01's compiler, V59's EngineCore...) need an SBOM, not that one."""
    listed = {code: d.key for code, d in ALL if d.sbom_components}
    assert listed == {"V07": "component-manifest"}
