"""Probe full_debug (I14): every layer's output with each call, version and dtype sizes."""

from collections.abc import Callable

import numpy as np

from npu_sim.client import run_request
from npu_sim.errors import ErrorCode, code_of
from npu_sim.golden import compare
from npu_sim.loaded_calbin import Calbin
from npu_sim.model import KvCache
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ProbeSpec, StagePlan
from npu_sim.protocol.context import Session

# What the runner plan asks the runtime for, and the bits it must answer (the caller checks them too:
# acceptance.probe_judging).
DTYPE_BITS = {"bf16": 16, "f32": 32, "s8": 8, "s32": 32}
# The lowest cosine of a dumped layer's output against the reference's.
LAYER_COSINE_MIN = 0.9999


def reference_dump(calbin: Calbin, prompt: list[int]) -> list[np.ndarray]:
    """Each layer's output for a prefill of `prompt` on the package's reference."""
    model = calbin.reference()
    model.dump = []
    model.prefill(KvCache(calbin.config, 1, calbin.k_dtype, calbin.v_dtype), 0, np.array(prompt), 0)
    return model.dump


def lowest_cosine(expected: list[np.ndarray], dump: list[np.ndarray]) -> float:
    return min(compare(e, d)["cosine"] or 0.0 for e, d in zip(expected, dump, strict=True))


def _debug_runner(run: ProbeRun) -> None:
    session = run.session()
    device = session.device
    identity = device.identity
    version = run.observe("version.calrt", device.version())
    run.check("version", version == identity.calrt, f"the runtime reports CalRT {version}")
    sizes = {name: device.dtype_bit_size(name) for name in DTYPE_BITS}
    run.observe("dtype_bit_size.sizes", list(sizes.values()))
    unknown = run.observe("dtype_bit_size.unknown", code_of(lambda: device.dtype_bit_size("f7")))
    run.check(
        "dtype_bit_size",
        sizes == DTYPE_BITS and unknown == ErrorCode.DTYPE_MISMATCH,
        f"{sizes}; f7: {unknown.name}",
    )
    prompt = session.calbin.goldens.prompt_ids.tolist()
    plain = run_request(device, session.calbin, session.kv, 1, prompt, 0)
    device.set_full_debug(True)
    debugged = run_request(device, session.calbin, session.kv, 1, prompt, 0)
    call = device.call_log[-1]
    dump = device.debug_dumps.get(call.call, [])
    run.observe("dump_per_layer.dump", np.array(dump, dtype=np.float32))
    layers, hidden = session.calbin.config.layers, session.calbin.config.hidden
    run.check(
        "dump_per_layer",
        len(dump) == layers and all(d.shape == (len(prompt), hidden) for d in dump),
        f"{len(dump)} layers of {[d.shape for d in dump][:1]}",
    )
    run.observe("debug_costs_d2h.with_debug_ms", call.time.d2h_ms)
    run.observe("debug_costs_d2h.without_debug_ms", device.call_log[-2].time.d2h_ms)
    cost = call.time.d2h_ms > device.call_log[-2].time.d2h_ms
    run.check(
        "debug_costs_d2h",
        cost,
        f"D2H {call.time.d2h_ms:.4f} ms with debug, {device.call_log[-2].time.d2h_ms:.4f} ms without",
    )
    run.observe("output_unchanged.plain_code", plain.code)
    run.observe("output_unchanged.debugged_code", debugged.code)
    if plain.ok and debugged.ok:
        run.observe("output_unchanged.plain", plain.logits_rows().view(np.uint16))
        run.observe("output_unchanged.debugged", debugged.logits_rows().view(np.uint16))
    same = (
        plain.ok
        and debugged.ok
        and np.array_equal(plain.logits_rows().view(np.uint16), debugged.logits_rows().view(np.uint16))
    )
    run.check("output_unchanged", same, "the logits are the same bits with full debug on")
    device.set_full_debug(False)
    run.metrics["layers_dumped"] = len(dump)


def _debug_golden(run: ProbeRun) -> None:
    """Each layer's output in the dump equals the reference's for the same layer."""
    session = run.session()
    session.device.set_full_debug(True)
    prompt = session.calbin.goldens.prompt_ids.tolist()
    run_request(session.device, session.calbin, session.kv, 1, prompt, 0)
    dump = session.device.debug_dumps[session.device.call_log[-1].call]
    run.observe("layers_match_reference.dump", np.array(dump, dtype=np.float32))
    worst = lowest_cosine(reference_dump(session.calbin, prompt), dump)
    run.check(
        "layers_match_reference",
        worst >= LAYER_COSINE_MIN,
        f"lowest cosine of a layer against the reference: {worst:.8f}",
    )
    generic.compare_with_golden(run, session)


def _debugging(plan: Callable[[ProbeRun, Session], None]) -> Callable[[ProbeRun], None]:
    def run_with_debug(run: ProbeRun) -> None:
        session = run.session()
        session.device.set_full_debug(True)
        plan(run, session)
        dumps = session.device.debug_dumps
        run.observe("dumped_every_layer.layers", [len(dump) for dump in dumps.values()])
        layers = session.calbin.config.layers
        complete = bool(dumps) and all(len(dump) == layers for dump in dumps.values())
        run.check("dumped_every_layer", complete, f"{len(dumps)} calls dumped, {layers} layers each")

    return run_with_debug


FULL_DEBUG = ProbeSpec(
    "full_debug",
    "Version, dtype bit sizes and full debug (I14): with full debug every call also returns each layer's "
    "output, equal to the reference's, at a D2H cost, with the logits unchanged.",
    generic.plans(
        runner=StagePlan("version, dtype sizes, a dump per layer, its D2H cost, unchanged logits", _debug_runner),
        golden=StagePlan("every layer of the dump against the reference's; the golden comparison", _debug_golden),
        failure=StagePlan(
            "each fault kind with full debug on", _debugging(lambda run, s: generic.inject_faults(run, s))
        ),
        integration=StagePlan(
            "the serving loop with full debug on", _debugging(lambda run, s: generic.integrate(run, s))
        ),
        soak=StagePlan(
            "the soak with full debug on (its D2H shows in the breakdown)",
            _debugging(lambda run, s: generic.load_and_soak(run, s)),
        ),
    ),
    capabilities=("full-debug",),
    metrics=(MetricSpec("layers_dumped", "layer outputs in one call's dump"),),
)
