"""Benchmark: exact learned-sparse search against scipy's plain product, a dense matmul and seismic.

    .venv/bin/python scripts/bench_sparse.py [--docs 1000000] [--queries 1000] [--rounds 3]

A synthetic SPLADE-like collection (``--doc-dims`` active dimensions per document, ``--query-dims`` per
query, vocabulary ``--vocab``, terms drawn from a Zipf-like law, positive log-normal weights) is searched
for the top ``--k`` documents of every query by:

- ``harness-exact``: the harness's exact search (corpus chunks, running top-k, trec_eval tie order);
- ``scipy-plain``: ``Q @ D.T`` as one scipy sparse product, then ``argpartition`` per query row;
- ``dense-slice``: a dense ``(queries, vocab) @ (vocab, slice)`` matmul on ``--dense-slice`` documents,
  its time and the dense corpus's size EXTRAPOLATED linearly to all documents (said in the output);
- ``seismic``: a pyseismic-lsr index (build and search timed) and its recall@10/@100 against exact
  search on ``--recall-sample`` queries.

Every line runs in its own subprocess (the collection is regenerated there from the seed, outside the
timing), rounds interleave the lines, and each line reports the median and min-max of its time and of its
peak resident memory (``ru_maxrss``) over the rounds. The peak is reset after the collection is built
(``/proc/self/clear_refs``), so it is what the search itself adds to the collection; the collection's own
size is printed once. A line over ``--memory-limit-gb`` of address space fails as such (reported, not
hidden). The load average is printed before and after: on a shared machine, read the figures with it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from harness.api.building_blocks import (
    SeismicSpec,
    build_seismic_index,
    exact_sparse_search,
    recall_against_exact,
    seismic_search,
)

LINES = ("harness-exact", "scipy-plain", "dense-slice", "seismic")


def synthetic_collection(num: int, dims: int, vocab: int, seed: int, chunk: int = 100_000):
    """``num`` CSR rows of about ``dims`` distinct terms (a Zipf-like law over the vocabulary: term of
    rank r drawn with probability proportional to 1 / (r + 10)) and log-normal positive weights."""
    import scipy.sparse

    rng = np.random.default_rng(seed)
    ranks = np.arange(vocab, dtype=np.float64)
    probability = 1.0 / (ranks + 10.0)
    probability /= probability.sum()
    terms_of_rank = rng.permutation(vocab)  # frequent terms scattered over the ids, as in a real vocabulary
    parts = []
    for start in range(0, num, chunk):
        rows = min(chunk, num - start)
        draws = int(dims * 1.15)  # repeats are merged below, leaving about ``dims`` distinct terms
        columns = terms_of_rank[rng.choice(vocab, size=(rows, draws), p=probability)]
        weights = rng.lognormal(mean=-0.5, sigma=0.6, size=(rows, draws)).astype(np.float32)
        matrix = scipy.sparse.csr_matrix(
            (weights.ravel(), (np.repeat(np.arange(rows), draws), columns.ravel())), shape=(rows, vocab)
        )
        matrix.sum_duplicates()
        parts.append(_top_dims(matrix, dims))
    collection = scipy.sparse.vstack(parts, format="csr")
    collection.indices = collection.indices.astype(np.int32)
    return collection


def _top_dims(matrix, dims: int):
    """Each row cut to its ``dims`` largest weights (rows hold ``dims`` or fewer distinct terms)."""
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    order = np.lexsort((-matrix.data, rows))  # by row, then weight descending
    rank_in_row = np.arange(matrix.nnz) - matrix.indptr[rows[order]]
    matrix.data[order[rank_in_row >= dims]] = 0
    matrix.eliminate_zeros()
    return matrix


def _collection(args):
    documents = synthetic_collection(args.docs, args.doc_dims, args.vocab, args.seed)
    queries = synthetic_collection(args.queries, args.query_dims, args.vocab, args.seed + 1)
    doc_ids = [f"doc{i}" for i in range(args.docs)]
    return queries, documents, doc_ids


def _reset_peak() -> bool:
    """Reset the process's peak RSS to its current RSS (Linux), after handing freed heap back to the
    system (else the generator's freed buffers hide what the line allocates); False when not allowed."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_line(name: str, args) -> dict:
    """One measurement, in this process: build the collection, reset the peak, time the line."""
    queries, documents, doc_ids = _collection(args)
    reset = _reset_peak()
    base = _rss_mb()  # after the trim: the baseline the reset peak starts from
    result: dict = {"line": name, "peak_reset": reset}
    started = time.perf_counter()
    if name == "harness-exact":
        exact_sparse_search(queries, [(doc_ids, documents)], args.k)
    elif name == "scipy-plain":
        scores = (queries @ documents.T).toarray() if args.densify else (queries @ documents.T).tocsr()
        result["product_nnz"] = int(np.count_nonzero(scores)) if args.densify else int(scores.nnz)
        _plain_top_k(scores, args.k)
    elif name == "dense-slice":
        width = min(args.dense_slice, args.docs)
        dense_queries = queries.toarray()
        dense_docs = documents[:width].toarray()
        started = time.perf_counter()  # the matmul and top-k only, not the densification
        scores = dense_queries @ dense_docs.T
        np.argpartition(-scores, min(args.k, width - 1), axis=1)
        seconds = time.perf_counter() - started
        result.update(
            seconds=round(seconds * args.docs / width, 4),  # EXTRAPOLATED linearly from the slice
            slice_docs=width,
            slice_seconds=round(seconds, 4),
            extrapolated=True,
            dense_corpus_gb_extrapolated=round(args.docs * args.vocab * 4 / 1e9, 1),
        )
    elif name == "seismic":
        spec = SeismicSpec(
            query_cut=args.query_cut, heap_factor=args.heap_factor, recall_sample=args.recall_sample
        )
        index = build_seismic_index([(doc_ids, documents)], spec)
        result["build_seconds"] = round(time.perf_counter() - started, 3)
        searched = time.perf_counter()
        query_ids = [f"q{i}" for i in range(args.queries)]
        found = seismic_search(index, queries, query_ids, 100, spec)
        result["search_seconds"] = round(time.perf_counter() - searched, 3)
        sample = np.arange(min(args.recall_sample, args.queries))
        exact = [
            [d for d in row if d]
            for row in exact_sparse_search(queries[sample], [(doc_ids, documents)], 100).doc_ids
        ]
        approximate = [[doc_id for doc_id, _ in found[i]] for i in sample.tolist()]
        result["recall@10"] = round(recall_against_exact(approximate, exact, 10), 4)
        result["recall@100"] = round(recall_against_exact(approximate, exact, 100), 4)
        result["settings"] = spec.describe()
        result["seconds"] = result["search_seconds"]
    result.setdefault("seconds", round(time.perf_counter() - started, 4))
    result["peak_mb_over_collection"] = round(_peak_mb() - base, 1)
    result["collection_mb"] = round(
        (documents.data.nbytes + documents.indices.nbytes + documents.indptr.nbytes) / 1e6, 1
    )
    return result


def _plain_top_k(scores, k: int) -> None:
    """Top-k per row of the plain product (no tie rule: what a hand-written loop would do)."""
    if isinstance(scores, np.ndarray):
        np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)
        return
    for row in range(scores.shape[0]):
        values = scores.data[scores.indptr[row] : scores.indptr[row + 1]]
        if len(values) > k:
            np.argpartition(-values, k)


def _child(name: str, args) -> dict:
    """Run one line in a fresh interpreter under the memory limit; a failure is reported as one."""
    command = [sys.executable, __file__, "--line", name, *_forwarded(args)]
    limit = int(args.memory_limit_gb * (1 << 30))

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=limit_memory, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"line": name, "failed": f"exit {done.returncode}: {last[:200]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _forwarded(args) -> list[str]:
    keys = ("docs", "queries", "vocab", "doc_dims", "query_dims", "k", "seed", "dense_slice", "recall_sample")
    forwarded = [item for key in keys for item in (f"--{key.replace('_', '-')}", str(getattr(args, key)))]
    forwarded += ["--query-cut", str(args.query_cut), "--heap-factor", str(args.heap_factor)]
    return forwarded + (["--densify"] if args.densify else [])


def _summary(results: list[dict]) -> dict:
    ok = [r for r in results if "failed" not in r]
    summary: dict = {"line": results[0]["line"], "rounds": len(results), "failed": len(results) - len(ok)}
    if not ok:
        summary["error"] = results[0]["failed"]
        return summary
    for key in ("seconds", "peak_mb_over_collection"):
        values = [r[key] for r in ok]
        summary[key] = {"median": round(statistics.median(values), 4), "min": min(values), "max": max(values)}
    extra = {k: v for k, v in ok[-1].items() if k not in ("seconds", "peak_mb_over_collection", "line")}
    return {**summary, **extra}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--vocab", type=int, default=30_522)
    parser.add_argument("--doc-dims", type=int, default=120)
    parser.add_argument("--query-dims", type=int, default=30)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per line")
    parser.add_argument("--dense-slice", type=int, default=5000, help="documents of the dense matmul slice")
    parser.add_argument(
        "--recall-sample", type=int, default=200, help="queries on which seismic's recall is measured"
    )
    parser.add_argument("--query-cut", type=int, default=10, help="seismic's query_cut")
    parser.add_argument("--heap-factor", type=float, default=0.7, help="seismic's heap_factor")
    parser.add_argument("--densify", action="store_true", help="scipy-plain densifies Q @ D.T before top-k")
    parser.add_argument("--memory-limit-gb", type=float, default=8.0, help="address-space cap per line")
    parser.add_argument(
        "--lines", default=",".join(LINES), help=f"comma-separated subset of {', '.join(LINES)}"
    )
    parser.add_argument("--line", choices=LINES, help=argparse.SUPPRESS)  # one measurement (child process)
    args = parser.parse_args(argv)
    if args.line:
        print(json.dumps(run_line(args.line, args)))
        return 0
    lines = [line for line in args.lines.split(",") if line]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cpus)")
    print(
        f"collection: {args.docs:,} docs x ~{args.doc_dims} dims, {args.queries:,} queries x ~{args.query_dims} "
        f"dims, vocab {args.vocab:,}, top-{args.k}, {args.rounds} interleaved round(s)"
    )
    results: dict[str, list[dict]] = {line: [] for line in lines}
    for _ in range(args.rounds):
        for line in lines:
            results[line].append(_child(line, args))
    for line in lines:
        print(json.dumps(_summary(results[line])))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
