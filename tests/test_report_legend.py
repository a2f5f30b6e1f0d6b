"""The HTML report with five long system names, in headless Chromium: every name visible in the chart's
legend, a page that renders, and per-query views that show query text and document titles."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import (
    chromium,
    dump_dom,
    every_other,
    make_result,
    real_fingerprint,
    real_qrels,
    synthetic_run,
    with_test_script,
)

from harness.cli import main
from harness.datasets.beir import iter_corpus, load_queries

LONG_NAMES = [
    f"minilm-l6-finetuned-on-scifact-train-pairs-lr-2e-05-warmup-0.1-epoch-{i}" for i in range(1, 6)
]

# Run in a copy of the page after it loaded: each legend entry's text and whether it lies inside the page's
# width with a real size (not clipped, not collapsed).
LEGEND_CHECK = """
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const entries = Array.from(document.querySelectorAll("ul.chart-legend li")).map((li) => {
    const name = li.querySelector(".system");
    // Every line box of the name (it may wrap) has a size and lies inside the page's width.
    const boxes = Array.from(name.getClientRects());
    return {
      text: name.textContent,
      visible: boxes.length > 0 && boxes.every((box) => box.width > 0 && box.height > 0 && box.left >= 0
        && box.right <= width),
    };
  });
  const pre = document.createElement("pre");
  pre.id = "legend-check";
  pre.textContent = JSON.stringify({width, entries});
  document.body.appendChild(pre);
});
"""


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    data = beir_mirror / "scifact"  # named in the provenance: the page reads query texts and titles there
    pushed = sorted(every_other(qrels, 0))
    make_result(root, "scifact", "base", synthetic_run(qrels, set(pushed), 10), qrels, fingerprint, root=data)
    for index, name in enumerate(LONG_NAMES):
        run = synthetic_run(qrels, set(pushed[30 * index :]), 10)
        make_result(root, "scifact", name, run, qrels, fingerprint, root=data)
    output = tmp_path_factory.mktemp("page") / "report.html"
    args = ["report", str(root), "--baseline", "base", "--metrics", "ndcg@10", "--show", "delta,p"]
    assert main([*args, "--output", str(output)]) == 0
    return output


@pytest.mark.slow
def test_every_long_name_is_visible_in_the_chart_legend(page: Path, tmp_path: Path) -> None:
    dom = dump_dom(with_test_script(page.read_text(encoding="utf-8"), LEGEND_CHECK, at="</body>"), tmp_path)
    found = re.search(r'<pre id="legend-check">(.*?)</pre>', dom, re.S)
    assert found, f"the page did not finish loading: {dom[:500]}"
    report = json.loads(html.unescape(found.group(1)))
    assert [entry["text"] for entry in report["entries"]] == ["base", *LONG_NAMES]
    assert all(entry["visible"] for entry in report["entries"]), report
    # The difference and p from --show delta,p are in the rendered table too.
    assert re.search(r'<span class="shown">\(\+0\.\d{4}, p[<=][01]\.\d{3}\)</span>', dom)


@pytest.mark.slow
def test_screenshot_of_the_page_is_not_blank(page: Path, tmp_path: Path) -> None:
    import matplotlib.image

    shot = tmp_path / "page.png"
    completed = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,1600",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0 and shot.is_file(), completed.stderr[-2000:]
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).astype(np.uint8)
    assert pixels.shape[:2] == (1600, 1280)
    # Text, tables and the chart's six bar colours: far from a blank (one-colour) page.
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 100
    assert (pixels.min(axis=2) < 128).mean() > 0.01  # some dark ink: text was drawn


def test_per_query_view_shows_query_text_and_titles(page: Path, beir_mirror: Path) -> None:
    text = page.read_text(encoding="utf-8")
    queries = load_queries(beir_mirror / "scifact" / "queries.jsonl")
    moved = re.findall(r'<table class="queries moved sortable">.*?</table>', text, re.S)[0]
    first_qid = re.search(r"<tbody><tr><th>([^<]+)<div", moved).group(1)
    assert f'<div class="query-text">{html.escape(queries[first_qid])}</div>' in moved
    titles = dict(re.findall(r'<code>([^<]+)</code> <span class="doc-title">([^<]+)</span>', moved))
    assert titles
    corpus = {
        doc.id: doc.title for doc in iter_corpus(beir_mirror / "scifact" / "corpus.jsonl") if doc.id in titles
    }
    assert {docid: html.unescape(title) for docid, title in titles.items()} == corpus
    assert "text-note" not in text


def test_per_query_view_without_the_dataset_shows_ids_and_says_why(tmp_path: Path, beir_mirror: Path) -> None:
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    gone = tmp_path / "moved-away" / "scifact"
    make_result(
        tmp_path / "r", "scifact", "base", synthetic_run(qrels, set(qrels), 10), qrels, fingerprint, root=gone
    )
    make_result(tmp_path / "r", "scifact", "tuned", synthetic_run(qrels), qrels, fingerprint, root=gone)
    output = tmp_path / "report.html"
    assert (
        main(
            [
                "report",
                str(tmp_path / "r"),
                "--baseline",
                "base",
                "--metrics",
                "ndcg@10",
                "--output",
                str(output),
            ]
        )
        == 0
    )
    text = output.read_text(encoding="utf-8")
    assert f"Note: scifact: the dataset folder {gone} is not on this machine: ids only." in html.unescape(
        text
    )
    assert 'class="query-text"' not in text and 'class="doc-title"' not in text
    assert '<section class="pair"' in text
