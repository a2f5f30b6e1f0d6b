"""Benchmark: exact MaxSim over scifact-sized token matrices, the harness's chunked path against the library's.

    .venv/bin/python scripts/bench_maxsim.py [--docs 5183] [--doc-tokens 200] [--dim 128]
        [--queries 300] [--query-tokens 32] [--top-k 100] [--rounds 3]

Synthetic, seeded data (unit-length token vectors, document lengths uniform in doc-tokens +- 25 %) is
written once as the harness's token shards. Each round runs every line in its own subprocess (the order
alternating between rounds), so each line's peak memory (``ru_maxrss``) is its own:

* ``harness``: ``maxsim_search`` (harness.retrieval.multivector.exact_search) over the memory-mapped,
  checksummed shards, in chunks of query tokens x document tokens, with a running top-k per query.
* ``sentence-transformers``: the library's exact path, ``sentence_transformers.util.maxsim`` over every
  document held in memory as a list of tensors (what ``MultiVectorEncoder.similarity`` and its
  evaluators run), then ``torch.topk``. PyLate's ``rank.rerank`` is the same computation, but PyLate
  pins sentence-transformers 5.3 and cannot be installed beside sentence-transformers 6.

Time is the search only (shard reads included for the harness; the library line gets its tensors
before the clock starts). Prints one JSON object per line and round, then a summary (median, min-max),
the load average before and after, and whether the two top-k rankings agree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.api.building_blocks import ShardedTokenVectors, TokenMatrices, maxsim_search, write_token_shard

LINES = ("harness", "sentence-transformers")
SHARD_DOCS = 1000


def _unit_rows(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    vectors = rng.standard_normal((rows, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def write_data(
    folder: Path, docs: int, doc_tokens: int, dim: int, queries: int, query_tokens: int, seed: int
) -> None:
    """The synthetic corpus as token shards, and the queries as one (n, tokens, dim) array."""
    num_shards = -(-docs // SHARD_DOCS)
    for index in range(num_shards):
        rng = np.random.default_rng([seed, index])
        count = min(SHARD_DOCS, docs - index * SHARD_DOCS)
        low, high = int(doc_tokens * 0.75), int(doc_tokens * 1.25)
        matrices = [_unit_rows(rng, int(n), dim) for n in rng.integers(low, high + 1, size=count)]
        ids = [f"doc{index * SHARD_DOCS + i:07d}" for i in range(count)]
        write_token_shard(folder, index, ids, TokenMatrices.from_list(matrices, dim), 0.0)
    query_rng = np.random.default_rng([seed, 1 << 20])
    np.save(
        folder / "queries.npy",
        _unit_rows(query_rng, queries * query_tokens, dim).reshape(queries, query_tokens, dim),
    )
    manifest = {"key": "bench-maxsim", "num_docs": docs, "num_shards": num_shards, "dim": dim}
    (folder / "bench.json").write_text(json.dumps(manifest), encoding="utf-8")


def _corpus(folder: Path) -> ShardedTokenVectors:
    return ShardedTokenVectors(folder, json.loads((folder / "bench.json").read_text(encoding="utf-8")))


def run_line(line: str, folder: Path, top_k: int) -> dict:
    """One line's search: seconds, peak memory, and its top-k (ids) for the agreement check."""
    queries = np.load(folder / "queries.npy", allow_pickle=False)
    corpus = _corpus(folder)
    if line == "harness":
        matrices = TokenMatrices.from_list(list(queries), queries.shape[2])
        started = time.perf_counter()
        scores, names = maxsim_search(matrices, corpus, top_k)
        seconds = time.perf_counter() - started
        top = [row[:10] for row in names]
    else:
        import torch
        from sentence_transformers.util import maxsim

        doc_ids, documents = [], []
        for ids, shard in corpus.shards():
            doc_ids.extend(ids)
            documents.extend(torch.from_numpy(np.array(shard.matrix(i))) for i in range(len(ids)))
        query_tensor = torch.from_numpy(queries)
        started = time.perf_counter()
        scores = maxsim(query_tensor, documents)
        best = torch.topk(scores, min(top_k, len(documents)), dim=1)
        seconds = time.perf_counter() - started
        top = [[doc_ids[i] for i in row[:10]] for row in best.indices.tolist()]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    return {"line": line, "seconds": round(seconds, 3), "peak_rss_mb": round(peak, 1), "top10": top}


def summarize(results: list[dict]) -> dict:
    summary = {}
    for line in LINES:
        times = [r["seconds"] for r in results if r["line"] == line]
        memory = [r["peak_rss_mb"] for r in results if r["line"] == line]
        if times:
            summary[line] = {
                "seconds_median": round(statistics.median(times), 3),
                "seconds_min_max": [min(times), max(times)],
                "peak_rss_mb_median": round(statistics.median(memory), 1),
                "peak_rss_mb_min_max": [min(memory), max(memory)],
            }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=5183)
    parser.add_argument("--doc-tokens", type=int, default=200)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--query-tokens", type=int, default=32)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--line", choices=LINES, help=argparse.SUPPRESS)  # one measurement (subprocess)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.line:
        print(json.dumps(run_line(args.line, args.data, args.top_k)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-maxsim-") as folder:
        data = Path(folder)
        write_data(data, args.docs, args.doc_tokens, args.dim, args.queries, args.query_tokens, args.seed)
        load_before = os.getloadavg()
        results = []
        for round_index in range(args.rounds):
            order = LINES if round_index % 2 == 0 else LINES[::-1]
            for line in order:
                command = [
                    sys.executable,
                    __file__,
                    "--line",
                    line,
                    "--data",
                    str(data),
                    "--top-k",
                    str(args.top_k),
                ]
                output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                result = json.loads(output.strip().splitlines()[-1])
                results.append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "top10"} | {"round": round_index}))
        load_after = os.getloadavg()
    first = {r["line"]: r["top10"] for r in results[: len(LINES)]}
    agree = first["harness"] == first["sentence-transformers"]
    report = {
        "measure": "maxsim",
        "docs": args.docs,
        "doc_tokens_mean": args.doc_tokens,
        "dim": args.dim,
        "queries": args.queries,
        "query_tokens": args.query_tokens,
        "top_k": args.top_k,
        "rounds": args.rounds,
        "summary": summarize(results),
        "top10_identical": agree,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
