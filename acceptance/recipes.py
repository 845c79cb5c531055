"""How each capability is proven: its recipe, as data beside the promotion policy. No ORM here.

A recipe names the simulator probes that exercise the capability (`python -m npu_sim probes`, the
catalogue in npu_sim/probes), with the parameters and default thresholds they run with, and the SDK entry
points the capability needs (checked in the delivered headers and the library's dynamic symbols).

- Parameters are written out in full, so a recipe keeps meaning what it meant when the simulator's
  defaults change; a change to a recipe's probes, parameters or thresholds is a new `version`.
- Thresholds are the catalogue's defaults. An answer may tighten them (`tightened`), never loosen them:
  each threshold's stricter direction is the catalogue's. The same holds for the limits every chain applies,
  recipe or not: the golden tolerances and the soak's counts and rate (`acceptance.limits`).
- SDK entry points are the names the seed itself gives (sections 6 and 10; V20, V45, V50, V54):
  `Class::method` for a C++ member, a bare name for a function or a member of a class the seed does not
  name. Where the seed asks for a call without naming it (V23's cancel and time-out), the recipe names its
  role and the SDK must name its call for each role. A capability whose seed rows name neither is checked
  against the names the answer declares.
- A recipe with a probe that configures a second model (`multi_model`, `residency`) needs two calbin packages:
  the answer's first calbin (the one stored first) is the package under test, the other the job's
  `packages.second`.
- A capability the simulator cannot exercise (a compiler, a schema, a separate SDK) has no probes: its
  container image, schema or SDK deliverable proves it. One that is about a build (`reproducible_build`)
  is proven only by the answer's build run twice with the same bytes out (V03).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from npu_sim.probes import PROBES


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    params: Mapping[str, object] = field(default_factory=dict)
    thresholds: Mapping[str, float] = field(default_factory=dict)


# Probes that configure a second model beside the package under test: the job's `packages.second`.
SECOND_PACKAGE_PROBES = frozenset({"multi_model", "residency", "models_per_chiplet"})


@dataclass(frozen=True)
class Recipe:
    capability: str
    version: int
    probes: tuple[ProbeSpec, ...] = ()
    sdk_entry_points: tuple[str, ...] = ()
    # Calls the seed asks for without naming them: (role, what the call does). The SDK names its call for
    # each role in entry_points.txt (`cancel = VirtualDevice::CancelJob`), checked as the named ones are.
    sdk_roles: tuple[tuple[str, str], ...] = ()
    reproducible_build: bool = False  # the answer's build must run twice in fresh sandboxes, same bytes out

    @property
    def names_sdk_calls(self) -> bool:
        """Whether the SDK must carry calls for it: entry points by name or calls named for its roles (the
        promotion policy's `sdk` requirement applies only then)."""
        return bool(self.sdk_entry_points or self.sdk_roles)

    @property
    def needs_second_package(self) -> bool:
        """Whether the answer delivers two calbin packages: the one under test and the other model."""
        return any(probe.name in SECOND_PACKAGE_PROBES for probe in self.probes)


LAYOUT_THRESHOLDS = {"cosine_min": 0.9999, "top1_min": 0.99, "max_rel": 0.01}
SAMPLING = ProbeSpec(
    "sampling",
    {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 1234, "draws": 50000},
    {"min_p_value": 0.001},
)
S8_V = ProbeSpec("s8", {"kv": "v"}, {"cosine_min_vs_float": 0.999, "top1_min_vs_float": 0.9, "max_rel_vs_float": 0.05})
MULTI_BOARD = ProbeSpec("multi_board", {"link_gb_s": 25.0, "link_latency_us": 10.0}, LAYOUT_THRESHOLDS)
SINGLE_CHIPLET = ProbeSpec("single_chiplet")
MULTI_MODEL = ProbeSpec("multi_model")
PARALLEL_MODE = ProbeSpec("parallel_mode", {"threads": 4, "jobs_per_thread": 6, "max_in_flight": 4})
FAULT_RECOVERY = ProbeSpec("fault_recovery")
ERROR_MAPPING = ProbeSpec("error_mapping", {"retries": 2})
KV_MANAGER_CALLS = tuple(
    f"KvManager::{name}" for name in ("canAllocate", "Allocate", "Free", "Apply", "DoShift", "Clear")
)


# A decode package is driven through the C++ infer call and the output buffer's Wait (I06, R14: 0.7.6 symbols,
# E2/C0 infer) and the KV manager's allocation and apply of each lane (K07).
DECODE_CALLS = ("infer", "OutputBuf::Wait", "KvManager::Allocate", "KvManager::Apply")


def decode_batch(batch: int) -> ProbeSpec:
    return ProbeSpec("decode_batch", {"batch": batch})


_RECIPES = [
    # Pinned (section 13): they move only on new artifacts and real tests.
    Recipe("multi-board", 1, (MULTI_BOARD,)),
    # Two single-chiplet packages configured on one chiplet: the job's second package is the other model.
    Recipe("two-models-one-chiplet", 1, (SINGLE_CHIPLET, MULTI_MODEL)),
    Recipe("expert-parallel", 1, (ProbeSpec("expert_parallel", {}, LAYOUT_THRESHOLDS),)),
    Recipe("dynamic-resident-multi-model", 1, (ProbeSpec("residency"),)),
    Recipe("npu-sampling", 1, (SAMPLING,)),
    # On a CalRT 0.7.6 device the probe ends not_exercised (I09): the capability stays C4.
    Recipe("multi-physical-device-calrt-0-7-6", 1, (MULTI_BOARD,)),
    # From the evidence rows.
    Recipe("kv-seq-min-max", 1, (ProbeSpec("kv_seq_min_max"),)),
    # K07's DoShift against V26's whole table: kv_shift needs a package of two lanes or more.
    Recipe("kv-manager-api", 2, (ProbeSpec("kv_manager"), ProbeSpec("kv_shift")), KV_MANAGER_CALLS),
    # K08: the batch layout and the S8 V cache; batch 4 is the smallest V18 asks for.
    Recipe("kv-batch-layout", 1, (decode_batch(4), S8_V)),
    Recipe("s8-v-cache-calbin", 1, (S8_V,)),
    Recipe("fixed-task-infer", 1, (ProbeSpec("fixed_task"),)),
    Recipe("output-buffer-wait", 1, (ProbeSpec("output_buffer"), FAULT_RECOVERY), ("OutputBuf::Wait",)),
    Recipe("parallel-mode", 1, (PARALLEL_MODE,), ("VirtualDevice::SubmitJob", "VirtualDevice::EnableParallelMode")),
    Recipe("golden-readback", 1, (ProbeSpec("golden_readback"),)),
    Recipe("device-counters-trace", 1, (ProbeSpec("counters_trace"),)),
    Recipe("c-api-nonblocking", 1, (ProbeSpec("c_api_nonblocking"), PARALLEL_MODE)),
    Recipe("full-debug", 1, (ProbeSpec("full_debug"),)),
    Recipe("error-codes", 1, (ProbeSpec("error_codes"),)),
    Recipe("error-mapping", 1, (ERROR_MAPPING, FAULT_RECOVERY)),
    # V51's reset after a drain beside the reset scopes of V50 and V52.
    Recipe(
        "device-reset",
        2,
        (ProbeSpec("device_reset"), ProbeSpec("reset_drain"), FAULT_RECOVERY),
        (
            "VirtualDevice::ResetCCU",
            "VirtualDevice::ResetConfiguration",
            "VirtualDevice::ResetDevice",
            "ClearDynamicMem",
            "ClearAllDevMem",
        ),
    ),
    # I05: absent from 0.7.6's headers and symbols; the version that adds them must carry both.
    Recipe("pdf-relocate-alloc", 1, (), ("RelocateTensorAddress", "AllocDevMem")),
    Recipe("reproducible-compile", 2, reproducible_build=True),
    Recipe("calbin-metadata-schema", 1),
    Recipe("enginecore", 1),
    # From the questions.
    Recipe("decode-batch-4", 2, (decode_batch(4),), DECODE_CALLS),
    Recipe("decode-batch-8", 2, (decode_batch(8),), DECODE_CALLS),
    Recipe("decode-batch-16", 2, (decode_batch(16),), DECODE_CALLS),
    Recipe("prefill-batch-dynamic-shape", 1, (ProbeSpec("prefill_shapes"),)),
    Recipe("single-chiplet", 1, (SINGLE_CHIPLET,)),
    Recipe("pipeline-parallel", 1, (ProbeSpec("pipeline_parallel", {}, LAYOUT_THRESHOLDS),)),
    Recipe("custom-kernel-sdk", 1, (ProbeSpec("cpu_fallback"),)),
    # V23: the seed names no cancel call, so the SDK must say which of its calls cancels and which times out.
    Recipe(
        "job-cancel-timeout",
        1,
        (ProbeSpec("job_cancel"),),
        sdk_roles=(
            ("cancel", "cancels a submitted job that has not finished"),
            ("timeout", "waits for a job with a time-out, or gives a job its deadline"),
        ),
    ),
    Recipe("two-models-two-chiplets", 1, (ProbeSpec("models_per_chiplet"),)),
]

RECIPES: Mapping[str, Recipe] = MappingProxyType({recipe.capability: recipe for recipe in _RECIPES})


# What a capability's runs prove, by where they ran. A probe that checks what the package holds (a feature it
# declares, its decode batch, its CPU fallbacks, its prefill profile, its goldens) tests the vendor's package;
# one that drives the runtime's calls (KV manager, fixed task, output buffers, parallel mode, the C API, error
# codes, resets) exercises the simulator's own implementation of them: calculet's integration checked against
# the documented semantics (E4), which only a board's runs (E0) turn into the vendor's runtime.
PACKAGE_PROBES = frozenset({"decode_batch", "cpu_fallback", "prefill_shapes", "golden_readback"})
# Features a package carries only as a declaration: built with or without them, its weights, goldens and
# sub-models are the same bytes (the proof matrix's "declared but not computed" package passes). A probe that
# needs only these drives the simulator's multi-model and residency runtime, not anything the package computes.
DECLARED_ONLY_FEATURES = frozenset({"multi_model", "residency"})
PROVES_PACKAGE = "package"
PROVES_INTEGRATION = "integration"
PROVES_BOARD = "board"


def simulator_proves(recipe: Recipe) -> str | None:
    """What the recipe's runs on a simulator target prove (None: it has no probes)."""
    if not recipe.probes:
        return None
    if any(p.name in PACKAGE_PROBES or set(PROBES[p.name].features) - DECLARED_ONLY_FEATURES for p in recipe.probes):
        return PROVES_PACKAGE
    return PROVES_INTEGRATION


def recipe_for(slug: str) -> Recipe:
    try:
        return RECIPES[slug]
    except KeyError:
        raise KeyError(f"no proof recipe for capability {slug!r}") from None


def gettext_noop(message: str) -> str:
    """Marks an English template for the catalogue, as Django's `gettext_noop` (the extraction's keyword) does;
    the pure rules may not import Django, so their refusals carry the template and the callers render it."""
    return message


def refusal(template: str, **params) -> dict:
    """A refusal as `calculet.sentences.sentence` stores one (plain parameters only)."""
    return {"template": template, "params": params, "labelled": {}}


class OverrideError(ValueError):
    """An answer's threshold refused: the English sentence, and `refusal` to render it in any language."""

    def __init__(self, template: str, **params):
        self.refusal = refusal(template, **params)
        super().__init__(template % params)


def tightened(recipe: Recipe, overrides: Mapping[str, Mapping[str, float]]) -> Recipe:
    """The recipe with an answer's thresholds: `{probe name: {threshold: value}}`. Raises OverrideError naming
    the probe and threshold when one is unknown, not a number, outside the threshold's bounds, or looser
    than the recipe's."""
    by_name = {probe.name: probe for probe in recipe.probes}
    for probe_name, values in overrides.items():
        if probe_name not in by_name:
            raise OverrideError(
                gettext_noop("%(capability)s: probe %(probe)r is not in its recipe"),
                capability=recipe.capability,
                probe=probe_name,
            )
        for threshold, value in values.items():
            _check_override(recipe.capability, by_name[probe_name], threshold, value)
    return replace(
        recipe,
        probes=tuple(
            replace(probe, thresholds={**probe.thresholds, **overrides.get(probe.name, {})}) for probe in recipe.probes
        ),
    )


def _check_override(capability: str, probe: ProbeSpec, threshold: str, value: object) -> None:
    where = {"capability": capability, "probe": probe.name, "threshold": threshold}
    declared = {spec.name: spec for spec in PROBES[probe.name].thresholds}
    if threshold not in probe.thresholds or threshold not in declared:
        raise OverrideError(gettext_noop("%(capability)s: probe %(probe)s has no threshold %(threshold)r"), **where)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise OverrideError(
            gettext_noop("%(capability)s: probe %(probe)s threshold %(threshold)s must be a number, not %(value)r"),
            **where,
            value=value,
        )
    spec = declared[threshold]
    if spec.minimum is not None and value < spec.minimum:
        raise OverrideError(
            gettext_noop(
                "%(capability)s: probe %(probe)s threshold %(threshold)s is at least %(limit)s, not %(value)s"
            ),
            **where,
            limit=f"{spec.minimum:g}",
            value=f"{value:g}",
        )
    if spec.maximum is not None and value > spec.maximum:
        raise OverrideError(
            gettext_noop("%(capability)s: probe %(probe)s threshold %(threshold)s is at most %(limit)s, not %(value)s"),
            **where,
            limit=f"{spec.maximum:g}",
            value=f"{value:g}",
        )
    default = probe.thresholds[threshold]
    if spec.stricter == "higher" and value < default:
        raise OverrideError(
            gettext_noop(
                "%(capability)s: probe %(probe)s threshold %(threshold)s: %(value)s is lower than the recipe's "
                "%(default)s; an answer may only tighten it"
            ),
            **where,
            value=f"{value:g}",
            default=f"{default:g}",
        )
    if spec.stricter != "higher" and value > default:
        raise OverrideError(
            gettext_noop(
                "%(capability)s: probe %(probe)s threshold %(threshold)s: %(value)s is higher than the recipe's "
                "%(default)s; an answer may only tighten it"
            ),
            **where,
            value=f"{value:g}",
            default=f"{default:g}",
        )
