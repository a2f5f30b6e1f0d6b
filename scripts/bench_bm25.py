"""Benchmark line for BM25: index build time, cached-index load time and query throughput.

    .venv/bin/python scripts/bench_bm25.py [--dataset-dir ../shared/data/beir/scifact] [--model bm25]

Prints one JSON object. ``measure_bm25`` is the function the benchmark script calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from harness.api.building_blocks import BM25Retriever, library_versions, load_dataset, resolve_model


def measure_bm25(dataset_dir: Path, model: str = "bm25", split: str = "test", top_k: int = 1000) -> dict:
    """Build the index in an empty cache, then load it again, timing index and query stages separately."""
    dataset = load_dataset(dataset_dir, split)
    record = resolve_model(model).record
    dataset.fingerprint()  # checksum outside the timed stages, as the pipeline has it before retrieval
    with tempfile.TemporaryDirectory(prefix="bench-bm25-") as cache_dir:
        cold = BM25Retriever(record, cache_dir=Path(cache_dir), progress=False)
        started = time.perf_counter()
        cold.retrieve(dataset, top_k, drop_identical_ids=dataset.drop_identical_ids)
        cold_total = time.perf_counter() - started
        warm = BM25Retriever(record, cache_dir=Path(cache_dir), progress=False)
        warm.retrieve(dataset, top_k, drop_identical_ids=dataset.drop_identical_ids)
    queries = len(dataset.queries)
    query_seconds = min(cold.timings["query_seconds"], warm.timings["query_seconds"])
    return {
        "measure": "bm25",
        "model": record.name,
        "dataset": dataset.name,
        "split": dataset.split,
        "docs": dataset.num_docs,
        "queries": queries,
        "top_k": top_k,
        "index_build_seconds": round(cold.timings["index_seconds"], 3),
        "index_load_seconds": round(warm.timings["index_seconds"], 3),
        "docs_per_second": round(dataset.num_docs / cold.timings["index_seconds"], 1),
        "query_seconds": round(query_seconds, 3),
        "queries_per_second": round(queries / query_seconds, 1),
        "cold_total_seconds": round(cold_total, 3),
        "versions": library_versions(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset-dir",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact",
        help="a BEIR folder with a corpus (default: the shared scifact)",
    )
    parser.add_argument("--model", default="bm25", help="a registry record of kind bm25")
    parser.add_argument("--split", default="test")
    parser.add_argument("--top-k", type=int, default=1000)
    args = parser.parse_args(argv)
    print(json.dumps(measure_bm25(args.dataset_dir, args.model, args.split, args.top_k)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
