"""Grouped bar charts: one per metric, datasets along x, one bar per model, 95% per-query bootstrap CIs.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no display needed), so charts render
the same on a headless CI machine as on a laptop.
"""

from __future__ import annotations

import io
import textwrap
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.fileio import atomic_write
from harness.evaluation.metrics import pretty_metric
from harness.evaluation.significance import bootstrap_interval
from harness.reports.tables import MetricTable, TableSet
from harness.results.result_store import StoredResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend

CONFIDENCE = 0.95
# Error bars are drawn, not tested: fewer resamples than a test keeps a many-bar report quick.
N_RESAMPLES = 2000
SEED = 42


def series_colours(n_models: int) -> list[str]:
    """The colour of each model's bars, as hex (matplotlib's default cycle): the page's text legend uses
    the same ones."""
    from matplotlib.colors import to_hex

    return [to_hex(f"C{index % 10}") for index in range(n_models)]


def _error_bar(values: list[float]) -> tuple[float, float] | None:
    """The bootstrap interval of the mean, or None when there are too few values to draw one."""
    if len(values) < 2:
        return None
    return bootstrap_interval(values, confidence=CONFIDENCE, n_resamples=N_RESAMPLES, seed=SEED)


# Labels are dataset and model names, shown as written: a "$" in one is a dollar sign, not mathtext (which
# would fail on "$\frac$" or silently typeset "$x$"), and no TeX is ever run on them.
_LITERAL_TEXT = {"text.parse_math": False, "text.usetex": False}


# A legend line holds this many characters: a long checkpoint path wraps instead of running off the chart.
LEGEND_WRAP = 40


@contextmanager
def _literal_text() -> Iterator[None]:
    """Every label literal text, and no warning per glyph a font lacks.

    Tick labels are made while the figure is drawn, so the whole drawing runs under the setting. A name in
    a script the font lacks (CJK, emoji) is drawn with boxes: the page's tables show it as written.
    """
    import matplotlib

    with matplotlib.rc_context(_LITERAL_TEXT), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        yield


def draw_metric_chart(table: MetricTable, results: dict[tuple[str, str], StoredResult]) -> bytes:
    """PNG bytes of the grouped bar chart for one metric table (every label literal text)."""
    with _literal_text():
        figure = _draw(table, results)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    return buffer.getvalue()


def chart_figure(table: MetricTable, results: dict[tuple[str, str], StoredResult]) -> Figure:
    """The chart as a laid-out matplotlib figure (legend placed), as :func:`draw_metric_chart` saves it."""
    with _literal_text():
        return _draw(table, results)


def _fits(legend: Legend, figure: Figure) -> bool:
    box = legend.get_window_extent(figure.canvas.get_renderer())
    return box.x0 >= 0 and box.y0 >= 0 and box.x1 <= figure.bbox.x1 and box.y1 <= figure.bbox.y1


def _wrapped(label: str) -> str:
    """``label`` in lines of at most :data:`LEGEND_WRAP` characters, broken after spaces and hyphens where it
    can be; nothing dropped or replaced, so the lines joined are the name exactly."""
    lines = textwrap.wrap(
        label, LEGEND_WRAP, drop_whitespace=False, expand_tabs=False, replace_whitespace=False
    )
    return "\n".join(lines) or " "


def _place_legend(figure: Figure, handles: list[Any], labels: list[str]) -> Legend:
    """The legend under the axes, every name in full (wrapped at :data:`LEGEND_WRAP` characters): fewer
    columns until it fits the figure's width, and with one column too wide, a wider figure."""
    wrapped = [_wrapped(label) for label in labels]
    columns = min(len(labels), 3)
    while True:
        legend = figure.legend(
            handles, wrapped, loc="outside lower center", ncol=columns, fontsize=8, frameon=False
        )
        figure.canvas.draw()  # the constrained layout makes room for the legend below the axes
        if _fits(legend, figure):
            return legend
        width = legend.get_window_extent(figure.canvas.get_renderer()).width / figure.dpi
        legend.remove()
        if columns > 1:
            columns -= 1
        else:
            figure.set_figwidth(width + 0.5)


def _draw(table: MetricTable, results: dict[tuple[str, str], StoredResult]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [row for row in table.rows if any(cell.value is not None for cell in row.cells.values())]
    n_models = len(table.columns)
    # A group spans at most 80% of a dataset's slot; a lone model gets a bar, not a wall.
    group = min(0.8, 0.25 * max(n_models, 1))
    width = group / max(n_models, 1)
    figure = Figure(
        figsize=(max(6.0, 1.2 + len(rows) * (0.5 + 0.45 * n_models)), 4.6), dpi=150, layout="constrained"
    )
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = np.arange(len(rows))
    colours = series_colours(n_models)
    top = 0.0
    labels: list[tuple[object, list[float]]] = []
    for index, slug in enumerate(table.columns):
        means, lower, upper = [], [], []
        for row in rows:
            cell = row.cells[slug]
            value = cell.value
            means.append(np.nan if value is None else value)
            interval = None
            result = results.get((row.key, slug))
            if value is not None and result is not None:
                interval = _error_bar(list(result.per_query_values(table.metric).values()))
            if interval is None or value is None:
                lower.append(0.0)
                upper.append(0.0)
            else:
                lower.append(max(0.0, value - interval[0]))
                upper.append(max(0.0, interval[1] - value))
                top = max(top, interval[1])
            top = max(top, 0.0 if value is None else value)
        offsets = positions - group / 2 + width * (index + 0.5)
        bars = axes.bar(
            offsets,
            means,
            width * 0.92,
            yerr=[lower, upper],
            capsize=3,
            color=colours[index],
            error_kw={"elinewidth": 1, "ecolor": "#333333"},
        )
        labels.append((bars, means))
    ceiling = min(1.05, max(0.1, top * 1.12))
    for bars, means in labels:
        for bar, value in zip(bars, means, strict=True):
            centre = bar.get_x() + bar.get_width() / 2
            if np.isnan(value):
                # No result for this model here: say so rather than leave an unexplained gap.
                axes.annotate(
                    "n/a", (centre, 0.01), ha="center", va="bottom", rotation=90, fontsize=7, color="#888888"
                )
                continue
            inside = value > 0.15 * ceiling
            axes.annotate(
                f"{value:.3f}",
                (centre, 0.01 if inside else value + 0.01),
                ha="center",
                va="bottom",
                rotation=90,
                fontsize=7,
                color="white" if inside else "#333333",
            )
    axes.set_xticks(
        positions,
        [row.key for row in rows],
        rotation=20 if len(rows) > 4 else 0,
        ha="right" if len(rows) > 4 else "center",
    )
    axes.set_ylabel(pretty_metric(table.metric))
    axes.set_xlim(-0.6, len(rows) - 0.4)  # fixed slots, so a single bar is not stretched to the frame
    axes.set_ylim(0, ceiling)
    axes.set_title(
        f"{pretty_metric(table.metric)} per dataset (error bars: 95% bootstrap CI over queries)", fontsize=10
    )
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    handles = [bars for bars, _ in labels]
    _place_legend(figure, handles, [table.labels[slug] for slug in table.columns])
    return figure


def render_charts(tableset: TableSet) -> dict[str, bytes]:
    """metric -> PNG bytes, one chart per table."""
    return {table.metric: draw_metric_chart(table, tableset.sources) for table in tableset.tables}


def chart_filename(metric: str) -> str:
    return "chart-" + metric.replace("@", "_at_").replace("/", "_") + ".png"


def write_charts(tableset: TableSet, directory: str | Path) -> list[Path]:
    """Write one PNG per metric into ``directory`` (atomically); returns the paths."""
    directory = Path(directory)
    paths = []
    for metric, png in render_charts(tableset).items():
        path = directory / chart_filename(metric)
        with atomic_write(path, "wb") as handle:
            handle.write(png)
        paths.append(path)
    return paths
