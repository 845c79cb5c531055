"""The documents a vendor's package metadata schema is held to, made by the simulator: what it must accept
(the current package's metadata, as npu_sim's own reader gives it) and what it must reject (the seed's A16
and A17 defects, written into a package's files as the seed found them). A trace schema is the vendor's own
format, held to its own sample and converter instead (trace.py).

Built once per process in a temporary directory (the simulator gives the same bytes for the same
arguments); each call returns fresh copies.
"""

import functools
import hashlib
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_sim.calbin import build_calbin, read_manifest

PACKAGE_METADATA = "package-metadata"
SUBJECTS = (PACKAGE_METADATA,)
# The seed's A16: 16777216 MB (16 TiB) where the package needs a few GiB.
A16_LINE = "device_memory_required: 16777216 MB"


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    document: Any


@dataclass(frozen=True)
class Samples:
    accept: tuple[Sample, ...]
    reject: tuple[Sample, ...]


def samples_for(subject: str) -> Samples:
    if subject not in SUBJECTS:
        raise ValueError(f"schema subject must be one of {', '.join(SUBJECTS)}, not {subject!r}")
    built = json.loads(_built(subject))
    return Samples(
        accept=tuple(Sample(**s) for s in built["accept"]),
        reject=tuple(Sample(**s) for s in built["reject"]),
    )


@functools.cache
def _built(subject: str) -> str:
    with tempfile.TemporaryDirectory(prefix="calculet-samples-") as scratch:
        root = Path(scratch)
        samples = _metadata_samples(root)
    return json.dumps(samples)


def _sample(name: str, description: str, document: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "document": document}


def metadata_packages(root: Path) -> dict[str, Path]:
    """Packages under `root`: three current ones, and A16's and A17's as the seed found them."""
    packages = {
        "current": build_calbin(root / "current", decode_batch=8),
        # M06: the seed's decode runs at batch 1, as its prefill does; only the name tells them apart.
        "current-b1": build_calbin(root / "b1", decode_batch=1),
        "current-s8": build_calbin(root / "s8", decode_batch=4, features=("single_chiplet", "s8"), chip_affinity=1),
        "A16": build_calbin(root / "a16", decode_batch=8),
        "A17": build_calbin(root / "a17", decode_batch=8),
    }
    memory = "model_memory_reserved_info.txt"
    text = (packages["A16"] / memory).read_text()
    _rewrite(packages["A16"], memory, re.sub(r"^device_memory_required:.*$", A16_LINE, text, count=1, flags=re.M))
    prefill = "prefill/submodel_memory_reserved_info.txt"
    text = (packages["A17"] / prefill).read_text()
    _rewrite(packages["A17"], prefill, text.replace("smodel_type: llm_prefill", "smodel_type: llm_decode"))
    return packages


def _rewrite(package: Path, name: str, text: str) -> None:
    """Change one file and its line in SHA256SUMS, so the defect is the package's only one."""
    (package / name).write_text(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    sums = (package / "SHA256SUMS").read_text()
    (package / "SHA256SUMS").write_text(
        re.sub(rf"^[0-9a-f]{{64}}  {re.escape(name)}$", f"{digest}  {name}", sums, flags=re.M)
    )


def _metadata_samples(root: Path) -> dict[str, list]:
    packages = {name: read_manifest(path) for name, path in metadata_packages(root).items()}
    return {
        "accept": [
            _sample("current", "a package built by npu_sim build-calbin (tp, decode batch 8)", packages["current"]),
            _sample("current-s8", "a single-chiplet S8 package at decode batch 4", packages["current-s8"]),
            _sample("current-b1", "a package at decode batch 1, as the seed's (M06)", packages["current-b1"]),
        ],
        "reject": [
            _sample("A16", f"the seed's impossible unit: {A16_LINE}", packages["A16"]),
            _sample("A17", "the seed's prefill sub-model labelled smodel_type llm_decode", packages["A17"]),
        ],
    }
