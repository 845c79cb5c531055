"""Charts of a finished golden or soak run, drawn from the metrics the run stored."""

from django.utils.translation import gettext_lazy as _

from acceptance import stages
from calculet import plots


def _histogram_bars(histogram: dict) -> list[tuple[str, float]]:
    """Golden error bins: exact, one per [edge, next edge), at or above the last edge, NaN."""
    edges = histogram.get("edges", [])
    bars = [("= 0", histogram.get("exact", 0))]
    bars += [(f"< {upper:g}", count) for upper, count in zip(edges[1:], histogram.get("counts", []), strict=False)]
    if edges:
        bars.append((f"≥ {edges[-1]:g}", histogram.get("above", 0)))
    bars.append(("NaN", histogram.get("nan", 0)))
    return bars


def _golden_plots(metrics: dict) -> list[plots.Plot]:
    result = []
    for name, report in sorted((metrics.get("tensors") or {}).items()):
        if not isinstance(report, dict):
            continue
        if isinstance(report.get("histogram"), dict):
            result.append(
                plots.bar_plot(
                    _("Absolute error of %(tensor)s against the golden") % {"tensor": name},
                    _("|error|"),
                    _("elements"),
                    _histogram_bars(report["histogram"]),
                    log=True,
                )
            )
        by_k = [item for item in report.get("topk_by_k") or [] if isinstance(item, dict)]
        if by_k:
            result.append(
                plots.bar_plot(
                    _("Top-k agreement of %(tensor)s with the golden") % {"tensor": name},
                    "k",
                    _("agreement"),
                    [(f"top-{item['k']}", item["agreement"]) for item in by_k],
                    top_value=1,
                )
            )
    return result


def _percentile_bars(figures: dict) -> list[tuple[str, float]]:
    return [(key, figures[key]) for key in ("p50", "p95", "p99") if isinstance(figures.get(key), int | float)]


def _soak_plots(run) -> list[plots.Plot]:
    metrics = run.metrics
    result = []
    for key, title, unit in (
        ("ttft_ms", _("Time to first token"), "ms"),
        ("decode_tokens_per_s", _("Decode rate per request"), _("token/s")),
    ):
        bars = _percentile_bars(metrics.get(key) or {})
        if bars:
            result.append(plots.bar_plot(title, _("percentile"), unit, bars))
    curve = [(row["context"], row["decode_tokens_per_s"]) for row in metrics.get("context_rows") or []]
    if not curve:
        return result
    measured = (metrics.get("decode_tokens_per_s") or {}).get("p50")
    context = metrics.get("prompt_tokens")
    required = (run.params or {}).get("min_decode_tokens_per_s")
    result.append(
        plots.line_plot(
            _("Decode token/s against context length (timing model)"),
            _("context tokens"),
            _("token/s"),
            curve,
            marks=[(context, measured)] if isinstance(measured, int | float) and context else [],
            threshold=required if isinstance(required, int | float) else None,
            threshold_label=_("required %(rate)s token/s") % {"rate": required},
        )
    )
    return result


def run_plots(run) -> list[plots.Plot]:
    """The charts of a finished golden or soak run, drawn from its stored metrics."""
    if not isinstance(run.metrics, dict) or not run.metrics:
        return []
    if run.stage == stages.GOLDEN:
        return _golden_plots(run.metrics)
    if run.stage == stages.SOAK:
        return _soak_plots(run)
    return []
