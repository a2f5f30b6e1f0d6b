"""Result folders for the table / report / reproduce tests, built from synthetic runs over real qrels.

The runs are constructed so their scores are known without running any harness code: a run that ranks a
query's judged documents first (by grade) has nDCG@10 = 1 for that query; one that puts ten unjudged
documents in front of them has nDCG@10 = 0; one that puts a hundred in front also has Recall@100 = 0.
The metrics are computed by the real ``harness.evaluation.metrics.evaluate`` and written with the real
``harness.evaluation.trec.write_run`` and ``harness.results.result_store.write_result``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.core.fileio import file_digest
from harness.datasets.qrels import read_qrels
from harness.evaluation.trec import write_run
from harness.reports.html import inline_source
from harness.results.result_store import result_dir, write_result

METRICS = ["ndcg@10", "recall@100"]


def real_qrels(mirror: Path, dataset: str) -> dict[str, dict[str, int]]:
    return read_qrels(mirror / dataset / "qrels" / "test.tsv").qrels


def real_fingerprint(
    mirror: Path, dataset: str, files=("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
) -> dict[str, str]:
    root = mirror / dataset
    return {name: file_digest(root / name, "sha256") for name in files if (root / name).is_file()}


def ranking(judged: dict[str, int], unjudged_first: int) -> dict[str, float]:
    """``unjudged_first`` unjudged ids, then the judged ones by grade, as descending scores."""
    docs = [f"filler-{i}" for i in range(unjudged_first)]
    docs += sorted(judged, key=lambda doc: (-judged[doc], doc))
    return {doc: float(len(docs) - rank) for rank, doc in enumerate(docs)}


def synthetic_run(
    qrels: dict[str, dict[str, int]], pushed: set[str] | None = None, depth: int = 0
) -> dict[str, dict[str, float]]:
    """Ideal ranking for every query, except the ``pushed`` queries get ``depth`` unjudged docs first."""
    pushed = pushed or set()
    return {qid: ranking(judged, depth if qid in pushed else 0) for qid, judged in qrels.items()}


def every_other(qrels: dict[str, dict[str, int]], offset: int = 0) -> set[str]:
    """Query ids at even (offset 0) or odd (offset 1) positions of the sorted id list."""
    return {qid for i, qid in enumerate(sorted(qrels)) if i % 2 == offset}


def make_result(
    results_dir: Path,
    dataset: str,
    model: str,
    run: dict[str, dict[str, float]],
    qrels: dict[str, dict[str, int]],
    fingerprint: dict[str, str],
    *,
    split: str = "test",
    created_at: str = "2025-01-01T00:00:00+00:00",
    folder: Path | None = None,
    root: Path | None = None,
    tag: str | None = None,
) -> Path:
    """Evaluate ``run`` with the real evaluator and write a complete result folder; returns it.

    The run file's tag column is ``tag`` (default: the model name, which then must hold no whitespace).
    """
    from harness.evaluation.metrics import evaluate

    evaluation = evaluate(qrels, run, METRICS)
    payload = {
        "dataset": dataset,
        "split": split,
        "model": model,
        "model_slug": model,
        **evaluation.to_json(per_query=True),
    }
    provenance = {
        "harness_version": "test",
        "created_at": created_at,
        "config": {"dataset": {"name": dataset, "split": split, "fingerprint": fingerprint}},
        "dataset": {
            "name": dataset,
            "split": split,
            "fingerprint": fingerprint,
            "counts": {"queries": len(qrels)},
            **({"root": str(root)} if root is not None else {}),
        },
        "model": {"spec": model, "record": model, "identity": {"model_id": model}},
        "environment": {"versions": {"python": "3"}, "device": "cpu"},
        "timings": {"total": 0.1},
    }
    target = folder or result_dir(results_dir, dataset, model)
    return write_result(
        target,
        metrics_payload=payload,
        provenance=provenance,
        write_run_file=lambda path: write_run(path, run, tag or model),
    )


# ---- a real headless browser ---------------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str:
    """The headless browser; its absence is a broken test environment, so the test fails rather than skips."""
    candidates = [os.environ.get("HARNESS_CHROMIUM", "")] + [shutil.which(name) or "" for name in BROWSERS]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("headless Chromium is needed: `apt-get install -y chromium` (Debian) or set HARNESS_CHROMIUM")


def with_test_script(page: str, script: str, *, at: str) -> str:
    """A copy of ``page`` running the test's own ``script`` (inserted before the marker ``at``).

    The page allows only scripts whose sha256 its Content-Security-Policy lists, so the test's script is
    listed there too; nothing else changes, and any other inline script stays blocked.
    """
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert policy, "the page has no Content-Security-Policy"
    widened = policy.group(1).replace("script-src ", f"script-src {inline_source(script)} ", 1)
    page = page.replace(policy.group(1), widened, 1)
    assert at in page
    return page.replace(at, f"<script>{script}</script>{at}", 1)


def dump_dom(page: str, folder: Path) -> str:
    """The DOM of ``page`` after it loaded and its scripts ran, from headless Chromium (``--dump-dom``)."""
    checked = folder / "checked.html"
    checked.write_text(page, encoding="utf-8")
    completed = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={folder / 'profile'}",
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
    return completed.stdout
