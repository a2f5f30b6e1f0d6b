"""Result folders for the table / report / reproduce tests, built from synthetic runs over real qrels.

The runs are constructed so their scores are known without running any harness code: a run that ranks a
query's judged documents first (by grade) has nDCG@10 = 1 for that query; one that puts ten unjudged
documents in front of them has nDCG@10 = 0; one that puts a hundred in front also has Recall@100 = 0.
The metrics are computed by the real ``harness.evaluation.metrics.evaluate`` and written with the real
``harness.evaluation.trec.write_run`` and ``harness.results.result_store.write_result``.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.fileio import file_digest
from harness.datasets.qrels import read_qrels
from harness.evaluation.trec import write_run
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
) -> Path:
    """Evaluate ``run`` with the real evaluator and write a complete result folder; returns it."""
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
        write_run_file=lambda path: write_run(path, run, model),
    )
