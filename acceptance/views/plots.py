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


def _soak_conditions(metrics: dict) -> str:
    """What a soak figure was measured under: the decode batch and the scale the device clock runs at."""
    rows = metrics.get("context_rows") or []
    batch = rows[0].get("batch") if rows and isinstance(rows[0], dict) else metrics.get("concurrency")
    scale = metrics.get("timing_scale")
    parts = []
    if batch:
        parts.append(_("decode batch %(batch)s") % {"batch": batch})
    if scale:
        scale_text = _("the package's own size") if scale == "package" else scale
        parts.append(_("timed at %(scale)s scale") % {"scale": scale_text})
    return " · ".join(str(part) for part in parts)


def _soak_plots(run) -> list[plots.Plot]:
    """Each chart has one quantity on its value axis: time to first token, the measured per-request decode rate,
    and the timing model's per-request decode rate against context (with the measured median marked on it)."""
    metrics = run.metrics
    conditions = _soak_conditions(metrics)
    required = (run.params or {}).get("min_decode_tokens_per_s")
    threshold = required if isinstance(required, int | float) else None
    threshold_label = _("required %(rate)s token/s") % {"rate": required}
    result = []
    ttft = _percentile_bars(metrics.get("ttft_ms") or {})
    if ttft:
        result.append(plots.bar_plot(_("Time to first token"), _("percentile"), "ms", ttft, note=conditions))
    rates = _percentile_bars(metrics.get("decode_tokens_per_s") or {})
    if rates:
        result.append(
            plots.bar_plot(
                _("Decode rate per request"),
                _("percentile"),
                _("token/s per request"),
                rates,
                note=conditions,
                threshold=threshold,
                threshold_label=threshold_label,
            )
        )
    rows = [row for row in metrics.get("context_rows") or [] if isinstance(row, dict)]
    curve = [(row["context"], row["per_sequence_tokens_per_s"]) for row in rows if "per_sequence_tokens_per_s" in row]
    if not curve:
        return result
    measured = (metrics.get("decode_tokens_per_s") or {}).get("p50")
    context = metrics.get("prompt_tokens")
    result.append(
        plots.line_plot(
            _("Decode rate per request against context length (timing model)"),
            _("context tokens"),
            _("token/s per request"),
            curve,
            marks=[(context, measured)] if isinstance(measured, int | float) and context else [],
            threshold=threshold,
            threshold_label=threshold_label,
            note=conditions,
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
