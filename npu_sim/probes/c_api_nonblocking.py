"""Probe c_api_nonblocking (I13): the C calling convention, submit without blocking, wait, read."""

import numpy as np

from npu_sim import c_api
from npu_sim.client import recover
from npu_sim.device import BufferStatus, OutputBuffer
from npu_sim.errors import ErrorCode
from npu_sim.faults import Fault, FaultKind
from npu_sim.golden import compare
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import ProbeSpec, StagePlan
from npu_sim.stages.common import tolerances

# The runner plan's prompt: the caller replays it on the package's reference (acceptance.probe_judging).
C_PROMPT = [1, 2, 3]


def _c_runner(run: ProbeRun) -> None:
    session = run.session()
    device, kv = session.device, session.kv
    prefill = session.calbin.model_of_type("llm_prefill")
    vocab = session.calbin.config.vocab
    kv.allocate(1, len(C_PROMPT))
    handles: list[OutputBuffer] = []
    code = run.observe(
        "nonblocking_returns_at_once.code", c_api.calrt_infer_nonblocking(device, prefill, kv, {1: C_PROMPT}, handles)
    )
    status = run.observe("nonblocking_returns_at_once.status", handles[0].status)
    run.check("nonblocking_returns_at_once", code == 0 and status != BufferStatus.DONE, f"code {code}, status {status}")
    waited = run.observe("wait_timeout_code.code", c_api.calrt_wait(handles[0], 0.0))
    run.check("wait_timeout_code", waited == int(ErrorCode.TIMEOUT), "wait(0) on a running job returns 18")
    out = np.zeros(vocab, dtype=np.uint16)
    codes = (
        run.observe("blocking_equals_nonblocking.wait_code", c_api.calrt_wait(handles[0], 1e9)),
        run.observe("blocking_equals_nonblocking.output_code", c_api.calrt_get_output(handles[0], 1, out)),
    )
    kv.apply(1)
    kv.free(1)
    kv.allocate(1, len(C_PROMPT))
    blocking = {1: np.zeros(vocab, dtype=np.uint16)}
    code = run.observe(
        "blocking_equals_nonblocking.blocking_code",
        c_api.calrt_infer_blocking(device, prefill, kv, {1: C_PROMPT}, 1e9, blocking),
    )
    kv.apply(1)
    kv.free(1)
    same = np.array_equal(
        run.observe("blocking_equals_nonblocking.nonblocking", out),
        run.observe("blocking_equals_nonblocking.blocking", blocking[1]),
    )
    run.check("blocking_equals_nonblocking", codes == (0, 0) and code == 0 and same, f"codes {codes}, {code}")
    kv.allocate(1, 2)
    bad = run.observe(
        "errors_are_codes.out_of_vocab", c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, vocab]}, handles)
    )
    decode = session.calbin.model_of_type("llm_decode")
    shape = run.observe(
        "errors_are_codes.wrong_shape", c_api.calrt_infer_nonblocking(device, decode, kv, {1: [1, 2]}, handles)
    )
    run.check(
        "errors_are_codes",
        (bad, shape) == (int(ErrorCode.INVALID_ARGUMENT), int(ErrorCode.SHAPE_MISMATCH)),
        f"codes {bad}, {shape}",
    )
    kv.clear()


def _c_golden(run: ProbeRun) -> None:
    session = run.session()
    golden = run.ctx.golden(session.calbin)
    device, kv, calbin = session.device, session.kv, session.calbin
    vocab = calbin.config.vocab
    rows = []
    prompt = golden.prompt_ids.tolist()
    kv.allocate(1, len(prompt))
    out = {1: np.zeros(vocab, dtype=np.uint16)}
    codes = [c_api.calrt_infer_blocking(device, calbin.model_of_type("llm_prefill"), kv, {1: prompt}, 1e9, out)]
    rows.append(out[1].copy())
    kv.apply(1)
    for token in golden.decode_input_ids.tolist():
        kv.allocate(1, 1)
        codes.append(c_api.calrt_infer_blocking(device, calbin.model_of_type("llm_decode"), kv, {1: [token]}, 1e9, out))
        rows.append(out[1].copy())
        kv.apply(1)
    kv.free(1)
    run.observe("codes.returned", codes)
    run.observe("golden.logits", np.stack(rows))
    limits = tolerances(run.stage_params)
    if run.check("codes", all(c == 0 for c in codes), f"{len(codes)} blocking calls returned {sorted(set(codes))}"):
        report = compare(golden.decode_logits, np.stack(rows[1:]), limits["decode_logits"])
        run.check("golden:decode_logits", report["passed"], "; ".join(report["failures"]) or "within tolerance")


def _c_failure(run: ProbeRun) -> None:
    session = run.session()
    device, kv = session.device, session.kv
    prefill = session.calbin.model_of_type("llm_prefill")
    handles: list[OutputBuffer] = []
    device.inject(Fault(FaultKind.BUSY, at_step=0))
    kv.allocate(1, 3)
    busy = c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles)
    device.inject(Fault(FaultKind.CORE_EXCEPTION, at_step=0))
    c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles)
    core = c_api.calrt_wait(handles[-1], 1e9)
    device.disarm_faults()
    run.observe("faults_as_codes.busy", busy)
    run.observe("faults_as_codes.core_exception", core)
    run.check(
        "faults_as_codes",
        (busy, core) == (int(ErrorCode.BUSY), int(ErrorCode.CORE_EXCEPTION)),
        f"busy {busy}, core exception {core}",
    )
    recover(device, session.calbin, ErrorCode(core))
    again = run.observe(
        "serves_after_recovery.code", c_api.calrt_infer_nonblocking(device, prefill, kv, {1: [1, 2, 3]}, handles)
    )
    run.check("serves_after_recovery", again == 0, "the same job submitted again is accepted")
    handles[-1].wait(1e9)
    kv.clear()
    generic.inject_faults(run, session)


C_API_NONBLOCKING = ProbeSpec(
    "c_api_nonblocking",
    "The C API (I13): blocking, non-blocking and wait, every outcome an int code from the table, outputs copied "
    "into the caller's buffers.",
    generic.plans(
        runner=StagePlan(
            "non-blocking returns at once, wait times out then completes, blocking gives the same bits, "
            "errors as codes",
            _c_runner,
        ),
        golden=StagePlan("the golden path through blocking calls, against the golden", _c_golden),
        failure=StagePlan("busy and core exception as codes; recovery; each fault kind", _c_failure),
    ),
    capabilities=("c-api-nonblocking",),
)
