"""Each capability's proof recipe: the probes that exercise it, with their parameters and thresholds, and the
SDK entry points it needs. Data and pure functions; no ORM.

The probes, their parameters and their default thresholds are the simulator's catalogue
(`python -m npu_sim probes --json`): a capability is exercised by every probe that says it proves it. An
answer may tighten a threshold (`tightened`), never loosen it.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from evidence.seed.capabilities import CAPABILITIES
from npu_sim.probes import PROBES


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    params: Mapping[str, object] = field(default_factory=dict)
    thresholds: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    capability: str
    version: int
    probes: tuple[ProbeSpec, ...]
    sdk_entry_points: tuple[str, ...] = ()


# Probe parameters that make a probe exercise one capability rather than its siblings.
CAPABILITY_PARAMS: dict[tuple[str, str], dict[str, object]] = {
    ("decode-batch-4", "decode_batch"): {"batch": 4},
    ("decode-batch-8", "decode_batch"): {"batch": 8},
    ("decode-batch-16", "decode_batch"): {"batch": 16},
}


def _recipe(slug: str) -> Recipe:
    probes = tuple(
        ProbeSpec(
            name=probe.name,
            params=MappingProxyType(dict(CAPABILITY_PARAMS.get((slug, probe.name), {}))),
            thresholds=MappingProxyType(
                {t.name: float(t.default) for t in probe.thresholds if isinstance(t.default, int | float)}
            ),
        )
        for probe in PROBES.values()
        if slug in probe.capabilities
    )
    return Recipe(capability=slug, version=1, probes=probes)


RECIPES: dict[str, Recipe] = {seed.slug: _recipe(seed.slug) for seed in CAPABILITIES}


def recipe_for(slug: str) -> Recipe:
    """The capability's recipe; a capability the seed does not know has one with no probes."""
    return RECIPES.get(slug) or Recipe(capability=slug, version=1, probes=())


def _stricter(probe: str, threshold: str) -> str:
    for spec in PROBES[probe].thresholds:
        if spec.name == threshold:
            return spec.stricter
    raise ValueError(f"{probe}.{threshold}: probe {probe} has no threshold {threshold}")


def tightened(recipe: Recipe, overrides: Mapping[str, Mapping[str, float]]) -> Recipe:
    """The recipe with the answer's thresholds, which may only be stricter than the defaults.

    Raises ValueError naming the probe and threshold when an override loosens a default or names a probe or
    threshold the recipe does not have.
    """
    by_name = {probe.name: probe for probe in recipe.probes}
    for probe_name in overrides:
        if probe_name not in by_name:
            raise ValueError(f"{probe_name}: the recipe of {recipe.capability} has no probe {probe_name}")
    probes = []
    for probe in recipe.probes:
        given = overrides.get(probe.name, {})
        thresholds = dict(probe.thresholds)
        for name, value in given.items():
            if name not in thresholds:
                raise ValueError(f"{probe.name}.{name}: probe {probe.name} has no threshold {name}")
            stricter = _stricter(probe.name, name)
            looser = value < thresholds[name] if stricter == "higher" else value > thresholds[name]
            if looser:
                raise ValueError(
                    f"{probe.name}.{name}: {value:g} loosens the default {thresholds[name]:g} "
                    f"(it may only go {stricter})"
                )
            thresholds[name] = value
        probes.append(replace(probe, thresholds=MappingProxyType(thresholds)))
    return replace(recipe, probes=tuple(probes))
