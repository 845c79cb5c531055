"""The S8 probe (V06, V25, K08): int8 weights with per-channel scales, an S8 V cache (or K and V), integer
arithmetic; accuracy against the float reference and the golden; capacity by A08's formula."""

import numpy as np

from npu_sim.client import run_request
from npu_sim.dtypes import to_bf16
from npu_sim.golden import Tolerance, compare
from npu_sim.kv import kv_cache_bytes
from npu_sim.loaded_calbin import Calbin
from npu_sim.model import PRESETS, ReferenceModel
from npu_sim.model.reference import teacher_forced_rows
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan, ThresholdSpec
from npu_sim.protocol.context import NotExercised
from npu_sim.timing import KV_BYTES


def _quantises_what_is_asked(run: ProbeRun) -> None:
    calbin, kv = run.calbin(), run.params["kv"]
    quantised = "K and V" if calbin.k_dtype == "s8" else "V"
    if (calbin.k_dtype == "s8") != (kv == "kv"):
        raise NotExercised(f"the package quantises {quantised}; the probe asks for {'K and V' if kv == 'kv' else 'V'}")


def float_reference_rows(calbin: Calbin, prompt: list[int], forced: list[int]) -> np.ndarray:
    """The float32 model the package's integers stand for, with a BF16 cache: the prompt, then `forced`."""
    return to_bf16(teacher_forced_rows(ReferenceModel(calbin.config, calbin.weights), prompt, forced))


def _runner(run: ProbeRun) -> None:
    session = run.session()
    calbin, kv = session.calbin, session.kv
    int8 = sorted(name for name, array in calbin.stored.items() if array.dtype == np.int8)
    scales = [name for name in calbin.stored if name.endswith(".scale")]
    run.check(
        "weights_int8",
        bool(int8) and len(int8) == len(scales),
        f"{len(int8)} int8 tensors, {len(scales)} scale tensors",
    )
    stores = {"K": kv.cache.k.dtype, "V": kv.cache.v.dtype}
    run.check(
        "cache_s8",
        stores["V"] == "s8" and (stores["K"] == "s8") == (run.params["kv"] == "kv"),
        f"K {stores['K']}, V {stores['V']}",
    )
    c = calbin.config
    a08 = c.layers * c.kv_heads * c.head_dim * c.max_seq_len * kv.lanes * (KV_BYTES[kv.k_dtype] + KV_BYTES[kv.v_dtype])
    run.check(
        "capacity_a08",
        kv.device_bytes() == a08,
        f"{kv.device_bytes()} B = layers x kv heads x head dim x seq x batch x (K + V bytes)",
    )
    full = PRESETS["full"]
    full_bytes = kv_cache_bytes(full, full.max_seq_len, 1, kv.k_dtype, kv.v_dtype)
    run.metrics.update(
        {
            "int8_tensors": len(int8),
            "kv_cache_bytes": kv.device_bytes(),
            "full_scale_kv_gib_per_lane": round(full_bytes / 2**30, 4),
            "full_scale_kv_gib_per_chiplet": round(full_bytes / 2 / 2**30, 4),
        }
    )
    generic.exercise(run, session)


def _golden(run: ProbeRun) -> None:
    session = run.session()
    generic.compare_with_golden(run, session)
    golden = run.ctx.golden(session.calbin)
    forced = golden.decode_input_ids.tolist()
    result = run_request(
        session.device, session.calbin, session.kv, 2, golden.prompt_ids.tolist(), len(forced), forced=forced
    )
    if not run.check("request", result.ok, result.message or "the golden path ran"):
        return
    expected = float_reference_rows(session.calbin, golden.prompt_ids.tolist(), forced)
    limits = Tolerance(
        max_abs=None,
        max_rel=run.params["max_rel_vs_float"],
        cosine_min=run.params["cosine_min_vs_float"],
        top1_min=run.params["top1_min_vs_float"],
        topk_min=0.0,
    )
    report = compare(expected, result.logits_rows(), limits)
    run.check("float_reference", report["passed"], "; ".join(report["failures"]) or "within the S8 tolerances")
    run.check(
        "dequantisation_error", (report["max_abs"] or 0) > 0, f"max abs error {report['max_abs']} against float32"
    )
    run.metrics["vs_float"] = {k: report[k] for k in ("max_abs", "max_rel", "cosine", "top1", "topk", "histogram")}


def _soak(run: ProbeRun) -> None:
    session = run.session()
    generic.load_and_soak(run, session)
    timing = run.metrics["report"]["timing"]
    run.check(
        "timed_as_s8",
        timing["weight_bytes_per_param"] == 1.0,
        f"timed at {timing['weight_bytes_per_param']} B per parameter, "
        f"{timing['kv_bytes_per_position']} KV bytes per position",
    )


S8 = ProbeSpec(
    "s8",
    "W8A8 int8 weights with per-channel scales and an S8 V cache, or K and V (V25), computed in integer "
    "arithmetic: accuracy against the float reference and the golden, capacity by A08's formula.",
    generic.plans(
        runner=StagePlan("int8 weights and scales, the S8 cache, A08's capacity; the minimal example", _runner),
        golden=StagePlan(
            "the golden comparison, then the device against the float32 model within the S8 limits", _golden
        ),
        soak=StagePlan("the soak, timed with 1 byte per weight and the S8 cache's bytes", _soak),
    ),
    capabilities=("s8-v-cache-calbin", "kv-batch-layout"),
    features=("s8",),
    requires=_quantises_what_is_asked,
    params=(ParamSpec("kv", "string", "v", "what the cache quantises: V, or K and V", choices=("v", "kv")),),
    thresholds=(
        ThresholdSpec(
            "cosine_min_vs_float",
            "number",
            0.999,
            "cosine against the float reference",
            minimum=0,
            maximum=1,
            stricter="higher",
        ),
        ThresholdSpec(
            "top1_min_vs_float",
            "number",
            0.9,
            "top-1 agreement with the float reference",
            minimum=0,
            maximum=1,
            stricter="higher",
        ),
        ThresholdSpec(
            "max_rel_vs_float", "number", 0.05, "max abs error / max abs float logit", minimum=0, stricter="lower"
        ),
    ),
    metrics=(
        MetricSpec("vs_float", "errors, cosine, top-k agreement and histogram against the float reference"),
        MetricSpec("kv_cache_bytes", "the package's KV cache by A08's formula"),
        MetricSpec("full_scale_kv_gib_per_chiplet", "the same cache at Qwen3-30B-A3B scale, 40960 positions, one lane"),
    ),
)
