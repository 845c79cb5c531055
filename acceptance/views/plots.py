"""Charts of a finished golden or soak run, drawn from the metrics the run stored."""

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from acceptance import stages
from acceptance.limits import GOLDEN_TENSORS
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


def _reports(tensors: object) -> dict[str, dict]:
    return {name: report for name, report in (tensors or {}).items() if isinstance(report, dict)}


def _tolerance(reports: dict[str, dict], key: str) -> float | None:
    """The tightest of the reports' `key` limits (cosine_min, topk_min): the line a figure must stay above."""
    limits = [(r.get("tolerance") or {}).get(key) for r in reports.values()]
    numbers = [limit for limit in limits if isinstance(limit, int | float)]
    return max(numbers) if numbers else None


def _unit_bars(
    title: str, x_label: str, y_label: str, bars: list[tuple[str, float]], limit: float | None
) -> plots.Plot:
    """Bars of figures near 1 on an axis that ends at 1, with the tolerance's limit drawn."""
    return plots.bar_plot(
        title,
        x_label,
        y_label,
        bars,
        top_value=1,
        bottom_value=plots.unit_floor([value for _, value in bars], limit),
        threshold=limit,
        threshold_label=_("limit %(limit)s") % {"limit": limit} if limit is not None else "",
    )


def _step_plots(reports: dict[str, dict]) -> list[plots.Plot]:
    """Cosine and top-k agreement of every step the golden was measured at (the prefill, then each decode step),
    from the rows calculet's comparison kept (GOLDEN_TENSORS lists the prefill first)."""
    rows = [row for name in GOLDEN_TENSORS for row in reports.get(name, {}).get("rows") or [] if isinstance(row, dict)]
    if not rows:
        return []
    k = reports.get("decode_logits", {}).get("k") or 5
    result = []
    for key, title, label, limit_key in (
        ("cosine", _("Cosine against the golden, step by step"), _("cosine"), "cosine_min"),
        ("topk", _("Top-%(k)s agreement with the golden, step by step") % {"k": k}, _("agreement"), "topk_min"),
    ):
        curve = [(step, row[key]) for step, row in enumerate(rows) if isinstance(row.get(key), int | float)]
        limit = _tolerance(reports, limit_key)
        result.append(
            plots.line_plot(
                title,
                _("step (0: prefill)"),
                label,
                curve,
                top_value=1,
                bottom_value=plots.unit_floor([value for _, value in curve], limit),
                threshold=limit,
                threshold_label=_("limit %(limit)s") % {"limit": limit} if limit is not None else "",
            )
        )
    return result


def _golden_plots(metrics: dict) -> list[plots.Plot]:
    result = _step_plots(_reports(metrics.get("tensors")))
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


def _response_plots(reports: dict[str, dict]) -> list[plots.Plot]:
    """The golden under load, one bar per sampled response (each served on a lane among the others): its cosine
    and top-k agreement, the lowest of its tensors', and one error histogram over them all."""
    responses: dict[str, list[dict]] = {}
    for name, report in reports.items():
        responses.setdefault(name.split(".")[0].removeprefix("response_"), []).append(report)
    if not responses:
        return []
    order = sorted(responses, key=lambda number: int(number) if number.isdigit() else 0)
    result = []
    for key, title, label, limit_key in (
        ("cosine", _("Cosine of each sampled response against the golden"), _("cosine"), "cosine_min"),
        ("topk", _("Top-k agreement of each sampled response with the golden"), _("agreement"), "topk_min"),
    ):
        bars = [
            (number, min(r[key] if isinstance(r.get(key), int | float) else 0.0 for r in responses[number]))
            for number in order
        ]
        result.append(_unit_bars(title, _("sampled response"), label, bars, _tolerance(reports, limit_key)))
    histograms = [r["histogram"] for r in reports.values() if isinstance(r.get("histogram"), dict)]
    if histograms:
        total = {
            "edges": histograms[0].get("edges", []),
            "counts": [sum(counts) for counts in zip(*(h.get("counts", []) for h in histograms), strict=False)],
            **{key: sum(h.get(key, 0) for h in histograms) for key in ("exact", "above", "nan")},
        }
        result.append(
            plots.bar_plot(
                _("Absolute error of the sampled responses against the golden"),
                _("|error|"),
                _("elements"),
                _histogram_bars(total),
                log=True,
            )
        )
    return result


def request_plot(requests: list[tuple[float, float]], required: float | None, note: str = "") -> plots.Plot:
    """Every request as one dot: its latency (sent to last token) against its decode rate, with the rate the
    soak requires drawn across."""
    return plots.scatter_plot(
        _("Each request: decode rate against latency"),
        _("latency (ms)"),
        _("token/s per request"),
        [
            (latency, rate, _("request %(number)s") % {"number": index + 1})
            for index, (latency, rate) in enumerate(requests)
        ],
        threshold=required,
        threshold_label=_("required %(rate)s token/s") % {"rate": required} if required is not None else "",
        note=note,
    )


def _measured_requests(metrics: dict) -> list[tuple[float, float]]:
    """(latency ms, token/s) of each request the soak measured."""
    return [
        (row["latency_ms"], row["decode_tokens_per_s"])
        for row in metrics.get("per_request") or []
        if isinstance(row, dict)
        and isinstance(row.get("latency_ms"), int | float)
        and isinstance(row.get("decode_tokens_per_s"), int | float)
    ]


def _soak_plots(run) -> list[plots.Plot]:
    """Each chart has one quantity on its value axis: time to first token, the measured per-request decode rate,
    each request's rate against its latency, the timing model's per-request decode rate against context (with
    the measured median marked on it), and the golden under load."""
    metrics = run.metrics
    conditions = _soak_conditions(metrics)
    required = (run.params or {}).get("min_decode_tokens_per_s")
    threshold = required if isinstance(required, int | float) else None
    threshold_label = _("required %(rate)s token/s") % {"rate": required}
    result = []
    requests = _measured_requests(metrics)
    if requests:
        result.append(request_plot(requests, threshold, conditions))
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
    under_load = _response_plots(_reports(metrics.get("golden_under_load")))
    rows = [row for row in metrics.get("context_rows") or [] if isinstance(row, dict)]
    curve = [(row["context"], row["per_sequence_tokens_per_s"]) for row in rows if "per_sequence_tokens_per_s" in row]
    if not curve:
        return result + under_load
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
    return result + under_load


def run_plots(run) -> list[plots.Plot]:
    """The charts of a finished golden or soak run, drawn from its stored metrics."""
    if not isinstance(run.metrics, dict) or not run.metrics:
        return []
    if run.stage == stages.GOLDEN:
        return _golden_plots(run.metrics)
    if run.stage == stages.SOAK:
        return _soak_plots(run)
    return []


def figure_html(plot: plots.Plot) -> SafeString:
    """A chart as the question page shows it: inline SVG in a figure with its caption. Built here rather than in
    a template: a soak chart has hundreds of points, and a template lookup and number format for each
    coordinate made most of the question page's time. Coordinates print as Python writes numbers (SVG reads
    them so whatever the language); every text is escaped."""
    e = escape
    left, right, top, bottom = plot.left, plot.right, plot.top, plot.bottom
    parts = [
        '\n<figure class="plot-figure">\n'
        f'  <svg class="plot" viewBox="0 0 {plot.width} {plot.height}" role="img" aria-label="{e(plot.title)}">\n'
        f"    <title>{e(plot.title)}</title>\n"
        f'    <line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>\n'
        f'    <line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>\n    ',
        *(
            f'<text x="{left - 4}" y="{tick.position}" text-anchor="end" dominant-baseline="middle">'
            f"{e(tick.label)}</text>"
            for tick in plot.y_ticks
        ),
        "\n    ",
        *(
            f'<text x="{tick.position}" y="{bottom + 16}" text-anchor="middle">{e(tick.label)}</text>'
            for tick in plot.x_ticks
        ),
        "\n    ",
        *(
            f'<rect class="bar" x="{bar.x}" y="{bar.y}" width="{bar.width}" height="{bar.height}">'
            f"<title>{e(bar.label)}: {e(bar.value)}</title></rect>\n"
            f'      <text class="bar-value" x="{bar.center}" y="{bar.y}" dy="-3" text-anchor="middle">'
            f"{e(bar.value)}</text>"
            for bar in plot.bars
        ),
        "\n    ",
        f'<polyline class="line" points="{e(plot.polyline)}"/>' if plot.polyline else "",
        "\n    ",
        *(f'<circle class="dot" cx="{x}" cy="{y}" r="3"><title>{e(name)}</title></circle>' for x, y, name in plot.dots),
        "\n    ",
        *(
            f'<circle cx="{x}" cy="{y}" r="3" fill="var(--danger)"><title>{e(value)}</title></circle>'
            for x, y, value in plot.marks
        ),
        "\n    ",
    ]
    if plot.threshold_y is not None:
        parts.append(
            f'<line class="threshold" x1="{left}" y1="{plot.threshold_y}" x2="{right}" y2="{plot.threshold_y}"/>\n'
            f'      <text class="threshold-label" x="{right}" y="{plot.threshold_label_y}" text-anchor="end">'
            f"{e(plot.threshold_label)}</text>"
        )
    note = f'<br><span class="plot-note">{e(plot.note)}</span>' if plot.note else ""
    parts.append(
        "\n"
        f'    <text class="axis-label" x="{right}" y="{plot.height - 4}" text-anchor="end">{e(plot.x_label)}</text>\n'
        f'    <text class="axis-label" x="4" y="14">{e(plot.y_label)}</text>\n'
        "  </svg>\n"
        f'  <figcaption class="muted">{e(plot.title)}{note}</figcaption>\n'
        "</figure>\n"
    )
    return mark_safe("".join(parts))  # noqa: S308 (every text above is escaped)
