"""One infer call's parts that need no device state: checking its inputs and sampling parameters, running its
numerics, drawing its tokens, corrupting its logits (a fault), and its modelled time."""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from npu_sim.chips import NPU_OPS
from npu_sim.device.models import ModelHandle
from npu_sim.device.records import SAMPLING_OP
from npu_sim.dtypes import bf16_to_bits, bits_to_bf16, to_bf16
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, SubModel
from npu_sim.sampling import SamplingParams, counter_uniforms, device_sample
from npu_sim.timing import CallTime

# One SamplingParams for every sequence of a call, one per sequence id, or none (the device returns logits).
Sampling = SamplingParams | Mapping[int, SamplingParams] | None
Placement = tuple[tuple[str, str], ...]


def placement_of(submodel: SubModel) -> Placement:
    """Where each op runs: on the NPU when the package says so and the chip has the op, else on the host (V11)."""
    return tuple((op, where if where == "cpu" or op in NPU_OPS else "cpu") for op, where in submodel.ops)


def call_time(
    handle: ModelHandle,
    submodel: SubModel,
    arrays: list[np.ndarray],
    cells: np.ndarray,
    sampling: bool,
    placement: Placement,
    full_debug: bool,
) -> CallTime:
    """The call's modelled H2D, infer, D2H (+ sampling, + host ops) from the model's timing."""
    host_ops = sum(1 for _, where in placement if where == "cpu")
    timing = handle.timing
    if submodel.smodel_type == "llm_prefill":
        lengths = handle.calbin.prefill_lengths
        # A static shape profile pads each prompt to the next declared length (V19, R12).
        padded = [min(n for n in lengths if n >= len(a)) if lengths else len(a) for a in arrays]
        time = timing.prefill_call(sum(padded), int(cells.max()), sampling, host_ops, len(arrays))
    else:
        time = timing.decode_call([int(c) + 1 for c in cells], sampling, host_ops)
    if full_debug:
        rows = sum(len(a) for a in arrays)
        dump_bytes = rows * handle.calbin.config.hidden * 4 * handle.calbin.config.layers
        time = dataclasses.replace(time, d2h_ms=time.d2h_ms + dump_bytes / (timing.pcie_gb_s * 1e6))
    return time


def sampling_params(submodel: SubModel, seq_ids: list[int], sampling: Sampling) -> dict[int, SamplingParams] | None:
    if sampling is None:
        return None
    if not submodel.samples:
        raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"sub-model {submodel.name!r} does not sample on the device")
    if isinstance(sampling, SamplingParams):
        return dict.fromkeys(seq_ids, sampling)
    missing = [s for s in seq_ids if s not in sampling]
    if missing:
        raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"no sampling parameters for sequence(s) {missing}")
    return {s: sampling[s] for s in seq_ids}


def package_sample(submodel: SubModel, row: np.ndarray, params: SamplingParams, uniforms: np.ndarray) -> np.ndarray:
    """The package's sampling kernel on one row of logits, one token id per uniform number: its `topk_sampling`
    op. A graph that declares device sampling (its `token_ids` output) without that op ends in its LM head, and
    the device returns the argmax whatever the parameters: sampling declared, not computed."""
    if SAMPLING_OP not in dict(submodel.ops):
        return np.full(len(uniforms), int(np.argmax(np.asarray(row, dtype=np.float32))), dtype=np.int32)
    return device_sample(row, params, uniforms)


def sample(
    submodel: SubModel, kv: KvManager, logits: dict[int, np.ndarray], params: dict[int, SamplingParams]
) -> dict[int, int]:
    """One draw per sequence; its counter is the position of the token being produced."""
    sampled = {}
    for seq_id, row in logits.items():
        lane = kv.lane(seq_id)
        position = int(kv.cache.pos[lane, kv.length(seq_id) + kv.pending(seq_id) - 1]) + 1
        uniform = counter_uniforms(params[seq_id].seed, np.array([position]))
        sampled[seq_id] = int(package_sample(submodel, row, params[seq_id], uniform)[0])
    return sampled


def check_inputs(
    calbin: Calbin, submodel: SubModel, kv: KvManager, tokens: Mapping[int, Sequence[int]]
) -> tuple[list[int], list[np.ndarray]]:
    seq_ids = list(tokens)
    arrays = [np.asarray(tokens[s]) for s in seq_ids]
    for array in arrays:
        if array.ndim != 1 or len(array) == 0:
            raise CalrtError(ErrorCode.SHAPE_MISMATCH, "each sequence needs a 1-D list of token ids")
        if array.dtype.kind not in "iu":
            raise CalrtError(ErrorCode.DTYPE_MISMATCH, f"token ids must be integers, not {array.dtype}")
        if array.min() < 0 or array.max() >= calbin.config.vocab:
            raise CalrtError(ErrorCode.INVALID_ARGUMENT, f"token ids must be in 0..{calbin.config.vocab - 1}")
    if not 1 <= len(seq_ids) <= submodel.batch:
        raise CalrtError(ErrorCode.SHAPE_MISMATCH, f"{submodel.name} takes 1..{submodel.batch} sequences per call")
    if submodel.smodel_type == "llm_prefill":
        longest = max(calbin.prefill_lengths) if calbin.prefill_lengths else submodel.tokens_per_lane
        if any(len(a) > longest for a in arrays):
            raise CalrtError(ErrorCode.SHAPE_MISMATCH, f"prefill takes at most {longest} tokens per sequence")
    elif any(len(a) != 1 for a in arrays):
        raise CalrtError(ErrorCode.SHAPE_MISMATCH, "decode takes one token per sequence")
    for seq_id, array in zip(seq_ids, arrays, strict=True):
        if kv.pending(seq_id) != len(array):
            raise CalrtError(
                ErrorCode.INVALID_ARGUMENT,
                f"sequence {seq_id} has {kv.pending(seq_id)} tokens allocated, the job has {len(array)}",
            )
    return seq_ids, arrays


def run_numerics(
    model: Any,
    submodel: SubModel,
    kv: KvManager,
    seq_ids: list[int],
    arrays: list[np.ndarray],
    lanes: np.ndarray,
    cells: np.ndarray,
) -> dict[int, np.ndarray]:
    if submodel.smodel_type == "llm_prefill":
        return {
            seq_id: to_bf16(model.prefill(kv.cache, int(lane), array, int(cell)))
            for seq_id, array, lane, cell in zip(seq_ids, arrays, lanes, cells, strict=True)
        }
    rows = to_bf16(model.decode(kv.cache, lanes, np.concatenate(arrays), cells))
    return {seq_id: rows[i] for i, seq_id in enumerate(seq_ids)}


def corrupt(logits: dict[int, np.ndarray], flips: int, call: int) -> None:
    """Flip the top exponent bit of some logits: values jump by orders of magnitude or become inf/NaN."""
    rng = np.random.default_rng(call)
    for seq_id, row in logits.items():
        bits = bf16_to_bits(row).copy()
        where = rng.choice(len(bits), size=min(flips, len(bits)), replace=False)
        bits[where] ^= np.uint16(1 << 14)
        logits[seq_id] = bits_to_bf16(bits)
