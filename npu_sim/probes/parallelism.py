"""Probes of how one model is spread: tensor, expert and pipeline parallelism over the two chiplets (V29,
V32), and over two boards joined by a modelled link (V36), each against the single-device reference."""

from collections.abc import Callable
from dataclasses import replace

from npu_sim.client import run_request
from npu_sim.device.records import CallRecord
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.golden import Tolerance, compare
from npu_sim.model import ModelConfig
from npu_sim.probes import generic
from npu_sim.probes.run import ProbeRun
from npu_sim.probes.spec import MetricSpec, ParamSpec, ProbeSpec, StagePlan, ThresholdSpec
from npu_sim.protocol.context import NotExercised, Session

LINK_BYTES = 4  # the executors' links carry float32

EQUIVALENCE = (
    ThresholdSpec(
        "cosine_min",
        "number",
        0.9999,
        "cosine against the single-device reference",
        minimum=0,
        maximum=1,
        stricter="higher",
    ),
    ThresholdSpec(
        "top1_min", "number", 0.99, "top-1 agreement with the reference", minimum=0, maximum=1, stricter="higher"
    ),
    ThresholdSpec("max_rel", "number", 0.01, "max abs error / max abs reference logit", minimum=0, stricter="lower"),
)


def equivalent(run: ProbeRun, session: Session) -> None:
    """The golden path on the device against the same inputs on the single-device reference."""
    golden = session.calbin.goldens
    forced = golden.decode_input_ids.tolist()
    prompt = golden.prompt_ids.tolist()
    result = run_request(session.device, session.calbin, session.kv, 1, prompt, len(forced), forced=forced)
    if not run.check("request", result.ok, result.message or "the golden path ran"):
        return
    expected = session.calbin.reference_logits(prompt, forced + [0])
    limits = Tolerance(
        max_rel=run.params["max_rel"],
        cosine_min=run.params["cosine_min"],
        top1_min=run.params["top1_min"],
        topk_min=0.0,
    )
    report = compare(expected, result.logits_rows(), limits)
    run.check(
        "equals_single_device",
        report["passed"],
        "; ".join(report["failures"]) or f"within tolerance over {len(forced)} decode steps",
    )
    run.metrics["vs_single_device"] = {k: report[k] for k in ("max_abs", "max_rel", "cosine", "top1")}


def _link_runner(
    expected: Callable[[ModelConfig, CallRecord], tuple[int, int]], what: str
) -> Callable[[ProbeRun, Session], None]:
    """Run the minimal example and check each call's link bytes: (chiplet link, board link) per call."""

    def check(run: ProbeRun, session: Session) -> None:
        generic.exercise(run, session)
        calls = session.device.call_log
        wrong = [r.call for r in calls if (r.d2d_bytes, r.board_link_bytes) != expected(session.calbin.config, r)]
        run.check(
            "link_bytes",
            bool(calls) and not wrong,
            f"{what}: {sum(r.d2d_bytes for r in calls)} B on the chiplet link, "
            f"{sum(r.board_link_bytes for r in calls)} B on the board link in {len(calls)} calls"
            + (f"; calls {wrong[:5]} differ" if wrong else ""),
        )
        run.check(
            "on_all_its_chiplets",
            all(r.chiplets == tuple(session.calbin.chiplets) for r in calls),
            f"chiplets {session.calbin.chiplets}",
        )
        run.metrics.update(
            {
                "d2d_bytes": sum(r.d2d_bytes for r in calls),
                "board_link_bytes": sum(r.board_link_bytes for r in calls),
                "calls": len(calls),
            }
        )

    return check


def _rows(record: CallRecord) -> tuple[int, int]:
    """Rows through the layers, and rows of logits that come back."""
    return record.tokens, record.lanes


def _tp_bytes(c: ModelConfig, r: CallRecord) -> tuple[int, int]:
    rows, logit_rows = _rows(r)
    # Embedding to chiplet 1; two all-reduces per layer, each chiplet sending its partial; half the logits back.
    return LINK_BYTES * (rows * c.hidden + c.layers * 2 * 2 * rows * c.hidden + logit_rows * c.vocab // 2), 0


def _pp_bytes(c: ModelConfig, r: CallRecord) -> tuple[int, int]:
    return LINK_BYTES * r.tokens * c.hidden, 0


def _board_bytes(c: ModelConfig, r: CallRecord) -> tuple[int, int]:
    return _tp_bytes(c, r)[0], LINK_BYTES * r.tokens * c.hidden


def _layout_soak(run: ProbeRun, session: Session | None = None) -> None:
    session = session or run.session()
    generic.load_and_soak(run, session)
    timing = run.metrics["report"]["timing"]
    run.check("timed_for_its_layout", timing["layout"] == session.calbin.layout, f"timed as {timing['layout']}")


def _plans(runner: Callable[[ProbeRun, Session], None], session: Callable[[ProbeRun], Session]) -> dict[str, StagePlan]:
    def golden(run: ProbeRun) -> None:
        own = session(run)
        equivalent(run, own)
        generic.compare_with_golden(run, own)

    return generic.plans(
        runner=StagePlan(
            "the minimal example; every call's link bytes as the layout moves them",
            lambda run: runner(run, session(run)),
        ),
        golden=StagePlan("the golden path against the single-device reference, then the golden comparison", golden),
        failure=StagePlan(
            "each fault kind injected on the layout, recovery, the golden again",
            lambda run: generic.inject_faults(run, session(run)),
        ),
        integration=StagePlan(
            "the serving loop on the layout, each sequence against its replay alone",
            lambda run: generic.integrate(run, session(run)),
        ),
        soak=StagePlan("the soak, timed for the layout", lambda run: _layout_soak(run, session(run))),
    )


def _plain(run: ProbeRun) -> Session:
    return run.session()


def _ep_runner(run: ProbeRun, session: Session) -> None:
    generic.exercise(run, session)
    executor = session.handle.executor
    calls = session.device.call_log
    halves = [len(part["layers.0.experts.gate"]) for part in getattr(executor, "local", [])]
    run.check(
        "experts_partitioned", halves == [session.calbin.config.experts // 2] * 2, f"experts per chiplet: {halves}"
    )
    moved = sum(r.d2d_bytes for r in calls)
    run.check(
        "all_to_all_counted",
        moved > 0 and all(r.d2d_bytes >= 0 for r in calls),
        f"{moved} B of dispatch and combine in {len(calls)} calls",
    )
    run.metrics.update({"all_to_all_bytes": moved, "calls": len(calls)})


TENSOR_PARALLEL = ProbeSpec(
    "tensor_parallel",
    "Two-chiplet tensor parallelism as the seed's profiles show it (M11, M12): equal to the single-device reference.",
    _plans(_link_runner(_tp_bytes, "embedding, two all-reduces per layer, half the logits"), _plain),
    features=("tp",),
    thresholds=EQUIVALENCE,
    metrics=(
        MetricSpec("vs_single_device", "errors, cosine, top-1 against the reference"),
        MetricSpec("d2d_bytes", "bytes on the chiplet link"),
    ),
)

EXPERT_PARALLEL = ProbeSpec(
    "expert_parallel",
    "Expert parallelism (V32): experts split over the chiplets, tokens dispatched and combined (all-to-all bytes "
    "counted), equal to the single-device reference within tolerance.",
    _plans(_ep_runner, _plain),
    capabilities=("expert-parallel",),
    features=("ep",),
    thresholds=EQUIVALENCE,
    metrics=(
        MetricSpec("vs_single_device", "errors, cosine, top-1 against the reference"),
        MetricSpec("all_to_all_bytes", "dispatch and combine bytes"),
    ),
)

PIPELINE_PARALLEL = ProbeSpec(
    "pipeline_parallel",
    "Pipeline parallelism (V32): half the layers per chiplet, the activations crossing once per call; equal to "
    "the single-device reference.",
    _plans(_link_runner(_pp_bytes, "one stage boundary"), _plain),
    capabilities=("pipeline-parallel",),
    features=("pp",),
    thresholds=EQUIVALENCE,
    metrics=(
        MetricSpec("vs_single_device", "errors, cosine, top-1 against the reference"),
        MetricSpec("d2d_bytes", "bytes across the stage boundary"),
    ),
)


def _boards(run: ProbeRun) -> None:
    """A runtime that cannot span two physical devices refuses with the documented code: not exercised."""
    try:
        run.ctx.make_device(physical_devices=2)
    except CalrtError as error:
        run.check(
            "refused_as_documented",
            error.code == ErrorCode.MULTI_DEVICE_UNSUPPORTED,
            f"CalRT {run.ctx.device_identity().calrt}: {error}",
        )
        raise NotExercised(
            f"the device's CalRT {run.ctx.device_identity().calrt} drives one physical device (I09)"
        ) from error


def _board_session(run: ProbeRun) -> Session:
    return run.session(
        physical_devices=2, board_link_gb_s=run.params["link_gb_s"], board_link_latency_us=run.params["link_latency_us"]
    )


def _board_runner(run: ProbeRun, session: Session) -> None:
    _link_runner(_board_bytes, "tensor parallel on each board, one board-link crossing")(run, session)
    record = session.device.call_log[-1]
    tp = session.handle.timing
    without = replace(tp, layout="tp").decode_call([record.tokens]).total_ms
    with_link = tp.decode_call([record.tokens]).total_ms
    run.check(
        "link_time_modelled",
        with_link > without,
        f"a decode step: {with_link:.4f} ms across boards, {without:.4f} ms on one",
    )
    run.metrics["board_link"] = {"gb_s": run.params["link_gb_s"], "latency_us": run.params["link_latency_us"]}


MULTI_BOARD = ProbeSpec(
    "multi_board",
    "A model split over two boards joined by a modelled link (V36). A CalRT 0.7.6 device refuses it "
    "(MULTI_DEVICE_UNSUPPORTED, I09): the probe then fails not_exercised, which is why the pinned "
    "multi-physical-device capability stays C4; a runtime whose CalRT declares multi_board runs it.",
    _plans(_board_runner, _board_session),
    capabilities=("multi-board", "multi-physical-device-calrt-0-7-6"),
    features=("multi_board",),
    requires=_boards,
    params=(
        ParamSpec("link_gb_s", "number", 25.0, "board link bandwidth, GB/s", minimum=0.001),
        ParamSpec("link_latency_us", "number", 10.0, "board link latency per transfer, microseconds", minimum=0),
    ),
    thresholds=EQUIVALENCE,
    metrics=(
        MetricSpec("vs_single_device", "errors, cosine, top-1 against the reference"),
        MetricSpec("board_link_bytes", "bytes across the board link"),
        MetricSpec("d2d_bytes", "bytes on the chiplet links"),
    ),
)

PARALLELISM = [TENSOR_PARALLEL, EXPERT_PARALLEL, PIPELINE_PARALLEL, MULTI_BOARD]
