"""The metric against the training step: interval band, baseline line, checkpoints tied with the best.

Drawn from a checkpoint tracking record (``tracking.json``, written by the training evaluator and by
``harness watch``: ``metric``, ``baseline`` and ``points`` with ``step``, ``mean``, ``ci_low``, ``ci_high``,
``tied_with_best``), with matplotlib's object API on the Agg canvas as :mod:`harness.reports.charts` draws.
:func:`training_section_html` is the same picture as an HTML section with the PNG inline.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from harness.core.fileio import atomic_write, read_json_object
from harness.evaluation.metrics import pretty_metric

TRACKING_FILE = "tracking.json"
CHART_FILE = "training.png"


def _drawn(tracking: Mapping[str, Any]):
    from matplotlib.figure import Figure

    points = sorted(tracking.get("points") or [], key=lambda point: point["step"])
    metric = pretty_metric(str(tracking.get("metric", "")))
    figure = Figure(figsize=(7, 4), layout="constrained")
    axes = figure.add_subplot()
    steps = [point["step"] for point in points]
    axes.fill_between(
        steps,
        [point["ci_low"] for point in points],
        [point["ci_high"] for point in points],
        alpha=0.25,
        color="C0",
        label="95% bootstrap interval",
    )
    axes.plot(steps, [point["mean"] for point in points], "-o", color="C0", markersize=4, label=metric)
    tied = [point for point in points if point.get("tied_with_best")]
    axes.plot(
        [point["step"] for point in tied],
        [point["mean"] for point in tied],
        "*",
        color="C3",
        markersize=12,
        linestyle="none",
        label="tied with the best",
    )
    baseline = tracking.get("baseline") or {}
    if baseline.get("mean") is not None:
        axes.axhline(
            baseline["mean"], color="0.4", linestyle="--", label=f"baseline ({baseline.get('label')})"
        )
    axes.set_xlabel("training step")
    axes.set_ylabel(metric)
    axes.set_title(str(tracking.get("title") or f"{metric} during training"), fontsize=10)
    axes.legend(fontsize=8, loc="best")
    axes.grid(alpha=0.3)
    return figure


def training_chart_png(tracking: Mapping[str, Any]) -> bytes:
    """PNG bytes of the training curve (every label literal text, as the report's charts)."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        buffer = io.BytesIO()
        _drawn(tracking).savefig(buffer, format="png")
    return buffer.getvalue()


def write_training_chart(tracking: Mapping[str, Any], path: Path) -> Path:
    """Write the PNG atomically to ``path``."""
    with atomic_write(path, "wb", encoding=None) as handle:
        handle.write(training_chart_png(tracking))
    return path


def training_section_html(tracking: Mapping[str, Any]) -> str:
    """The curve as an HTML section: title, inline PNG and the checkpoints tied with the best."""
    encoded = base64.b64encode(training_chart_png(tracking)).decode("ascii")
    title = str(tracking.get("title") or "training")
    tied = ", ".join(str(label) for label in tracking.get("tied_with_best") or []) or "-"
    alt = f"{pretty_metric(str(tracking.get('metric', '')))} against training step with 95% intervals"
    return "\n".join(
        [
            f"<h3>{escape(title)}</h3>",
            f'<p><img class="chart" alt="{escape(alt)}" src="data:image/png;base64,{encoded}"></p>',
            f'<p class="caption">Best: {escape(str(tracking.get("best")))}; tied with the best: {escape(tied)}</p>',
        ]
    )


def read_training_tracks(results_dir: Path) -> list[dict[str, Any]]:
    """Every tracking record below ``results_dir`` (``*/_training-*/tracking.json``), in path order."""
    return [
        read_json_object(path) for path in sorted(Path(results_dir).glob(f"*/_training-*/{TRACKING_FILE}"))
    ]
