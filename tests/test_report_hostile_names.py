"""Dataset and model names are text, never code or markup: ``report`` and ``table --format png`` with hostile
names (issue 33). The page is loaded in headless Chromium: no injected script runs, no injected image loads,
the names read back exactly as written, styles apply, and the tables still sort on a click."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path

import matplotlib.text
import pytest
from fault_snapshot import assert_unchanged, snapshot
from report_fixtures import (
    dump_dom,
    every_other,
    make_result,
    real_fingerprint,
    real_qrels,
    synthetic_run,
    with_test_script,
)

from harness.cli import main

PWN = "document.body.dataset.pwned"
BASELINE = "$x$ \\frac $ 5$"  # mathtext that does not parse, and a lone dollar
SCRIPT_MODEL = f"<script>{PWN}='script'</script>"
IMG_MODEL = f'"><img src=x onerror="{PWN}=\'img\'">'
MODELS = [BASELINE, SCRIPT_MODEL, IMG_MODEL]
DATASETS = [
    "scifact \"quoted\" 'single' & <b>bold</b> 模型 ünïcode 🙂",
    f"$5 or $\\frac$ <svg onload={PWN}='svg'>",
]
TITLE = f"<script>{PWN}='title'</script> $x$ report"

# Run in a copy of the page after it loaded: what the DOM shows, then sorts a per-query table by clicks.
HOSTILE_CHECK_SCRIPT = """
window.addEventListener("load", () => {
  const heads = (table) => Array.from(table.tHead.rows[0].cells).map((cell) => cell.textContent.trim());
  const results = document.querySelector("table.results");
  const table = document.querySelector("table.per-query");
  const headers = table.tHead.rows[0].cells;
  const column = (index) => Array.from(table.tBodies[0].rows).map((row) => row.cells[index].textContent.trim());
  headers[0].click();
  const byQuery = column(0);
  headers[3].click();
  const byChangeUp = column(0);
  const stateUp = headers[3].getAttribute("aria-sort");
  headers[3].click();
  const byChangeDown = column(0);
  const report = {
    pwned: document.body.dataset.pwned || null,
    scripts: document.scripts.length,
    images: Array.from(document.images).map((img) => img.src.slice(0, 22)),
    title: document.title,
    h1: document.querySelector("h1").textContent,
    columns: heads(results),
    rows: Array.from(results.tBodies[0].rows).map((row) => row.cells[0].textContent.trim()),
    cursor: getComputedStyle(results.tHead.rows[0].cells[0]).cursor,
    maxWidth: getComputedStyle(document.body).maxWidth,
    byQuery, byChangeUp, byChangeDown, stateUp,
    stateDown: headers[3].getAttribute("aria-sort"),
    resources: performance.getEntriesByType("resource").map((entry) => entry.name),
  };
  const pre = document.createElement("pre");
  pre.id = "hostile-check";
  pre.textContent = JSON.stringify(report);
  document.body.appendChild(pre);
});
"""


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    """Two datasets x three models, every name hostile; the baseline buries every other query."""
    root = tmp_path_factory.mktemp("hostile-results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    buried = synthetic_run(qrels, every_other(qrels, 0), 10)
    for d, dataset in enumerate(DATASETS):
        for m, model in enumerate(MODELS):
            run = buried if model == BASELINE else synthetic_run(qrels)
            folder = root / f"dataset{d}" / f"model{m}"  # folder names are not what the page shows
            make_result(root, dataset, model, run, qrels, fingerprint, folder=folder, tag=f"m{m}")
    return root


def test_report_of_hostile_names_runs_no_injected_code_and_still_sorts(
    hostile_results: Path, beir_mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    output = tmp_path / "report.html"
    before = snapshot(hostile_results)
    code = main(
        ["report", str(hostile_results), "--baseline", BASELINE, "--output", str(output), "--title", TITLE]
    )
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert_unchanged(before, hostile_results)
    page = output.read_text(encoding="utf-8")
    assert "unsafe-inline" not in page and page.count("<script") == 1  # the page's own, allowed by its hash

    dom = dump_dom(with_test_script(page, HOSTILE_CHECK_SCRIPT, at="</body>"), tmp_path)
    found = re.search(r'<pre id="hostile-check">(.*?)</pre>', dom, re.S)
    assert found, f"the page did not finish loading: {dom[:500]}"
    report = json.loads(html.unescape(found.group(1)))

    # Nothing injected ran or loaded: only the page's script and the test's, only the two embedded charts.
    assert report["pwned"] is None
    assert report["scripts"] == 2
    assert report["images"] == ["data:image/png;base64,"] * 2
    assert [url for url in report["resources"] if not url.startswith("data:")] == []
    # Every name reads back exactly as written (escaped once, not twice, not dropped).
    assert report["title"] == TITLE and report["h1"] == TITLE
    assert report["columns"][:2] == ["dataset", BASELINE]  # the baseline first, then the others
    assert sorted(report["columns"][2:]) == sorted(MODELS[1:])
    assert report["rows"][:2] == sorted(DATASETS) and report["rows"][2] == "average (2)"
    # The style sheet applies under the policy (sortable headers get a pointer; the body its width).
    assert (report["cursor"], report["maxWidth"]) == ("pointer", "1152px")
    # The script still sorts: by query id, then by the change (stable), then reversed.
    qrels = real_qrels(beir_mirror, "scifact")
    change = {qid: 1.0 if qid in every_other(qrels, 0) else 0.0 for qid in qrels}
    assert report["byQuery"] == sorted(qrels, key=float)
    assert report["byChangeUp"] == sorted(report["byQuery"], key=change.get)
    assert report["byChangeDown"] == sorted(report["byChangeUp"], key=change.get, reverse=True)
    assert (report["stateUp"], report["stateDown"]) == ("ascending", "descending")


def test_table_png_draws_hostile_names_as_literal_text(
    hostile_results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    drawn: list[tuple[str, object]] = []
    original = matplotlib.text.Text.draw

    def recording(self, renderer):
        drawn.append(self._preprocess_math(self.get_text()))
        return original(self, renderer)

    monkeypatch.setattr(matplotlib.text.Text, "draw", recording)
    before = snapshot(hostile_results)
    code = main(["table", str(hostile_results), "--format", "png", "--output", str(tmp_path / "charts")])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert sorted(path.name for path in (tmp_path / "charts").iterdir()) == [
        "chart-ndcg_at_10.png",
        "chart-recall_at_100.png",
    ]
    assert_unchanged(before, hostile_results)
    # Every piece of text was drawn as plain text: no mathtext, no TeX; the names exactly as written.
    assert drawn and all(kind is False for _, kind in drawn), [d for d in drawn if d[1] is not False]
    # A long name is drawn wrapped in the legend (lines joined, it is the name exactly).
    texts = {text.replace("\n", "") for text, _ in drawn}
    assert set(MODELS) <= texts and set(DATASETS) <= texts


@pytest.mark.parametrize("fmt", ["md", "csv", "latex", "json"])
def test_text_tables_of_hostile_names_are_written(
    hostile_results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
):
    output = tmp_path / f"table.{fmt}"
    code = main(
        ["table", str(hostile_results), "--format", fmt, "--baseline", BASELINE, "--output", str(output)]
    )
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    text = output.read_text(encoding="utf-8")
    if fmt == "json":
        tables = json.loads(text)["tables"]
        assert set(tables[0]["models"]) == set(MODELS)
        assert {row["dataset"] for row in tables[0]["rows"]} == set(DATASETS)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        assert {row["model"] for row in rows} == set(MODELS)
        assert {row["dataset"] for row in rows} == {*DATASETS, "average"}
    elif fmt == "md":
        assert all(name in text for name in MODELS + DATASETS)
    else:  # LaTeX: every special character escaped, so the document compiles and shows the name
        assert r"\$x\$ \textbackslash{}frac \$ 5\$" in text and r"\& <b>bold</b>" in text
