import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from acceptance import stages
from acceptance.models import Run
from acceptance.views.plots import figure_html, request_plot, run_plots
from calculet import plots
from evidence.models import Capability
from npu_sim.golden import compare, row_figures
from npu_sim.timing import TimingModel, context_rows
from tests.factories import make_chain, make_run, put_to
from vendor.inputs import CommentDraft
from vendor.models import Question
from vendor.services.comments import comment_create


def test_bar_heights_follow_values_from_a_zero_baseline():
    plot = plots.bar_plot("t", "x", "y", [("a", 10), ("b", 5), ("c", 0)], top_value=10)
    full = plot.bottom - plot.top
    assert [bar.height for bar in plot.bars] == [full, full / 2, 0]
    assert all(bar.y + bar.height == plot.bottom for bar in plot.bars)
    assert [tick.label for tick in plot.y_ticks] == ["0", "2.5", "5", "7.5", "10"]


def test_log_bars_show_small_and_huge_counts():
    plot = plots.bar_plot("t", "x", "y", [("tiny", 9), ("huge", 999_999)], log=True)
    tiny, huge = (bar.height for bar in plot.bars)
    assert 0 < tiny < huge
    assert huge == pytest.approx(6 * tiny, abs=0.1)
    assert plot.y_ticks[-1].label == "1000000"


def test_line_maps_points_left_to_right_and_clips_to_the_frame():
    plot = plots.line_plot("t", "x", "y", [(40960, 10.0), (512, 60.0), (4096, 40.0)], threshold=100)
    xs = [x for x, _y, _label in plot.points]
    ys = [y for _x, y, _label in plot.points]
    assert xs == sorted(xs) and xs[0] > plot.left and xs[-1] == plot.right
    assert ys == sorted(ys)  # token/s falls as the context grows: lower on the chart
    assert plot.top <= plot.threshold_y <= plot.bottom


def charted_chain(pm, acme, acme_engineer):
    """V18 put to acme with a chain whose golden run measured decode_logits and whose soak failed its required
    60 token/s: every chart the question page draws has figures to draw."""
    put_to(pm, acme, "V18")
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for stage in stages.CHAIN_STAGES[:3]:
        make_run(chain, stage, stages.PASSED)
    rng = np.random.default_rng(7)
    expected = rng.normal(size=(4, 512)).astype(np.float32)
    actual = expected + rng.normal(scale=1e-3, size=expected.shape).astype(np.float32)
    make_run(chain, stages.GOLDEN, stages.PASSED, metrics={"tensors": {"decode_logits": compare(expected, actual)}})
    make_run(chain, stages.FAILURE, stages.PASSED)
    make_run(chain, stages.INTEGRATION, stages.PASSED)
    soak = {
        "prompt_tokens": 128,
        "timing_scale": "qwen3-30b-a3b",
        "ttft_ms": {"count": 32, "mean": 90.0, "p50": 80.0, "p95": 150.0, "p99": 180.0},
        "decode_tokens_per_s": {"count": 32, "mean": 55.0, "p50": 57.0, "p95": 62.0, "p99": 63.0},
        "context_rows": context_rows(TimingModel(), [512, 4096, 32768], 4),
    }
    make_run(chain, stages.SOAK, stages.FAILED, metrics=soak, params={"min_decode_tokens_per_s": 60})
    return chain


@pytest.mark.django_db
def test_question_page_draws_golden_and_soak_results(pm_client, pm, acme, acme_engineer, checklist):
    charted_chain(pm, acme, acme_engineer)
    body = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    for title in (
        "Absolute error of decode_logits against the golden",
        "Top-k agreement of decode_logits with the golden",
        "Time to first token",
        "Decode rate per request",
        "Decode rate per request against context length (timing model)",
    ):
        assert f"<title>{title}</title>" in body
    assert "required 60 token/s" in body
    assert body.count('<polyline class="line"') == 1
    assert body.count("decode batch 4 · timed at qwen3-30b-a3b scale") == 3


def test_soak_curve_plots_the_per_request_rate_the_threshold_and_the_measurement_share():
    """The timing model's curve at batch 4 is per request, as the measured median and the required rate are: one
    quantity on the axis, not the batch's total rate beside one request's."""
    rows = context_rows(TimingModel(), [512, 4096, 32768], 4)
    run = Run(
        stage=stages.SOAK,
        params={"min_decode_tokens_per_s": 10},
        metrics={
            "prompt_tokens": 128,
            "decode_tokens_per_s": {"p50": 20.0, "p95": 22.0, "p99": 23.0},
            "context_rows": rows,
        },
    )
    ttft_free = run_plots(run)
    curve = ttft_free[-1]
    assert [label for _x, _y, label in curve.points] == [
        plots._format(row["per_sequence_tokens_per_s"]) for row in rows
    ]
    assert rows[0]["decode_tokens_per_s"] == pytest.approx(4 * rows[0]["per_sequence_tokens_per_s"], rel=1e-3)
    assert curve.y_label == "token/s per request" and curve.note == "decode batch 4"
    rates = ttft_free[0]
    assert rates.threshold_y is not None and rates.top <= rates.threshold_y <= rates.bottom


def test_golden_steps_are_drawn_from_the_rows_calculet_kept_and_a_bad_step_falls_below_the_limit():
    """The wrong delivery the chart must show: one decode step off the golden is the lowest point, under the
    cosine limit, on an axis fine enough to tell 0.9999 from 1; a run whose reports keep no rows draws no steps."""
    rng = np.random.default_rng(3)
    expected = rng.normal(size=(8, 512)).astype(np.float32)
    actual = expected.copy()
    actual[4] += rng.normal(scale=0.05, size=512).astype(np.float32)
    report = compare(expected, actual) | {"rows": row_figures(expected, actual, 5)}
    run = Run(stage=stages.GOLDEN, metrics={"tensors": {"decode_logits": report}})
    cosine, topk = run_plots(run)[:2]
    assert cosine.title == "Cosine against the golden, step by step"
    heights = [y for _x, y, _label in cosine.points]
    assert heights.index(max(heights)) == 4  # the lowest value is drawn lowest
    assert max(heights) > cosine.threshold_y  # below the limit line
    assert cosine.threshold_label == "limit 0.9999"
    assert float(cosine.y_ticks[0].label) < report["rows"][4]["cosine"] < 0.9999
    assert topk.title == "Top-5 agreement with the golden, step by step"
    del report["rows"]
    assert "step by step" not in " ".join(plot.title for plot in run_plots(run))


def test_each_request_is_a_dot_against_the_required_rate():
    plot = request_plot([(800.0, 12.0), (950.0, 8.0)], 10.0)
    assert [title for _x, _y, title in plot.dots] == [
        "request 1: latency (ms) 800, token/s per request 12",
        "request 2: latency (ms) 950, token/s per request 8",
    ]
    slow = plot.dots[1]
    assert slow[1] > plot.threshold_y and plot.dots[0][1] < plot.threshold_y  # under and over the required rate


def test_figure_draws_every_request_and_escapes_its_texts():
    """The page's figure is built in Python, not a template: each dot is drawn, and no text can open a tag."""
    figure = figure_html(request_plot([(800.0, 12.0), (950.0, 8.0), (700.0, 15.0)], 10.0, note="<b>batch</b>"))
    assert figure.count('<circle class="dot"') == 3
    assert "<b>" not in figure
    assert '<span class="plot-note">&lt;b&gt;batch&lt;/b&gt;</span>' in figure
    assert figure.count("<title>") == 1 + 3


SOAK_PARAMS = {"min_decode_tokens_per_s": 50}
SOAK = {
    "prompt_tokens": 128,
    "decode_tokens_per_s": {"count": 2, "p50": 57.0},
    "per_request": [
        {"latency_ms": 800.0, "decode_tokens_per_s": 57.0},
        {"latency_ms": 900.0, "decode_tokens_per_s": 55.0},
    ],
}


@pytest.mark.django_db
def test_question_page_queries_do_not_grow_with_charts_or_comments(
    pm_client, pm, acme, acme_engineer, checklist, django_assert_num_queries
):
    """A soak chart reads its run's required rate, a comment its author's organisation: neither costs a query of
    its own (they did, once per soak run and once per comment)."""
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    make_run(make_chain(question, acme_engineer), stages.SOAK, stages.PASSED, metrics=SOAK, params=SOAK_PARAMS)
    comment_create(actor=pm, question=question, draft=CommentDraft(body="first"))
    url = reverse("question-detail", args=["V18"])
    with CaptureQueriesContext(connection) as few:
        assert pm_client.get(url).status_code == 200
    capabilities = Capability.objects.filter(deliverables__question=question).distinct().order_by("slug")[:3]
    for number, capability in enumerate(capabilities):
        chain = make_chain(question, acme_engineer, capability=capability)
        make_run(chain, stages.SOAK, stages.PASSED, metrics=SOAK, params=SOAK_PARAMS)
        comment_create(actor=acme_engineer, question=question, draft=CommentDraft(body=f"from the vendor {number}"))
    with django_assert_num_queries(len(few.captured_queries)):
        body = pm_client.get(url).content.decode()
    assert body.count("required 50 token/s") == 2 * 4  # each soak run: its requests and its decode rate
    assert body.count("· Acme NPU</span>") == 3
