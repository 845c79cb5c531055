"""Checking a calbin's compatibility ranges against a target (V46: a machine-readable matrix)."""

from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from npu_sim.errors import ErrorCode

RANGE_CODES = {
    "calrt": ErrorCode.CALRT_VERSION_INCOMPATIBLE,
    "driver": ErrorCode.DRIVER_VERSION_INCOMPATIBLE,
    "firmware": ErrorCode.FIRMWARE_VERSION_INCOMPATIBLE,
}


@dataclass(frozen=True)
class Problem:
    field: str  # "calrt", "driver", "firmware" or "chip"
    code: ErrorCode
    message: str


def problems(manifest: dict[str, Any], target: dict[str, Any]) -> list[Problem]:
    """Every way the target falls outside the manifest's `compatibility` section."""
    compat = manifest.get("compatibility")
    if not isinstance(compat, dict):
        return [Problem("calrt", ErrorCode.CALRT_VERSION_INCOMPATIBLE, "the calbin declares no compatibility")]
    found = []
    for field, code in RANGE_CODES.items():
        spec, version = compat.get(field), target.get(field)
        if spec is None:
            found.append(Problem(field, code, f"the calbin declares no {field} range"))
            continue
        if version is None:
            found.append(Problem(field, code, f"the target states no {field} version"))
            continue
        try:
            allowed = SpecifierSet(str(spec))
            inside = allowed.contains(Version(str(version)), prereleases=True)
        except (InvalidSpecifier, InvalidVersion) as error:
            found.append(Problem(field, code, f"{field}: {error}"))
            continue
        if not inside:
            found.append(Problem(field, code, f"{field} {version} is outside the calbin's range {spec}"))
    chips = compat.get("chip")
    chip = target.get("chip")
    if not isinstance(chips, list) or chip not in chips:
        found.append(Problem("chip", ErrorCode.CHIP_INCOMPATIBLE, f"chip {chip!r} is not in the calbin's list {chips}"))
    return found


def check(manifest: dict[str, Any], target: dict[str, Any]) -> list[str]:
    """Human-readable problems; an empty list means the calbin may be loaded on the target."""
    return [problem.message for problem in problems(manifest, target)]
