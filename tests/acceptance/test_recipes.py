import json
import subprocess
import sys

import pytest

from acceptance.limits import answer_limit_errors
from acceptance.recipes import (
    DECLARED_ONLY_FEATURES,
    PROVES_INTEGRATION,
    PROVES_PACKAGE,
    RECIPES,
    ProbeSpec,
    Recipe,
    recipe_for,
    simulator_proves,
    tightened,
)
from calculet.sentences import english
from evidence.seed.capabilities import CAPABILITIES
from evidence.seed.deliverables import QUESTION_DELIVERABLES
from npu_sim.probes import parse_probe_request


@pytest.fixture(scope="module")
def catalogue() -> dict[str, dict]:
    """The probes as the simulator's command prints them, the form a runner is told about."""
    printed = subprocess.run(
        [sys.executable, "-m", "npu_sim", "probes", "--json"], capture_output=True, text=True, check=True
    ).stdout
    return {probe["name"]: probe for probe in json.loads(printed)["probes"]}


def test_every_capability_has_one_recipe():
    assert set(RECIPES) == {seed.slug for seed in CAPABILITIES}
    for slug, recipe in RECIPES.items():
        assert recipe.capability == slug
        assert recipe.version >= 1
    with pytest.raises(KeyError, match="no-such"):
        recipe_for("no-such")


def test_recipe_probes_exist_exercise_their_capability_and_carry_the_declared_thresholds(catalogue):
    for recipe in RECIPES.values():
        for index, probe in enumerate(recipe.probes):
            declared = catalogue[probe.name]
            assert recipe.capability in declared["capabilities"], (recipe.capability, probe.name)
            # Every parameter written out, each within the catalogue's bounds (the runner's own parser).
            assert set(probe.params) == {p["name"] for p in declared["params"]}, (recipe.capability, probe.name)
            request = parse_probe_request(index, {"name": probe.name, "params": {**probe.params, **probe.thresholds}})
            assert request.params == {**probe.params, **probe.thresholds}
            # The thresholds are the catalogue's defaults, all of them.
            assert dict(probe.thresholds) == {t["name"]: t["default"] for t in declared["thresholds"]}, probe.name


def test_a_capability_with_probes_in_the_catalogue_has_them_in_its_recipe(catalogue):
    exercised = {slug for probe in catalogue.values() for slug in probe["capabilities"]}
    for slug in exercised:
        assert RECIPES[slug].probes, slug
    # Those without probes are proven by an SDK, image or schema deliverable instead.
    without = {slug for slug, recipe in RECIPES.items() if not recipe.probes}
    assert without == {"pdf-relocate-alloc", "reproducible-compile", "calbin-metadata-schema", "enginecore"}
    kinds = {slug: set() for slug in without}
    for deliverables in QUESTION_DELIVERABLES.values():
        for d in deliverables:
            for slug in set(d.capabilities) & without:
                kinds[slug].add(d.kind)
    assert all(kinds[slug] and "calbin" not in kinds[slug] for slug in without), kinds


def test_each_decode_batch_is_its_own_batch():
    assert [recipe_for(f"decode-batch-{n}").probes for n in (4, 8, 16)] == [
        (ProbeSpec("decode_batch", {"batch": 4}),),
        (ProbeSpec("decode_batch", {"batch": 8}),),
        (ProbeSpec("decode_batch", {"batch": 16}),),
    ]


def test_sdk_entry_points_are_the_seed_s_names():
    assert recipe_for("kv-manager-api").sdk_entry_points == (
        "KvManager::canAllocate",
        "KvManager::Allocate",
        "KvManager::Free",
        "KvManager::Apply",
        "KvManager::DoShift",
        "KvManager::Clear",
    )
    assert recipe_for("pdf-relocate-alloc").sdk_entry_points == ("RelocateTensorAddress", "AllocDevMem")
    for recipe in RECIPES.values():
        assert len(set(recipe.sdk_entry_points)) == len(recipe.sdk_entry_points)
        assert all(name.replace("::", "").isidentifier() for name in recipe.sdk_entry_points)


def test_an_answer_tightens_thresholds():
    recipe = recipe_for("npu-sampling")
    tighter = tightened(recipe, {"sampling": {"min_p_value": 0.01}})
    assert tighter.probes[0].thresholds == {"min_p_value": 0.01}
    assert tighter.probes[0].params == recipe.probes[0].params
    assert (tighter.capability, tighter.version) == (recipe.capability, recipe.version)
    assert recipe.probes[0].thresholds == {"min_p_value": 0.001}  # the recipe itself is unchanged
    s8 = tightened(recipe_for("s8-v-cache-calbin"), {"s8": {"max_rel_vs_float": 0.01, "cosine_min_vs_float": 0.9999}})
    assert s8.probes[0].thresholds == {
        "cosine_min_vs_float": 0.9999,
        "top1_min_vs_float": 0.9,
        "max_rel_vs_float": 0.01,
    }
    # The same value is no loosening.
    assert tightened(recipe, {"sampling": {"min_p_value": 0.001}}) == recipe
    # A recipe of several probes: only the one named changes.
    layout = tightened(recipe_for("kv-batch-layout"), {"s8": {"top1_min_vs_float": 0.95}})
    assert [p.thresholds.get("top1_min_vs_float") for p in layout.probes] == [None, 0.95]


@pytest.mark.parametrize(
    ("capability", "overrides", "message"),
    [
        (
            "npu-sampling",
            {"sampling": {"min_p_value": 0.0001}},
            "probe sampling threshold min_p_value: 0.0001 is lower",
        ),
        ("s8-v-cache-calbin", {"s8": {"max_rel_vs_float": 0.1}}, "probe s8 threshold max_rel_vs_float: 0.1 is higher"),
        ("npu-sampling", {"sampling": {"max_p_value": 0.5}}, "probe sampling has no threshold 'max_p_value'"),
        ("npu-sampling", {"sampling": {"top_k": 10}}, "probe sampling has no threshold 'top_k'"),
        ("npu-sampling", {"s8": {"max_rel_vs_float": 0.01}}, "probe 's8' is not in its recipe"),
        ("npu-sampling", {"sampling": {"min_p_value": 2}}, "min_p_value is at most 1, not 2"),
        ("npu-sampling", {"sampling": {"min_p_value": "0.5"}}, "min_p_value must be a number, not '0.5'"),
        ("decode-batch-8", {"decode_batch": {"worst_lane_cosine": 0.99}}, "decode_batch has no threshold"),
    ],
)
def test_loosening_or_unknown_overrides_are_refused_by_name(capability, overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")) as raised:
        tightened(recipe_for(capability), overrides)
    assert str(raised.value).startswith(capability)


# The loosened answers: a corrupted expert block (cosine 0.93) passed with these tolerances, a batch-16
# package that reached 8.1 token/s passed with a 5 token/s floor, and an unknown key was stored silently.
@pytest.mark.parametrize(
    ("tolerances", "thresholds", "field", "message"),
    [
        ({"cosine_min": 0.5}, {}, "golden.tolerances.cosine_min", "0.5 is lower than the default 0.9999"),
        ({"top1_min": 0}, {}, "golden.tolerances.top1_min", "0 is lower than the default 0.99"),
        ({"topk_min": 0}, {}, "golden.tolerances.topk_min", "0 is lower than the default 0.99"),
        ({"max_rel": 100}, {}, "golden.tolerances.max_rel", "100 is higher than the default 0.01"),
        ({"decode_logits.max_rel": 0.02}, {}, "golden.tolerances.decode_logits.max_rel", "higher than the default"),
        # No k is tighter than another: a deeper top-k ignores a reordering near the top.
        ({"k": 100}, {}, "golden.tolerances.k", "No golden tolerance 'k'"),
        ({".cosine_min": 0.99999}, {}, "golden.tolerances..cosine_min", "No compared tensor ''"),
        ({"cosine_min": 1.5}, {}, "golden.tolerances.cosine_min", "from -1 to 1"),
        ({"atol": 0.02}, {}, "golden.tolerances.atol", "No golden tolerance 'atol'"),
        ({"hidden.cosine_min": 1}, {}, "golden.tolerances.hidden.cosine_min", "No compared tensor 'hidden'"),
        ({}, {"min_decode_tokens_per_s": 5}, "thresholds.min_decode_tokens_per_s", "5 is lower than the default 10"),
        ({}, {"min_decode_tokens_per_s": 0}, "thresholds.min_decode_tokens_per_s", "lower than the default"),
        ({}, {"soak_requests": 8}, "thresholds.soak_requests", "8 is lower than the default 16"),
        ({}, {"soak_concurrency": 2}, "thresholds.soak_concurrency", "2 is lower than the default 4"),
        ({}, {"soak_output_tokens": 16}, "thresholds.soak_output_tokens", "lower than the default 32"),
        ({}, {"soak_requests": 1e9}, "thresholds.soak_requests", "from 1 to 512"),
        ({}, {"bogus": 1.0}, "thresholds.bogus", "No threshold 'bogus'"),
        ({}, {"golden_min_decode_steps": 1}, "thresholds.golden_min_decode_steps", "1 is lower than the default 4"),
        ({}, {"golden_min_decode_steps": 4.5}, "thresholds.golden_min_decode_steps", "Must be a whole number"),
        ({}, {"decode_batch.worst_lane_cosine": 0.99}, "thresholds.decode_batch.worst_lane_cosine", "no threshold"),
    ],
)
def test_an_answer_that_loosens_or_names_an_unknown_limit_is_refused_naming_it(tolerances, thresholds, field, message):
    errors = answer_limit_errors(recipe_for("decode-batch-16"), tolerances, thresholds)
    assert list(errors) == [field]
    assert message in english(errors[field])


def test_an_answer_that_only_tightens_has_no_limit_errors():
    tolerances = {"cosine_min": 0.99995, "max_abs": 0.05, "decode_logits.top1_min": 1, "max_rel": 0.001}
    thresholds = {
        "min_decode_tokens_per_s": 12,
        "soak_requests": 64,
        "sampling.min_p_value": 0.01,
        "golden_min_decode_steps": 8,
    }
    assert answer_limit_errors(recipe_for("npu-sampling"), tolerances, thresholds) == {}
    assert answer_limit_errors(None, {}, {"soak_requests": 16}) == {}


def test_a_probe_threshold_without_a_recipe_is_refused():
    errors = answer_limit_errors(None, {}, {"sampling.min_p_value": 0.01})
    assert list(errors) == ["thresholds.sampling.min_p_value"]
    assert english(errors["thresholds.sampling.min_p_value"]) == (
        "A probe threshold needs the capability whose recipe it tightens."
    )


def test_a_recipe_is_frozen():
    recipe = Recipe("x", 1)
    with pytest.raises(AttributeError):
        recipe.version = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        RECIPES["x"] = recipe  # type: ignore[index]


def test_runtime_semantics_capabilities_prove_calculets_integration_on_the_simulator():
    """Their probes drive the runtime's calls, which on the simulator are npu_sim's own (E4): what they prove there
    is calculet's integration against the documented semantics, not the vendor's runtime."""
    runtime = ["kv-manager-api", "fixed-task-infer", "output-buffer-wait", "parallel-mode", "c-api-nonblocking",
               "error-codes", "device-reset"]  # fmt: skip
    assert {slug: simulator_proves(recipe_for(slug)) for slug in runtime} == dict.fromkeys(runtime, PROVES_INTEGRATION)
    package = ["decode-batch-8", "npu-sampling", "s8-v-cache-calbin", "custom-kernel-sdk", "golden-readback"]
    assert {slug: simulator_proves(recipe_for(slug)) for slug in package} == dict.fromkeys(package, PROVES_PACKAGE)
    assert simulator_proves(recipe_for("calbin-metadata-schema")) is None


def test_a_feature_carried_only_as_a_declaration_does_not_make_the_runs_a_proof_of_the_package(tmp_path):
    """Built with or without multi_model and residency, a package's files differ only in its name and features: a
    probe needing only these drives the simulator's runtime, so its runs prove calculet's integration."""
    from npu_sim.calbin import build_calbin

    plain = build_calbin(tmp_path / "plain", decode_batch=2)
    declared = build_calbin(tmp_path / "declared", decode_batch=2, features=sorted(DECLARED_ONLY_FEATURES))
    differ = sorted(
        p.relative_to(plain).as_posix()
        for p in plain.rglob("*")
        if p.is_file() and p.read_bytes() != (declared / p.relative_to(plain)).read_bytes()
    )
    assert differ == ["SHA256SUMS", "model_memory_reserved_info.txt", "package_info.txt"]
    assert simulator_proves(recipe_for("dynamic-resident-multi-model")) == PROVES_INTEGRATION
    # A computed layout beside them (single_chiplet) is the package's.
    assert simulator_proves(recipe_for("two-models-one-chiplet")) == PROVES_PACKAGE
