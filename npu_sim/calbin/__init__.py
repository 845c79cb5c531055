"""The calbin package: a directory or tar holding manifest.json, weights and golden tensors."""

from npu_sim.calbin.build import build_calbin
from npu_sim.calbin.manifest import check_manifest, config_from_manifest, size_in_bytes, validate
from npu_sim.calbin.package import CalbinError, Finding, load_array, open_package, read_manifest

__all__ = [
    "CalbinError",
    "Finding",
    "build_calbin",
    "check_manifest",
    "config_from_manifest",
    "load_array",
    "open_package",
    "read_manifest",
    "size_in_bytes",
    "validate",
]
