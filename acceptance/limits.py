"""The limits every chain holds a package to, their defaults, and the rule that an answer only tightens them.
No ORM here, nothing of Django.

Golden tolerances apply to each compared tensor; the soak's figures are in the device's time (modelled on the
simulator). Where each default comes from is in docs/acceptance.md ("Thresholds and their defaults").
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

from acceptance.recipes import RECIPES, OverrideError, Recipe, gettext_noop, refusal, tightened
from npu_sim.probes import PROBES

# Used when the answer does not say (docs/acceptance.md). Golden tolerances are the simulator's defaults,
# written out so a run's parameters show what it was held to; they apply to each compared tensor. The soak
# figures are in the simulator's modelled device time; 10 token/s per request is the lowest decode rate the
# seed measured as usable (about 12 token/s near 33K context, P05), rounded down. Four of the soak's requests,
# chosen with its seed, are the golden's request, checked against the golden under load. The load must hold
# for 2 s of device time: the default load (4 rounds of 32 tokens per client) at the fastest decode the seed
# measured (about 64 token/s at short context, P04); a shorter soak did not serve what it was sent.
GOLDEN_TENSORS = ("prefill_logits", "decode_logits")
DEFAULT_GOLDEN_TOLERANCES = {"max_rel": 0.01, "cosine_min": 0.9999, "top1_min": 0.99, "topk_min": 0.99, "k": 5}
DEFAULT_SOAK = {
    "requests": 16,
    "concurrency": 4,
    "prompt_tokens": 128,
    "output_tokens": 32,
    "min_decode_tokens_per_s": 10.0,
    "golden_samples": 4,
    "min_duration_s": 2.0,
}
# The answer's `thresholds` keys and the soak parameters they set.
SOAK_THRESHOLD_KEYS = {
    "soak_requests": "requests",
    "soak_concurrency": "concurrency",
    "soak_prompt_tokens": "prompt_tokens",
    "soak_output_tokens": "output_tokens",
    "min_decode_tokens_per_s": "min_decode_tokens_per_s",
    "soak_golden_samples": "golden_samples",
    "soak_min_duration_s": "min_duration_s",
}
INTEGER_PARAMS = {
    "requests",
    "concurrency",
    "prompt_tokens",
    "output_tokens",
    "golden_samples",
    "k",
    "min_decode_steps",
}
# A golden must hold at least this many decode steps: as many as the runner and failure stages' requests
# decode (4), or their later steps are compared with nothing (calculet's own; the seed gives no figure). An
# answer may raise it (`thresholds.golden_min_decode_steps`), up to the longest golden a package can hold.
MIN_GOLDEN_DECODE_STEPS = 4
GOLDEN_MIN_STEPS_KEY = "golden_min_decode_steps"
GOLDEN_MIN_STEPS_LIMITS = (1, 40960)
# What an answer may ask of the soak: enough to load a runner for minutes, never enough to outlive its limits.
SOAK_LIMITS = {
    "requests": (1, 512),
    "concurrency": (1, 64),
    "prompt_tokens": (1, 4096),
    "output_tokens": (1, 1024),
    "min_decode_tokens_per_s": (0, 100_000),
    "golden_samples": (1, 64),
    "min_duration_s": (0, 3600),
}
# Which way each golden tolerance tightens, and its bounds. `max_abs` has no default: unchecked unless the
# answer gives it, so any value tightens. A deeper top-k (`k`) asks more of the same agreement.
GOLDEN_TOLERANCE_STRICTER = {
    "max_abs": "lower",
    "max_rel": "lower",
    "cosine_min": "higher",
    "top1_min": "higher",
    "topk_min": "higher",
}
GOLDEN_TOLERANCE_LIMITS = {
    "max_abs": (0, 1e6),
    "max_rel": (0, 1e6),
    "cosine_min": (-1, 1),
    "top1_min": (0, 1),
    "topk_min": (0, 1),
}


@dataclass(frozen=True)
class Bounds:
    """The values an answer may give a limit: from `low` to `high` (None: unbounded), whole numbers only when
    `whole`. The API's schema declares these (acceptance/api/answers.py)."""

    low: float | None
    high: float | None
    whole: bool = False


def _tightening(default: float | None, stricter: str, limits: tuple[float, float], whole: bool) -> Bounds:
    low, high = limits
    if default is not None:
        low, high = (default, high) if stricter == "higher" else (low, default)
    return Bounds(low, high, whole)


def tolerance_bounds() -> dict[str, Bounds]:
    """Every name `golden.tolerances` takes (bare, or for one tensor `<tensor>.<name>`) and its values: within
    the tolerance's limits, on the strict side of its default."""
    bounds = {}
    for key, stricter in GOLDEN_TOLERANCE_STRICTER.items():
        allowed = _tightening(
            DEFAULT_GOLDEN_TOLERANCES.get(key), stricter, GOLDEN_TOLERANCE_LIMITS[key], key in INTEGER_PARAMS
        )
        for name in (key, *(f"{tensor}.{key}" for tensor in GOLDEN_TENSORS)):
            bounds[name] = allowed
    return bounds


def threshold_bounds() -> dict[str, Bounds]:
    """Every key `thresholds` takes and its values. The golden's decode steps and the soak's: within their
    limits, no lower than their defaults. A probe's (`<probe>.<threshold>`, for each threshold a recipe's
    probe runs with): within the catalogue's bounds and no looser than the loosest recipe's default; the
    capability's own recipe may ask more, which only the check itself knows."""
    bounds = {
        GOLDEN_MIN_STEPS_KEY: _tightening(MIN_GOLDEN_DECODE_STEPS, "higher", GOLDEN_MIN_STEPS_LIMITS, True),
        **{
            key: _tightening(float(DEFAULT_SOAK[name]), "higher", SOAK_LIMITS[name], name in INTEGER_PARAMS)
            for key, name in SOAK_THRESHOLD_KEYS.items()
        },
    }
    defaults: dict[str, list[float]] = {}
    for recipe in RECIPES.values():
        for probe in recipe.probes:
            for threshold, default in probe.thresholds.items():
                defaults.setdefault(f"{probe.name}.{threshold}", []).append(default)
    for key, values in sorted(defaults.items()):
        probe_name, _, threshold = key.partition(".")
        spec = {spec.name: spec for spec in PROBES[probe_name].thresholds}[threshold]
        if spec.stricter == "higher":
            bounds[key] = Bounds(min(values), spec.maximum, spec.type == "integer")
        else:
            bounds[key] = Bounds(spec.minimum, max(values), spec.type == "integer")
    return bounds


def answer_limit_errors(
    recipe: Recipe | None, tolerances: Mapping[str, object], thresholds: Mapping[str, object]
) -> dict[str, dict]:
    """What in an answer's `golden.tolerances` and `thresholds` would loosen calculet's checks, by field
    (`golden.tolerances.<name>`, `thresholds.<key>`; a probe threshold's key is `<probe>.<threshold>`).

    A value must be a number within its bounds that is at least as strict as the default: the golden
    tolerances' (`DEFAULT_GOLDEN_TOLERANCES`, per tensor with a `<tensor>.` prefix), the golden's decode steps
    (`MIN_GOLDEN_DECODE_STEPS`: more), the soak's
    (`DEFAULT_SOAK`: more requests, more concurrent, longer prompts and outputs, a higher rate) and
    the recipe's probe thresholds (`tightened`). A name calculet does not know is an error too: it would be
    stored and never checked. Each error is a refusal (`recipes.refusal`) the caller renders in the reader's
    language. Empty when the answer only tightens."""
    errors = {}
    for name, value in tolerances.items():
        error = _tolerance_error(name, value)
        if error:
            errors[f"golden.tolerances.{name}"] = error
    for key, value in thresholds.items():
        error = _threshold_error(recipe, key, value)
        if error:
            errors[f"thresholds.{key}"] = error
    return errors


def _limit_error(
    value: object, default: float | None, stricter: str, bounds: tuple[float, float], whole: bool
) -> dict | None:
    """Why `value` cannot replace `default` for a limit tightened in the `stricter` direction (None when it can)."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return refusal(gettext_noop("Must be a number."))
    # A whole-number limit is stored as an integer: the API reads `16.0` as 16, so a float here is a fraction.
    if whole and not isinstance(value, int):
        return refusal(
            gettext_noop("Must be a whole number from %(low)s to %(high)s."), low=f"{low:g}", high=f"{high:g}"
        )
    if not low <= value <= high:
        return refusal(gettext_noop("Must be from %(low)s to %(high)s."), low=f"{low:g}", high=f"{high:g}")
    if default is None:
        return None
    if stricter == "higher" and value < default:
        return refusal(
            gettext_noop("%(value)s is lower than the default %(default)s; an answer may only tighten it."),
            value=f"{value:g}",
            default=f"{default:g}",
        )
    if stricter != "higher" and value > default:
        return refusal(
            gettext_noop("%(value)s is higher than the default %(default)s; an answer may only tighten it."),
            value=f"{value:g}",
            default=f"{default:g}",
        )
    return None


def _tolerance_error(name: str, value: object) -> dict | None:
    tensor, dot, key = name.rpartition(".")
    if dot and tensor not in GOLDEN_TENSORS:
        return refusal(
            gettext_noop("No compared tensor %(tensor)r; the tensors are %(tensors)s."),
            tensor=tensor,
            tensors=list(GOLDEN_TENSORS),
        )
    if key not in GOLDEN_TOLERANCE_STRICTER:
        return refusal(
            gettext_noop("No golden tolerance %(key)r; the tolerances are %(tolerances)s."),
            key=key,
            tolerances=list(GOLDEN_TOLERANCE_STRICTER),
        )
    return _limit_error(
        value,
        DEFAULT_GOLDEN_TOLERANCES.get(key),
        GOLDEN_TOLERANCE_STRICTER[key],
        GOLDEN_TOLERANCE_LIMITS[key],
        key in INTEGER_PARAMS,
    )


def _threshold_error(recipe: Recipe | None, key: str, value: object) -> dict | None:
    if key == GOLDEN_MIN_STEPS_KEY:
        return _limit_error(value, MIN_GOLDEN_DECODE_STEPS, "higher", GOLDEN_MIN_STEPS_LIMITS, True)
    if key in SOAK_THRESHOLD_KEYS:
        name = SOAK_THRESHOLD_KEYS[key]
        # Every soak limit tightens upwards: more load, longer requests, a higher rate to reach.
        default = float(DEFAULT_SOAK[name])
        return _limit_error(value, default, "higher", SOAK_LIMITS[name], name in INTEGER_PARAMS)
    probe, dot, threshold = key.partition(".")
    if not dot:
        return refusal(
            gettext_noop(
                "No threshold %(key)r; the golden's is %(golden)s, the soak's are %(soak)s, "
                "a probe's are <probe>.<threshold>."
            ),
            key=key,
            golden=GOLDEN_MIN_STEPS_KEY,
            soak=list(SOAK_THRESHOLD_KEYS),
        )
    if recipe is None:
        return refusal(gettext_noop("A probe threshold needs the capability whose recipe it tightens."))
    try:
        tightened(recipe, {probe: {threshold: value}})  # type: ignore[dict-item]
    except OverrideError as error:
        return error.refusal
    return None
