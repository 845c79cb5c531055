"""The golden file: input ids and the tensors the device must produce from them, as one `.npz`.

A package carries one (`golden/golden.npz`); the vendor may deliver one apart (`build-calbin
--golden-out FILE` writes the same file). Arrays, all little-endian:

| key | dtype | shape | |
| --- | --- | --- | --- |
| `format` | int32 | [] | 1 |
| `prompt_ids` | int32 | [P] | the prompt |
| `decode_input_ids` | int32 | [S] | the token fed to each decode step (teacher forcing) |
| `prefill_logits` | uint16 | [1, V] | BF16 bit patterns |
| `decode_logits` | uint16 | [S, V] | |
| `lane_prompt_ids` | int32 | [B, Pmax] | optional: one prompt per decode lane, padded with -1 |
| `lane_decode_input_ids` | int32 | [B, SL] | |
| `lane_prefill_logits` | uint16 | [B, V] | |
| `lane_decode_logits` | uint16 | [B, SL, V] | |
| `sample_params` | float64 | [4] | optional: temperature, top_k, top_p, seed |
| `sample_token_ids` | int32 | [S + 1] | the token sampled after the prefill and after each decode step |
"""

import io
import zipfile
from dataclasses import dataclass

import numpy as np

from npu_sim.sampling import SamplingParams

GOLDEN_FORMAT = 1
_BASE = {"prompt_ids": np.int32, "decode_input_ids": np.int32, "prefill_logits": np.uint16, "decode_logits": np.uint16}
_LANES = {
    "lane_prompt_ids": np.int32,
    "lane_decode_input_ids": np.int32,
    "lane_prefill_logits": np.uint16,
    "lane_decode_logits": np.uint16,
}
_SAMPLING = {"sample_params": np.float64, "sample_token_ids": np.int32}


class GoldenError(ValueError):
    """The golden file cannot be used; the message says why."""


@dataclass(frozen=True)
class LaneGoldens:
    prompts: list[np.ndarray]
    decode_input_ids: np.ndarray  # [B, SL]
    prefill_logits: np.ndarray  # [B, V] BF16 bits
    decode_logits: np.ndarray  # [B, SL, V]

    @property
    def lanes(self) -> int:
        return len(self.prompts)


@dataclass(frozen=True)
class SampledGolden:
    params: SamplingParams
    token_ids: np.ndarray  # [S + 1]


@dataclass(frozen=True)
class GoldenSet:
    source: str  # where it came from: "package" or the vendor file's path
    prompt_ids: np.ndarray
    decode_input_ids: np.ndarray
    prefill_logits: np.ndarray
    decode_logits: np.ndarray
    lanes: LaneGoldens | None = None
    sampled: SampledGolden | None = None

    @property
    def decode_steps(self) -> int:
        return len(self.decode_input_ids)

    def arrays(self) -> dict[str, np.ndarray]:
        arrays = {
            "format": np.array(GOLDEN_FORMAT, dtype=np.int32),
            "prompt_ids": self.prompt_ids,
            "decode_input_ids": self.decode_input_ids,
            "prefill_logits": self.prefill_logits,
            "decode_logits": self.decode_logits,
        }
        if self.lanes is not None:
            width = max(len(p) for p in self.lanes.prompts)
            padded = np.full((self.lanes.lanes, width), -1, dtype=np.int32)
            for i, prompt in enumerate(self.lanes.prompts):
                padded[i, : len(prompt)] = prompt
            arrays |= {
                "lane_prompt_ids": padded,
                "lane_decode_input_ids": self.lanes.decode_input_ids,
                "lane_prefill_logits": self.lanes.prefill_logits,
                "lane_decode_logits": self.lanes.decode_logits,
            }
        if self.sampled is not None:
            p = self.sampled.params
            arrays |= {
                "sample_params": np.array([p.temperature, p.top_k, p.top_p, p.seed], dtype=np.float64),
                "sample_token_ids": self.sampled.token_ids,
            }
        return arrays


def write_golden(golden: GoldenSet) -> bytes:
    """The .npz bytes; the same goldens always give the same bytes (fixed member times)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, array in golden.arrays().items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
    return buffer.getvalue()


def _get(arrays: dict[str, np.ndarray], name: str, dtype: type, ndim: int) -> np.ndarray:
    array = arrays[name]
    if array.dtype != np.dtype(dtype) or array.ndim != ndim:
        raise GoldenError(
            f"{name} must be {np.dtype(dtype).name} with {ndim} dimensions, not {array.dtype}{list(array.shape)}"
        )
    return array


def read_golden(data: bytes, source: str) -> GoldenSet:
    """Parse a golden file; GoldenError when it is not one."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise GoldenError(f"not an .npz golden file: {error}") from error
    if arrays.get("format", np.array(0)).tolist() != GOLDEN_FORMAT:
        raise GoldenError(f"format must be {GOLDEN_FORMAT}")
    missing = sorted(set(_BASE) - set(arrays))
    if missing:
        raise GoldenError(f"missing arrays: {', '.join(missing)}")
    base = {name: _get(arrays, name, dtype, 1 if name.endswith("_ids") else 2) for name, dtype in _BASE.items()}
    if base["decode_logits"].shape[0] != len(base["decode_input_ids"]) or base["prefill_logits"].shape[0] != 1:
        raise GoldenError("decode_logits needs one row per decode_input_ids entry, prefill_logits one row")
    lanes = None
    if any(name in arrays for name in _LANES):
        if not all(name in arrays for name in _LANES):
            raise GoldenError(f"the lane goldens need all of {', '.join(_LANES)}")
        padded = _get(arrays, "lane_prompt_ids", np.int32, 2)
        prompts = [row[row >= 0] for row in padded]
        if any(len(p) == 0 for p in prompts):
            raise GoldenError("every lane needs a prompt")
        lanes = LaneGoldens(
            prompts,
            _get(arrays, "lane_decode_input_ids", np.int32, 2),
            _get(arrays, "lane_prefill_logits", np.uint16, 2),
            _get(arrays, "lane_decode_logits", np.uint16, 3),
        )
        if not (len(prompts) == len(lanes.decode_input_ids) == len(lanes.prefill_logits) == len(lanes.decode_logits)):
            raise GoldenError("the lane goldens disagree on the number of lanes")
        if lanes.decode_logits.shape[1] != lanes.decode_input_ids.shape[1]:
            raise GoldenError("lane_decode_logits needs one row per lane_decode_input_ids entry")
    sampled = None
    if any(name in arrays for name in _SAMPLING):
        values = _get(arrays, "sample_params", np.float64, 1)
        if len(values) != 4:
            raise GoldenError("sample_params holds temperature, top_k, top_p, seed")
        try:
            params = SamplingParams(float(values[0]), int(values[1]), float(values[2]), int(values[3]))
        except ValueError as error:
            raise GoldenError(f"sample_params: {error}") from error
        sampled = SampledGolden(params, _get(arrays, "sample_token_ids", np.int32, 1))
    return GoldenSet(source, lanes=lanes, sampled=sampled, **base)


def golden_problems(golden: GoldenSet, vocab: int, max_seq_len: int) -> list[str]:
    """How the goldens fail to fit a model with this vocabulary and maximum sequence length."""
    problems = []
    if golden.prefill_logits.shape[-1] != vocab or golden.decode_logits.shape[-1] != vocab:
        problems.append(f"the logits are {golden.decode_logits.shape[-1]} wide; the model's vocabulary is {vocab}")
    if not 1 <= len(golden.prompt_ids) + golden.decode_steps <= max_seq_len:
        problems.append(f"prompt and decode steps must fit {max_seq_len} positions")
    for name, ids in (("prompt_ids", golden.prompt_ids), ("decode_input_ids", golden.decode_input_ids)):
        if len(ids) and not (ids.min() >= 0 and ids.max() < vocab):
            problems.append(f"{name} holds ids outside 0..{vocab - 1}")
    if golden.lanes is not None and golden.lanes.decode_logits.shape[-1] != vocab:
        problems.append("the lane logits do not match the model's vocabulary")
    if golden.sampled is not None and len(golden.sampled.token_ids) != golden.decode_steps + 1:
        problems.append("sample_token_ids needs one id after the prefill and one after each decode step")
    return problems
