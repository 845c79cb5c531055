"""Geometry of the small charts the pages draw as inline SVG: bar charts and line charts. No Django here.

Each function returns plain data (rectangles, a polyline, tick labels) in a fixed view box; the templates
only place it. Values outside a chart's range are clipped to it.
"""

import math
from dataclasses import dataclass, field

WIDTH = 480
HEIGHT = 200
LEFT = 56
RIGHT = 24
TOP = 24
BOTTOM = 40


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: str

    @property
    def center(self) -> float:
        return round(self.x + self.width / 2, 2)


@dataclass
class Tick:
    position: float
    label: str


@dataclass
class Plot:
    title: str
    x_label: str
    y_label: str
    width: int = WIDTH
    height: int = HEIGHT
    bars: list[Bar] = field(default_factory=list)
    polyline: str = ""
    points: list[tuple[float, float, str]] = field(default_factory=list)
    marks: list[tuple[float, float, str]] = field(default_factory=list)
    dots: list[tuple[float, float, str]] = field(default_factory=list)  # a scatter's points, each with its title
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    threshold_y: float | None = None
    threshold_label: str = ""
    note: str = ""  # what the figures were measured under, shown under the title

    @property
    def left(self) -> int:
        return LEFT

    @property
    def bottom(self) -> int:
        return self.height - BOTTOM

    @property
    def right(self) -> int:
        return self.width - RIGHT

    @property
    def top(self) -> int:
        return TOP

    @property
    def threshold_label_y(self) -> float:
        """Above the threshold line, or below it when the line runs along the top (where the figures near 1 are)."""
        y = self.threshold_y or 0.0
        return y + 12 if y < self.top + 14 else y - 3


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def _format(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.3g}"
    return f"{value:.2g}"


def _precise(value: float) -> str:
    """Six significant digits, for figures near 1 whose differences matter (0.99985, 0.999934)."""
    return f"{round(value, 9):.6g}"


def unit_floor(values: list[float], threshold: float | None = None) -> float:
    """The lower end of an axis that ends at 1 for figures near 1 (cosines, agreements): low enough to show the
    lowest value and the threshold, high enough that 0.9999 and 1 do not look the same."""
    lowest = min([*values, *([threshold] if threshold is not None else [])], default=0.0)
    span = _nice_ceiling(max(1 - lowest, 1e-6) * 1.25)
    return max(0.0, 1 - span)


def _y_scale(top_value: float, bottom_value: float = 0.0):
    plot_height = HEIGHT - TOP - BOTTOM
    span = top_value - bottom_value

    def y(value: float) -> float:
        clipped = min(max(value, bottom_value), top_value)
        return round(HEIGHT - BOTTOM - (clipped - bottom_value) / span * plot_height, 2)

    return y


def _y_ticks(top_value: float, y, bottom_value: float = 0.0) -> list[Tick]:
    span = top_value - bottom_value
    if not bottom_value:
        return [Tick(y(top_value * share), _format(top_value * share)) for share in (0, 0.25, 0.5, 0.75, 1)]
    return [
        Tick(y(bottom_value + span * share), _precise(bottom_value + span * share)) for share in (0, 0.25, 0.5, 0.75, 1)
    ]


def bar_plot(
    title: str,
    x_label: str,
    y_label: str,
    bars: list[tuple[str, float]],
    *,
    top_value: float | None = None,
    log: bool = False,
    threshold: float | None = None,
    threshold_label: str = "",
    note: str = "",
    bottom_value: float = 0.0,
) -> Plot:
    """One bar per (label, value), in the given order; the y axis starts at `bottom_value` (0 unless told:
    `unit_floor` for figures near 1), with an optional horizontal `threshold` (not with `log`).

    With `log`, heights follow log10(1 + value) so that bins of 3 and of 3 million both show.
    """
    plot = Plot(title=title, x_label=x_label, y_label=y_label, note=note)
    if log:
        heights = [(label, math.log10(1 + max(value, 0))) for label, value in bars]
        top = max(1.0, math.ceil(max((h for _, h in heights), default=0)))
        y = _y_scale(top)
        plot.y_ticks = [Tick(y(power), _format(10**power) if power else "0") for power in range(int(top) + 1)]
    else:
        heights = bars
        top = top_value or _nice_ceiling(max([*(value for _, value in bars), threshold or 0], default=0))
        y = _y_scale(top, bottom_value)
        plot.y_ticks = _y_ticks(top, y, bottom_value)
        if threshold is not None:
            plot.threshold_y = y(threshold)
            plot.threshold_label = threshold_label
    slot = (plot.right - plot.left) / max(len(bars), 1)
    for index, ((label, value), (_, height)) in enumerate(zip(bars, heights, strict=True)):
        bar_top = y(height)
        x = plot.left + index * slot + slot * 0.1
        shown = _precise(value) if bottom_value else _format(value)
        plot.bars.append(Bar(round(x, 2), bar_top, round(slot * 0.8, 2), round(plot.bottom - bar_top, 2), label, shown))
        plot.x_ticks.append(Tick(round(x + slot * 0.4, 2), label))
    return plot


def line_plot(
    title: str,
    x_label: str,
    y_label: str,
    points: list[tuple[float, float]],
    *,
    marks: list[tuple[float, float]] = (),
    threshold: float | None = None,
    threshold_label: str = "",
    note: str = "",
    bottom_value: float = 0.0,
    top_value: float | None = None,
) -> Plot:
    """A line through `points` (sorted by x), optional measured `marks` and a horizontal `threshold`; the y axis
    runs from `bottom_value` (0 unless told) to `top_value` (a round number above everything unless told)."""
    everything = [*points, *marks]
    x_max = max((x for x, _ in everything), default=1) or 1
    y_max = top_value or _nice_ceiling(max([*(value for _, value in everything), threshold or 0], default=0))
    y = _y_scale(y_max, bottom_value)
    plot = Plot(title=title, x_label=x_label, y_label=y_label, note=note)

    def x(value: float) -> float:
        return round(plot.left + min(max(value, 0), x_max) / x_max * (plot.right - plot.left), 2)

    ordered = sorted(points)
    plot.polyline = " ".join(f"{x(px)},{y(py)}" for px, py in ordered)
    plot.points = [(x(px), y(py), _format(py)) for px, py in ordered]
    plot.marks = [(x(mx), y(my), _format(my)) for mx, my in marks]
    plot.x_ticks = [Tick(x(x_max * share), _format(x_max * share)) for share in (0, 0.25, 0.5, 0.75, 1)]
    plot.y_ticks = _y_ticks(y_max, y, bottom_value)
    if threshold is not None:
        plot.threshold_y = y(threshold)
        plot.threshold_label = threshold_label
    return plot


def scatter_plot(
    title: str,
    x_label: str,
    y_label: str,
    points: list[tuple[float, float, str]],
    *,
    threshold: float | None = None,
    threshold_label: str = "",
    note: str = "",
) -> Plot:
    """One dot per (x, y, name), its title naming it with both values, and a horizontal `threshold`."""
    plot = line_plot(
        title,
        x_label,
        y_label,
        [],
        marks=[(px, py) for px, py, _name in points],
        threshold=threshold,
        threshold_label=threshold_label,
        note=note,
    )
    plot.dots = [
        (mx, my, f"{name}: {x_label} {_format(px)}, {y_label} {_format(py)}")
        for (mx, my, _shown), (px, py, name) in zip(plot.marks, points, strict=True)
    ]
    plot.marks = []
    return plot
