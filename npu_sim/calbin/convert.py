"""`python -m npu_sim convert-calbin OLD NEW`: a package in the simulator's schema 1 format (one
manifest.json, a .npy file per tensor) rewritten in the toolchain layout of schema 2.

The weights, goldens, decode batch and compatibility ranges carry over; a 2-chiplet package becomes the
tp layout, a 1-chiplet one single_chiplet on chip 0. Schema 1 had no per-lane goldens, so a converted
package has none (its decode_batch probe reports not_exercised until the vendor's golden brings them).
"""

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from npu_sim.calbin.build import BuildOptions, layout_files, write_package
from npu_sim.calbin.goldens import GoldenSet
from npu_sim.calbin.layout import LEGACY_MANIFEST
from npu_sim.calbin.package import open_package
from npu_sim.model import PRESETS, ModelConfig


def _array(package: Any, entry: dict[str, Any]) -> np.ndarray:
    data = package.read(entry["file"])
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise ValueError(f"{entry['file']} does not match its sha256 in {LEGACY_MANIFEST}")
    return np.load(io.BytesIO(data), allow_pickle=False)


def convert_calbin(source: str | os.PathLike[str], out: str | Path, tar: bool = False) -> Path:
    """Write the schema 2 package; ValueError when `source` is not a schema 1 package this can convert."""
    with open_package(source) as package:
        if not package.has(LEGACY_MANIFEST):
            raise ValueError(f"{source} has no {LEGACY_MANIFEST}: not a schema 1 package")
        manifest = json.loads(package.read(LEGACY_MANIFEST))
        if manifest.get("schema_version") != 1:
            raise ValueError(f"{LEGACY_MANIFEST} is not schema version 1")
        config = ModelConfig(**manifest["model"], max_seq_len=manifest["max_seq_len"])
        preset = next((name for name, c in PRESETS.items() if c == config and name != "full"), None)
        if preset is None:
            raise ValueError("only packages with a buildable preset's dimensions can be converted")
        weights = {e["name"]: _array(package, e).astype(np.float32) for e in manifest["weights"]}
        tensors = {e["name"]: _array(package, e) for e in manifest["goldens"]["tensors"]}
    goldens = GoldenSet(
        "package",
        tensors["prompt_ids"].astype(np.int32),
        tensors["decode_input_ids"].astype(np.int32),
        tensors["prefill_logits"].astype(np.uint16),
        tensors["decode_logits"].astype(np.uint16),
    )
    decode = next(s for s in manifest["submodels"] if s["smodel_type"] == "llm_decode")
    layout = "tp" if manifest["chiplets"] == 2 else "single_chiplet"
    options = BuildOptions(preset, decode["batch"], manifest["seed"], goldens.decode_steps, layout)
    compatibility = {k: v for k, v in manifest["compatibility"].items() if k != "chip"}
    compatibility["chip"] = " ".join(manifest["compatibility"]["chip"])
    return write_package(layout_files(options, config, weights, goldens, manifest["name"], compatibility), out, tar)
