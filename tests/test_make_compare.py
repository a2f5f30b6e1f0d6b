"""`make compare`: every model on the dataset, then a table with the first model as the significance baseline."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT


# Slow, and it runs `make`, which (re)installs the package from this checkout: keep it out of quick runs.
@pytest.mark.slow
def test_make_compare_runs_pairs_and_marks_against_first_model(tmp_path: Path, beir_mirror: Path) -> None:
    results = tmp_path / "results"
    command = [
        "make",
        "--no-print-directory",
        "-C",
        str(REPO_ROOT),
        "compare",
        "MODELS=bm25 bm25-lucene",
        "DATASET=scifact",
        f"RESULTS={results}",
        f"HARNESS_BEIR_MIRROR={beir_mirror}",
        f"ARGS=--data-dir {tmp_path / 'data'} --cache-dir {tmp_path / 'cache'} --no-progress",
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    out = completed.stdout
    assert (results / "scifact" / "bm25" / "run.trec").is_file()
    assert (results / "scifact" / "bm25-lucene" / "run.trec").is_file()
    # The table: both models as columns, bm25 named as the baseline in the legend.
    header = next(line for line in out.splitlines() if line.startswith("| dataset |"))
    assert "bm25" in header and "bm25-lucene" in header
    assert "baseline" in out.lower() and "bm25" in out
    scifact_rows = [line for line in out.splitlines() if line.startswith("| scifact |")]
    assert len(scifact_rows) >= 2  # one per metric table (nDCG@10, Recall@100)
    assert "0.6874" in scifact_rows[0]
