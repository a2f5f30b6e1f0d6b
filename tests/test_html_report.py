"""``harness report``: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path

import pytest
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
from harness.datasets.dataset_registry import get_dataset_record

# Run in a copy of the page: records load errors and whether every embedded chart decoded.
CHECK_SCRIPT = """
window.__errors = [];
window.addEventListener("error", (e) => window.__errors.push(String(e.message || (e.target && e.target.src) || e)), true);
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const report = {
    images: images.length,
    decoded: images.filter((img) => img.complete && img.naturalWidth > 0).length,
    tables: document.querySelectorAll("table.results").length,
    errors: window.__errors,
  };
  const pre = document.createElement("pre");
  pre.id = "browser-check";
  pre.textContent = JSON.stringify(report);
  document.body.appendChild(pre);
});
"""


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    data = beir_mirror / "scifact"  # the provenance names it, so the page can show judgments
    make_result(
        root,
        "scifact",
        "base-model",
        synthetic_run(qrels, every_other(qrels, 0), 10),
        qrels,
        fingerprint,
        root=data,
    )
    make_result(root, "scifact", "finetuned-model", synthetic_run(qrels), qrels, fingerprint, root=data)
    # One folder that must be reported as skipped, on the page too.
    broken = make_result(root, "scifact", "broken-model", synthetic_run(qrels), qrels, fingerprint)
    (broken / "metrics.json").write_text("{ not json")
    return root


@pytest.fixture(scope="module")
def report_page(results_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("report") / "report.html"
    code = main(
        [
            "report",
            str(results_dir),
            "--baseline",
            "base-model",
            "--output",
            str(output),
            "--title",
            "Fine-tuning check",
        ]
    )
    assert code == 0
    return output


def test_page_is_self_contained_and_shows_tables_charts_and_provenance(report_page: Path, results_dir: Path):
    page = report_page.read_text(encoding="utf-8")
    # Nothing is fetched: every src/href is inline data or an in-page anchor.
    references = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert references and all(ref.startswith(("data:image/png;base64,", "#")) for ref in references)
    # The one script (table sorting) is inline; a Content-Security-Policy forbids every request and allows
    # no inline code but the page's own style sheet and script, each by the sha256 of its text as written.
    assert "<link" not in page and re.findall(r"<script[^>]*>", page) == ["<script>"]
    assert "default-src 'none'" in page and "unsafe-inline" not in page
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", page, re.S)
    for directive, text in (("script-src", script), ("style-src", style)):
        digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
        assert f"{directive} 'sha256-{digest}';" in policy, policy
    assert page.count('<img class="chart"') == 2
    assert '<table class="results sortable" id="table-ndcg@10">' in page and 'id="table-recall@100"' in page
    assert '<td class="num best" data-sort="1.0">1.0000 <span class="mark better"' in page
    # Every cell has its bootstrap interval (the ideal run's is a point); the buried base is not tied with the best.
    assert '<span class="ci">[1.0000, 1.0000]</span>' in page and "seed 42" in page
    assert page.count('class="tied"') == 0 and "statistically tied with the best of the row" in page
    assert "significantly better / worse than base-model" in page
    # Every run that is in the tables shows its provenance; the broken folder is listed as skipped.
    for model in ("base-model", "finetuned-model"):
        assert html.escape(str(results_dir / "scifact" / model)) in page
    assert "Skipped (not in any table or average)" in page and "broken-model" in page
    # The provenance block carries the data checksums (here the registry's pin of the scifact corpus).
    assert "data fingerprint" in page and get_dataset_record("scifact").files["corpus.jsonl"] in page


def test_page_opens_in_headless_chromium_without_errors(report_page: Path, tmp_path: Path):
    page = report_page.read_text(encoding="utf-8")
    dom = dump_dom(with_test_script(page, CHECK_SCRIPT, at="<title>"), tmp_path)
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', dom, re.S)
    assert found, f"the page did not finish loading: {dom[:500]}"
    report = json.loads(html.unescape(found.group(1)))
    assert report == {"images": 2, "decoded": 2, "tables": 2, "errors": []}
    # The rendered DOM shows the table with the best cell and the significance mark.
    assert '<td class="num best" data-sort="1.0">1.0000 <span class="mark better"' in dom
    assert "Fine-tuning check" in dom


# Injected into a copy of the page: after load, clicks headers of the per-query table like a reader would,
# and records what the DOM shows, every resource the page fetched and any policy violation.
SORT_CHECK_SCRIPT = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.blockedURI));
window.addEventListener("load", () => {
  const table = document.querySelector("table.per-query");
  const headers = table.tHead.rows[0].cells;
  const column = (index) => Array.from(table.tBodies[0].rows).map((row) => row.cells[index].textContent.trim());
  const before = column(0);
  headers[0].click();
  const byQuery = column(0);
  headers[3].click();
  const byChangeUp = column(0);
  const stateUp = headers[3].getAttribute("aria-sort");
  headers[3].click();
  const byChangeDown = column(0);
  const report = {
    pairs: document.querySelectorAll("section.pair").length,
    points: document.querySelectorAll("svg.scatter circle").length,
    wins: document.querySelector("section.pair .wins").textContent,
    ties: document.querySelector("section.pair .ties").textContent,
    losses: document.querySelector("section.pair .losses").textContent,
    moved: document.querySelectorAll("table.moved tbody tr").length,
    before, byQuery, byChangeUp, byChangeDown, stateUp,
    stateDown: headers[3].getAttribute("aria-sort"),
    resources: performance.getEntriesByType("resource").map((entry) => entry.name),
    violations: window.__violations,
  };
  const pre = document.createElement("pre");
  pre.id = "sort-check";
  pre.textContent = JSON.stringify(report);
  document.body.appendChild(pre);
});
"""


def test_per_query_section_renders_sorts_on_click_and_fetches_nothing(
    report_page: Path, results_dir: Path, beir_mirror: Path, tmp_path: Path
):
    page = report_page.read_text(encoding="utf-8")
    dom = dump_dom(with_test_script(page, SORT_CHECK_SCRIPT, at="</body>"), tmp_path)
    found = re.search(r'<pre id="sort-check">(.*?)</pre>', dom, re.S)
    assert found, f"the page did not finish loading: {dom[:500]}"
    report = json.loads(html.unescape(found.group(1)))

    # The fixture: the base model buries every other query (nDCG@10 0), the fine-tuned one ranks all ideally.
    qrels = real_qrels(beir_mirror, "scifact")
    buried = every_other(qrels, 0)
    assert report["pairs"] == 1 and report["points"] == len(qrels)
    assert (report["wins"], report["ties"], report["losses"]) == (
        str(len(buried)),
        str(len(qrels) - len(buried)),
        "0",
    )
    assert report["moved"] == 5
    # Clicking "query" sorts numerically; clicking "change" sorts by the change, stably, then reverses it.
    change = {qid: 1.0 if qid in buried else 0.0 for qid in qrels}
    assert report["before"] == sorted(qrels)
    assert report["byQuery"] == sorted(qrels, key=float)
    assert report["byChangeUp"] == sorted(report["byQuery"], key=change.get)
    assert report["byChangeDown"] == sorted(report["byChangeUp"], key=change.get, reverse=True)
    assert (report["stateUp"], report["stateDown"]) == ("ascending", "descending")
    # Nothing fetched beyond the page itself and its inline data: no network request of any kind.
    assert [url for url in report["resources"] if not url.startswith("data:")] == []
    assert report["violations"] == []
    # The moved queries carry their judged documents, read from the dataset folder the provenance names.
    first_moved = sorted(buried)[0]
    judged_doc = next(iter(qrels[first_moved]))
    assert f"<code>{judged_doc}</code>" in dom and "not judged" in dom
