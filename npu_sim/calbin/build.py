"""Building a package from a preset, laid out as the vendor's toolchain lays it out (docs/calbin-format.md).

Weights from the preset's seed, goldens from the single-device reference of the package's own numerics
(S8 weights and cache included), and the metadata files. The same arguments always give the same bytes,
as a directory or as a tar.
"""

import dataclasses
import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npu_sim.calbin import files
from npu_sim.calbin.goldens import GoldenSet, LaneGoldens, SampledGolden, write_golden
from npu_sim.calbin.layout import (
    CHECKSUMS,
    DEFAULT_LAYOUT,
    FEATURES,
    GOLDEN,
    LAYOUTS,
    MODEL_CONFIG,
    MODEL_MEMORY,
    PACKAGE_INFO,
    PARAM_TABLE,
    S8_LAYOUTS,
    SCHEMA_VERSION,
    SUBMODEL_MEMORY,
)
from npu_sim.calbin.params import PARAM_DTYPES, placements
from npu_sim.calbin.textinfo import write_text
from npu_sim.chips import CALCULET_2C
from npu_sim.dtypes import bf16_to_bits, bits_to_float32, to_bf16
from npu_sim.model import PRESETS, KvCache, ModelConfig, ReferenceModel, init_weights
from npu_sim.model.quantized import S8Model, quantize_weights
from npu_sim.sampling import SamplingParams, counter_uniforms, reference_draw

GOLDEN_PROMPT_TOKENS = 16
LANE_DECODE_STEPS = 6
# The sampling parameters a sampling package's golden is drawn with (the seed is the package's).
GOLDEN_SAMPLING = SamplingParams(temperature=0.8, top_k=40, top_p=0.95)


@dataclass(frozen=True)
class BuildOptions:
    preset: str = "tiny"
    decode_batch: int = 1
    seed: int = 0
    decode_steps: int = 16
    layout: str = DEFAULT_LAYOUT
    features: tuple[str, ...] = ()
    prefill_batch: int = 1
    chip_affinity: int = 0
    s8_kv: str = "v"  # V25: an S8 package quantises the V cache, or K and V
    prefill_lengths: tuple[int, ...] = ()  # empty: any length (dynamic shape)
    cpu_fallback: tuple[str, ...] = ()
    timing_preset: str | None = None  # None: full, or tiny for a single-chiplet package (see `timing`)

    def __post_init__(self) -> None:
        if self.preset not in PRESETS or self.preset == "full":
            raise ValueError("only the 'tiny' preset can be built; 'full' exists for the timing model")
        config = PRESETS[self.preset]
        if self.decode_batch < 1 or self.prefill_batch < 1:
            raise ValueError("decode and prefill batch must be at least 1")
        if not 1 <= self.decode_steps <= config.max_seq_len - GOLDEN_PROMPT_TOKENS:
            raise ValueError(f"decode steps must be 1..{config.max_seq_len - GOLDEN_PROMPT_TOKENS}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
        unknown = sorted(set(self.features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {', '.join(unknown)}; known: {', '.join(FEATURES + LAYOUTS)}")
        if "s8" in self.features and self.layout not in S8_LAYOUTS:
            raise ValueError(f"s8 is built for the {' and '.join(S8_LAYOUTS)} layouts")
        if self.s8_kv not in ("v", "kv"):
            raise ValueError("s8_kv is 'v' or 'kv'")
        if self.chip_affinity not in range(CALCULET_2C.chiplets):
            raise ValueError("chip affinity is 0 or 1")
        if any(not 1 <= n <= config.max_seq_len for n in self.prefill_lengths):
            raise ValueError(f"prefill lengths must be 1..{config.max_seq_len}")
        if self.prefill_lengths and GOLDEN_PROMPT_TOKENS not in self.prefill_lengths:
            raise ValueError(f"the goldens' prompt is {GOLDEN_PROMPT_TOKENS} tokens: list that length too")
        unknown_ops = sorted(set(self.cpu_fallback) - set(files.ops_for(self.layout, self.features)))
        if unknown_ops:
            raise ValueError(
                f"no op {', '.join(unknown_ops)} in this package; its ops: "
                + ", ".join(files.ops_for(self.layout, self.features))
            )
        if self.timing_preset is not None and self.timing_preset not in PRESETS:
            raise ValueError(f"timing preset must be one of {', '.join(PRESETS)}")

    @property
    def timing(self) -> str:
        """The scale the timing model predicts this package at. Qwen3-30B-A3B's parameters (A02 + A03,
        16.9 GiB) do not fit one 16 GiB chiplet, so a single-chiplet package stands for a small model
        (V30 asks for a small-model example) and is timed at its own size."""
        if self.timing_preset is not None:
            return self.timing_preset
        return self.preset if self.layout == "single_chiplet" else "full"

    @property
    def s8(self) -> bool:
        return "s8" in self.features

    @property
    def kv_dtypes(self) -> tuple[str, str]:
        return ("s8" if self.s8 and self.s8_kv == "kv" else "bf16", "s8" if self.s8 else "bf16")


def split_features(words: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """`--features` takes at most one layout among the features; tp when none is named."""
    layouts = [w for w in words if w in LAYOUTS]
    if len(layouts) > 1:
        raise ValueError(f"at most one layout of {', '.join(LAYOUTS)}, not {', '.join(layouts)}")
    return (layouts[0] if layouts else DEFAULT_LAYOUT), tuple(sorted({w for w in words if w not in LAYOUTS}))


def golden_run(model: ReferenceModel, kv_dtypes: tuple[str, str], prompt: np.ndarray, steps: int) -> GoldenSet:
    """Prefill `prompt`, then `steps` greedy decode steps, on one sequence of the single-device reference.

    Greedy means the argmax of the BF16 logits (first index on ties); each decode step is fed the
    previous step's choice.
    """
    kv = KvCache(model.config, 1, *kv_dtypes)
    prefill = to_bf16(model.prefill(kv, 0, prompt, 0))
    decode_ids, decode_logits = [], []
    token = int(np.argmax(prefill.astype(np.float32)))
    for step in range(steps):
        decode_ids.append(token)
        logits = to_bf16(model.decode(kv, np.array([0]), np.array([token]), np.array([len(prompt) + step]))[0])
        decode_logits.append(logits)
        token = int(np.argmax(logits.astype(np.float32)))
    return GoldenSet(
        "package",
        prompt.astype(np.int32),
        np.array(decode_ids, dtype=np.int32),
        bf16_to_bits(prefill[None, :]),
        bf16_to_bits(np.stack(decode_logits)),
    )


def lane_prompt(config: ModelConfig, seed: int, lane: int) -> np.ndarray:
    """Lane i's prompt: 3 + 5i mod 13 ids, so lanes differ in length and overlap when served together."""
    return np.random.default_rng([seed, lane]).integers(0, config.vocab, 3 + (5 * lane) % 13)


def make_goldens(options: BuildOptions, config: ModelConfig, model: ReferenceModel) -> GoldenSet:
    prompt = np.random.default_rng(options.seed).integers(0, config.vocab, GOLDEN_PROMPT_TOKENS)
    main = golden_run(model, options.kv_dtypes, prompt, options.decode_steps)
    lanes = [golden_run(model, options.kv_dtypes, lane_prompt(config, options.seed, i), LANE_DECODE_STEPS)
             for i in range(options.decode_batch)]  # fmt: skip
    lane_goldens = LaneGoldens(
        [g.prompt_ids for g in lanes],
        np.stack([g.decode_input_ids for g in lanes]),
        np.concatenate([g.prefill_logits for g in lanes]),
        np.stack([g.decode_logits for g in lanes]),
    )
    sampled = None
    if "sampling" in options.features:
        # The token after the prefill and after each decode step, drawn by the host reference.
        params = dataclasses.replace(GOLDEN_SAMPLING, seed=options.seed)
        rows = bits_to_float32(np.concatenate([main.prefill_logits, main.decode_logits]))
        uniforms = counter_uniforms(params.seed, len(prompt) + np.arange(len(rows)))
        ids = [reference_draw(row, params, float(u)) for row, u in zip(rows, uniforms, strict=True)]
        sampled = SampledGolden(params, np.array(ids, dtype=np.int32))
    return GoldenSet(
        "package",
        main.prompt_ids,
        main.decode_input_ids,
        main.prefill_logits,
        main.decode_logits,
        lane_goldens,
        sampled,
    )


def package_files(options: BuildOptions) -> dict[str, bytes]:
    """Every file of the package by its relative path."""
    config = PRESETS[options.preset]
    weights = init_weights(config, options.seed)
    stored = quantize_weights(weights) if options.s8 else weights
    model = S8Model(config, stored, chiplets=1) if options.s8 else ReferenceModel(config, weights)
    name = f"qwen3-moe-{options.preset}-{options.layout}-b{options.decode_batch}-s{options.seed}"
    name += "".join(f"-{f}" for f in options.features)
    return layout_files(options, config, stored, make_goldens(options, config, model), name)


def layout_files(
    options: BuildOptions,
    config: ModelConfig,
    stored: dict[str, np.ndarray],
    goldens: GoldenSet,
    name: str,
    compatibility: dict[str, str] | None = None,
) -> dict[str, bytes]:
    """The package's files for these stored tensors (float32, or int8 with scales) and goldens."""
    out: dict[str, bytes] = {}
    layout = placements(options.layout, {n: a.shape for n, a in stored.items()}, config.layers, options.chip_affinity)
    blocks: dict[int, bytearray] = {}
    table = ["# block  tensor  offset  dtype  shape  part"]
    for p in layout:
        dtype = "s8" if stored[p.name].dtype == np.int8 else "f32"
        array = np.ascontiguousarray(p.part.take(stored[p.name]), dtype=PARAM_DTYPES[dtype])
        data = blocks.setdefault(p.block, bytearray())
        table.append(f"{p.block} {p.name} {len(data)} {dtype} [{','.join(map(str, array.shape))}] {p.part}")
        data += array.tobytes()
    sizes = {index: len(data) for index, data in blocks.items()}
    for index, data in blocks.items():
        out[f"param_blk{index}.bin"] = bytes(data)
    out[PARAM_TABLE] = ("\n".join(table) + "\n").encode()
    out[MODEL_CONFIG] = files.hf_config(config)
    reservations = files.reservations(options, config, sizes)
    out[MODEL_MEMORY] = files.model_memory(name, reservations, sizes)
    for submodel in files.submodels(options, config, sorted(reservations)):
        out[f"{submodel.name}/{SUBMODEL_MEMORY}"] = submodel.text
    out[GOLDEN] = write_golden(goldens)
    out[PACKAGE_INFO] = write_text(
        f"calbin package, schema {SCHEMA_VERSION} (docs/calbin-format.md)",
        files.package_info(options, name, compatibility or files.compatibility_for(options.layout)),
    )
    out[CHECKSUMS] = "".join(f"{hashlib.sha256(out[n]).hexdigest()}  {n}\n" for n in sorted(out)).encode()
    return out


def write_tar(contents: dict[str, bytes], path: Path) -> None:
    """A tar whose bytes depend only on the files: sorted members, zero times and owners."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(contents):
            info = tarfile.TarInfo(name)
            info.size = len(contents[name])
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(contents[name]))


def write_dir(contents: dict[str, bytes], root: Path) -> None:
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty")
    for name in sorted(contents):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(contents[name])


def write_package(contents: dict[str, bytes], out: str | Path, tar: bool) -> Path:
    """A directory, or a tar when `tar` is set or `out` ends in .tar. Returns the path written."""
    out = Path(out)
    if tar or out.suffix == ".tar":
        path = out if out.suffix == ".tar" else out.with_name(out.name + ".tar")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tar(contents, path)
        return path
    write_dir(contents, out)
    return out


def build_calbin(
    out: str | Path,
    preset: str = "tiny",
    decode_batch: int = 1,
    seed: int = 0,
    tar: bool = False,
    decode_steps: int = 16,
    *,
    features: Sequence[str] = (),
    prefill_batch: int = 1,
    chip_affinity: int = 0,
    s8_kv: str = "v",
    prefill_lengths: Sequence[int] = (),
    cpu_fallback: Sequence[str] = (),
    timing_preset: str | None = None,
    golden_out: str | Path | None = None,
) -> Path:
    """Write a package; `features` may name one layout (tp when none) and any of FEATURES.

    `golden_out`, when given, also receives the package's golden file, as a vendor delivers it apart.
    """
    layout, wanted = split_features(features)
    built = BuildOptions(
        preset,
        decode_batch,
        seed,
        decode_steps,
        layout,
        wanted,
        prefill_batch,
        chip_affinity,
        s8_kv,
        tuple(sorted(set(prefill_lengths))),
        tuple(sorted(set(cpu_fallback))),
        timing_preset,
    )
    contents = package_files(built)
    if golden_out is not None:
        Path(golden_out).parent.mkdir(parents=True, exist_ok=True)
        Path(golden_out).write_bytes(contents[GOLDEN])
    return write_package(contents, out, tar)
