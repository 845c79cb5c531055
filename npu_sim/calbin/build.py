"""Building a calbin package from a preset: weights, goldens from the reference model, a manifest.

The same preset, decode batch and seed always give the same bytes, as a directory or as a tar.
"""

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from npu_sim.calbin.manifest import SCHEMA_VERSION
from npu_sim.calbin.package import MANIFEST
from npu_sim.dtypes import bf16_to_bits, to_bf16
from npu_sim.kv import kv_cache_bytes
from npu_sim.model import PRESETS, KvCache, ModelConfig, ReferenceModel, init_weights

# The ranges a freshly built package declares. The seed pins CalRT 0.7.6 but records no driver or
# firmware version; these two are the simulator's own defaults.
DEFAULT_COMPATIBILITY = {
    "calrt": ">=0.7.6,<0.8",
    "driver": ">=2.3,<3",
    "firmware": ">=1.8,<2",
    "chip": ["calculet-2c"],
}


GOLDEN_PROMPT_TOKENS = 16


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def golden_run(
    config: ModelConfig, weights: dict[str, np.ndarray], prompt: np.ndarray, steps: int
) -> dict[str, np.ndarray]:
    """Prefill `prompt`, then `steps` greedy decode steps, on the single-device reference.

    Greedy means the argmax of the BF16 logits (first index on ties); each decode step is fed the
    previous step's choice.
    """
    model = ReferenceModel(config, weights)
    kv = KvCache(config, lanes=1)
    prefill = to_bf16(model.prefill(kv, 0, prompt, 0))
    decode_ids, decode_logits = [], []
    token = int(np.argmax(prefill.astype(np.float32)))
    for step in range(steps):
        decode_ids.append(token)
        logits = to_bf16(model.decode(kv, np.array([0]), np.array([token]), np.array([len(prompt) + step]))[0])
        decode_logits.append(logits)
        token = int(np.argmax(logits.astype(np.float32)))
    return {
        "prompt_ids": prompt.astype(np.int32),
        "decode_input_ids": np.array(decode_ids, dtype=np.int32),
        "prefill_logits": bf16_to_bits(prefill[None, :]),
        "decode_logits": bf16_to_bits(np.stack(decode_logits)),
    }


def _entry(name: str, file: str, array: np.ndarray, dtype: str, data: bytes) -> dict[str, Any]:
    return {
        "name": name,
        "file": file,
        "shape": list(array.shape),
        "dtype": dtype,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def package_files(preset: str, decode_batch: int, seed: int, decode_steps: int = 16) -> dict[str, bytes]:
    """Every file of the package by its relative path."""
    if preset not in PRESETS or preset == "full":
        raise ValueError("only the 'tiny' preset can be built; 'full' exists for the timing model")
    config = PRESETS[preset]
    if decode_batch < 1:
        raise ValueError("decode batch must be at least 1")
    if not 1 <= decode_steps <= config.max_seq_len - GOLDEN_PROMPT_TOKENS:
        raise ValueError(f"decode steps must be 1..{config.max_seq_len - GOLDEN_PROMPT_TOKENS}")
    weights = init_weights(config, seed)
    prompt = np.random.default_rng(seed).integers(0, config.vocab, GOLDEN_PROMPT_TOKENS)
    goldens = golden_run(config, weights, prompt, decode_steps)

    files: dict[str, bytes] = {}
    weight_entries = []
    for name, array in weights.items():
        file = f"weights/{name}.npy"
        files[file] = _npy_bytes(array)
        weight_entries.append(_entry(name, file, array, "f32", files[file]))
    golden_entries = []
    for name, array in goldens.items():
        file = f"goldens/{name}.npy"
        files[file] = _npy_bytes(array)
        if array.dtype == np.uint16:
            entry = _entry(name, file, array, "bf16", files[file]) | {"storage": "u16", "role": "output"}
        else:
            entry = _entry(name, file, array, "s32", files[file]) | {"role": "input"}
        golden_entries.append(entry)

    chiplets = 2
    output_bytes = decode_batch * config.vocab * 2
    total = sum(a.nbytes for a in weights.values()) + kv_cache_bytes(config, config.max_seq_len, decode_batch)
    total += output_bytes
    per_chiplet = -(-total // chiplets)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "name": f"qwen3-moe-{preset}-b{decode_batch}-s{seed}",
        "architecture": "qwen3_moe",
        "model": config.as_manifest(),
        "seed": seed,
        "max_seq_len": config.max_seq_len,
        "chiplets": chiplets,
        "dtypes": {"weights": "f32", "activations": "f32", "logits": "bf16", "k_cache": "bf16", "v_cache": "bf16"},
        "submodels": [
            _submodel("prefill", "llm_prefill", 1, config.max_seq_len, config.vocab),
            _submodel("decode", "llm_decode", decode_batch, 1, config.vocab),
        ],
        "compatibility": DEFAULT_COMPATIBILITY,
        "memory": {
            "device_memory_required": {"value": per_chiplet * chiplets, "unit": "B"},
            "dram_per_chiplet": {"value": per_chiplet, "unit": "B"},
        },
        "weights": weight_entries,
        "goldens": {"decode_steps": decode_steps, "tensors": golden_entries},
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return files


def _submodel(name: str, smodel_type: str, batch: int, tokens: int, vocab: int) -> dict[str, Any]:
    return {
        "name": name,
        "smodel_type": smodel_type,
        "batch": batch,
        "inputs": [{"name": "input_ids", "shape": [batch, tokens], "dtype": "s32"}],
        "outputs": [{"name": "logits", "shape": [batch, 1, vocab], "dtype": "bf16"}],
    }


def write_tar(files: dict[str, bytes], path: Path) -> None:
    """A tar whose bytes depend only on the files: sorted members, zero times and owners."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(files[name]))


def write_dir(files: dict[str, bytes], root: Path) -> None:
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty")
    for name in sorted(files):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])


def build_calbin(
    out: str | Path,
    preset: str = "tiny",
    decode_batch: int = 1,
    seed: int = 0,
    tar: bool = False,
    decode_steps: int = 16,
) -> Path:
    """Write a package; a tar when `tar` is set or `out` ends in .tar. Returns the path written."""
    files = package_files(preset, decode_batch, seed, decode_steps)
    out = Path(out)
    if tar or out.suffix == ".tar":
        path = out if out.suffix == ".tar" else out.with_name(out.name + ".tar")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tar(files, path)
        return path
    write_dir(files, out)
    return out
