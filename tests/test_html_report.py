"""``harness report``: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.cli import main
from harness.datasets.registry import get_dataset_record

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Injected into a copy of the page: records load errors and whether every embedded chart decoded.
CHECK_SCRIPT = """<script>
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
</script>"""


def chromium() -> str:
    """The headless browser; its absence is a broken test environment, so the test fails rather than skips."""
    candidates = [os.environ.get("HARNESS_CHROMIUM", "")] + [shutil.which(name) or "" for name in BROWSERS]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("headless Chromium is needed: `apt-get install -y chromium` (Debian) or set HARNESS_CHROMIUM")


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    make_result(
        root, "scifact", "base-model", synthetic_run(qrels, every_other(qrels, 0), 10), qrels, fingerprint
    )
    make_result(root, "scifact", "finetuned-model", synthetic_run(qrels), qrels, fingerprint)
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
    assert "<link" not in page and "<script" not in page
    assert page.count('<img class="chart"') == 2
    assert '<table class="results" id="table-ndcg@10">' in page and 'id="table-recall@100"' in page
    assert '<td class="num best">1.0000 <span class="mark better"' in page
    assert "significantly better / worse than base-model" in page
    # Every run that is in the tables shows its provenance; the broken folder is listed as skipped.
    for model in ("base-model", "finetuned-model"):
        assert html.escape(str(results_dir / "scifact" / model)) in page
    assert "Skipped (not in any table or average)" in page and "broken-model" in page
    # The provenance block carries the data checksums (here the registry's pin of the scifact corpus).
    assert "data fingerprint" in page and get_dataset_record("scifact").files["corpus.jsonl"] in page


def test_page_opens_in_headless_chromium_without_errors(report_page: Path, tmp_path: Path):
    browser = chromium()
    checked = tmp_path / "checked.html"
    page = report_page.read_text(encoding="utf-8")
    checked.write_text(
        page.replace('<meta charset="utf-8">', '<meta charset="utf-8">' + CHECK_SCRIPT, 1), encoding="utf-8"
    )
    completed = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            checked.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    dom = completed.stdout
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', dom, re.S)
    assert found, f"the page did not finish loading: {dom[:500]}"
    report = json.loads(html.unescape(found.group(1)))
    assert report == {"images": 2, "decoded": 2, "tables": 2, "errors": []}
    # The rendered DOM shows the table with the best cell and the significance mark.
    assert '<td class="num best">1.0000 <span class="mark better"' in dom
    assert "Fine-tuning check" in dom
