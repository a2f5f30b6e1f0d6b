"""Grouped bar charts: one per metric, datasets along x, one bar per model, 95% per-query bootstrap CIs.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no display needed), so charts render
the same on a headless CI machine as on a laptop.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np

from harness.core.fileio import atomic_write
from harness.evaluation.metrics import pretty_metric
from harness.evaluation.significance import bootstrap_interval
from harness.reports.tables import MetricTable, TableSet
from harness.results.result_store import StoredResult

CONFIDENCE = 0.95
# Error bars are drawn, not tested: fewer resamples than a test keeps a many-bar report quick.
N_RESAMPLES = 2000
SEED = 42


def _error_bar(values: list[float]) -> tuple[float, float] | None:
    """The bootstrap interval of the mean, or None when there are too few values to draw one."""
    if len(values) < 2:
        return None
    return bootstrap_interval(values, confidence=CONFIDENCE, n_resamples=N_RESAMPLES, seed=SEED)


# Labels are dataset and model names, shown as written: a "$" in one is a dollar sign, not mathtext (which
# would fail on "$\frac$" or silently typeset "$x$"), and no TeX is ever run on them.
_LITERAL_TEXT = {"text.parse_math": False, "text.usetex": False}


def draw_metric_chart(table: MetricTable, results: dict[tuple[str, str], StoredResult]) -> bytes:
    """PNG bytes of the grouped bar chart for one metric table (every label literal text)."""
    import matplotlib

    # Tick labels are made while the figure is drawn, so the whole drawing runs under the setting. A name
    # in a script the font lacks (CJK, emoji) is drawn with boxes, without a warning per glyph: the page's
    # tables show it as written.
    with matplotlib.rc_context(_LITERAL_TEXT), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        return _draw(table, results)


def _draw(table: MetricTable, results: dict[tuple[str, str], StoredResult]) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [row for row in table.rows if any(cell.value is not None for cell in row.cells.values())]
    n_models = len(table.columns)
    # A group spans at most 80% of a dataset's slot; a lone model gets a bar, not a wall.
    group = min(0.8, 0.25 * max(n_models, 1))
    width = group / max(n_models, 1)
    figure = Figure(figsize=(max(6.0, 1.2 + len(rows) * (0.5 + 0.45 * n_models)), 4.6), dpi=150)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = np.arange(len(rows))
    colours = [f"C{i % 10}" for i in range(n_models)]
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
            label=table.labels[slug],
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
    axes.legend(
        fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(n_models, 3), frameon=False
    )
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


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
