"""Tables ready to paste: difference and p beside each value, short captions, no lone average, legends that fit."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.api.view_commands import table
from harness.cli import main
from harness.reports.charts import chart_figure
from harness.reports.formats import p_text

# Five systems named as fine-tuning runs name them: long, alike, and only told apart at their ends.
LONG_NAMES = [
    f"minilm-l6-finetuned-on-scifact-train-pairs-lr-2e-05-warmup-0.1-epoch-{i}" for i in range(1, 6)
]


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    """scifact only: a base that buries half the queries, then five checkpoints fixing more and more of them."""
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    pushed = sorted(every_other(qrels, 0))
    make_result(root, "scifact", "base", synthetic_run(qrels, set(pushed), 10), qrels, fingerprint)
    for index, name in enumerate(LONG_NAMES):
        fixed = set(pushed[: 2 * index + 1]) if index < 4 else set(pushed)  # the last fixes them all
        make_result(root, "scifact", name, synthetic_run(qrels, set(pushed) - fixed, 10), qrels, fingerprint)
    return root


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["table", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _md_cells(out: str, label: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def _tests(results_dir: Path, capsys) -> dict[str, dict[str, str]]:
    """model -> the CSV's comparison columns for scifact nDCG@10 (the engine's numbers, unrounded)."""
    code, out, _ = _cli(
        capsys, str(results_dir), "--baseline", "base", "--format", "csv", "--metrics", "ndcg@10"
    )
    assert code == 0
    return {row["model"]: row for row in csv.DictReader(io.StringIO(out)) if row["dataset"] == "scifact"}


def test_show_delta_p_puts_the_difference_and_adjusted_p_in_every_tested_cell(
    results_dir: Path, capsys
) -> None:
    tests = _tests(results_dir, capsys)
    code, out, err = _cli(
        capsys, str(results_dir), "--baseline", "base", "--show", "delta,p", "--metrics", "ndcg@10"
    )
    assert code == 0, err
    cells = dict(zip(_md_cells(out, "dataset"), _md_cells(out, "scifact"), strict=True))
    assert re.fullmatch(r"\d\.\d{4}", cells["base"])  # the baseline: its value alone
    for name in LONG_NAMES:
        row = tests[name]
        expected = f"({float(row['difference']):+.4f}, {p_text(float(row['p_value_adjusted']))})"
        assert cells[name].endswith(expected), (name, cells[name])
    # One fixed query of 300 is not significant: no arrow, yet the small difference and its p are there.
    first = cells[LONG_NAMES[0]]
    assert "↑" not in first and float(tests[LONG_NAMES[0]]["p_value_adjusted"]) > 0.05
    assert re.fullmatch(r"\d\.\d{4} \(\+0\.00\d\d, p=[01]\.\d{3}\)", first)
    assert cells[LONG_NAMES[-1]].startswith("**1.0000** ↑ (+0.") and "p<0.001)" in cells[LONG_NAMES[-1]]
    assert "(+difference, p): the value minus base's over the paired queries and the holm-adjusted p" in out
    # Spaces work as commas do, and each part alone shows alone.
    assert (
        _cli(capsys, str(results_dir), "--baseline", "base", "--show", "delta", "p", "--metrics", "ndcg@10")[
            1
        ]
        == out
    )
    code, only_p, _ = _cli(
        capsys, str(results_dir), "--baseline", "base", "--show", "p", "--metrics", "ndcg@10"
    )
    assert re.fullmatch(r"\d\.\d{4} \(p=[01]\.\d{3}\)", _md_cells(only_p, "scifact")[1])


def test_default_cells_keep_todays_look(results_dir: Path, capsys) -> None:
    code, out, err = _cli(capsys, str(results_dir), "--baseline", "base", "--metrics", "ndcg@10")
    assert code == 0, err
    assert all(re.fullmatch(r"(\*\*)?\d\.\d{4}(\*\*)?( [↑↓])?", cell) for cell in _md_cells(out, "scifact"))


def test_show_needs_a_baseline_and_known_parts(results_dir: Path, capsys) -> None:
    code, out, err = _cli(capsys, str(results_dir), "--show", "delta,p")
    assert (
        code == 2 and err == "error: --show delta,p needs --baseline: the differences are from the baseline\n"
    )
    code, out, err = _cli(capsys, str(results_dir), "--baseline", "base", "--show", "delta,ci")
    assert code == 2 and err == "error: --show ci: choose from delta, p (e.g. --show delta,p)\n"


def test_latex_caption_is_one_sentence_and_notes_sit_under_the_table(results_dir: Path, capsys) -> None:
    code, out, err = _cli(
        capsys,
        str(results_dir),
        "--baseline",
        "base",
        "--show",
        "delta,p",
        "--format",
        "latex",
        "--metrics",
        "ndcg@10",
    )
    assert code == 0, err
    (caption,) = re.findall(r"\\caption\{(.*)\}", out)
    assert caption == "nDCG@10 per dataset, against base." and len(caption.split()) < 12
    body = out[out.index(r"\begin{tabular}") : out.index(r"\end{tabular}")]
    assert r"{\scriptsize(+0.0033, $p$=" in body and r"$p<0.001$)}" in body
    notes = out[out.index(r"\end{tabular}") : out.index(r"\end{table}")]
    assert notes.count(r"\begin{minipage}") == 1 and "Pairing:" in notes and "Bold: best in the row" in notes
    assert "Average" not in out  # a single dataset: no average row, no average note


def test_one_dataset_has_no_average_row_anywhere(results_dir: Path, capsys, tmp_path: Path) -> None:
    code, out, _ = _cli(capsys, str(results_dir), "--metrics", "ndcg@10")
    assert code == 0 and "average" not in out.lower()
    page = tmp_path / "report.html"
    assert main(["report", str(results_dir), "--metrics", "ndcg@10", "--output", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert 'class="average' not in text and "average (" not in text
    assert '<p class="caption">nDCG@10 per dataset.</p>' in text and text.count('<div class="notes">') == 1


def test_chart_legend_shows_every_long_name_inside_the_figure(results_dir: Path) -> None:
    tableset = table(results_dir=results_dir, metrics=["ndcg@10"]).tableset
    figure = chart_figure(tableset.tables[0], tableset.sources)
    renderer = figure.canvas.get_renderer()
    (legend,) = figure.legends
    box, frame = legend.get_window_extent(renderer), figure.bbox
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= frame.x1 and box.y1 <= frame.y1
    shown = [text.get_text() for text in legend.get_texts()]
    assert [text.replace("\n", "") for text in shown] == ["base", *LONG_NAMES]  # every name in full
    assert all(len(line) <= 40 for text in shown for line in text.split("\n"))  # wrapped to fit
    # The legend sits below the axes, never over the bars.
    axes_box = figure.axes[0].get_window_extent(renderer)
    assert box.y1 <= axes_box.y0
