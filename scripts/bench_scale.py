"""Peak memory of dense search over a corpus bigger than it should ever hold: 2M synthetic documents.

Run by hand, not in CI (about 10 minutes and 6 GB of temporary disk)::

    .venv/bin/python scripts/bench_scale.py                  # 2,000,000 x 384, shard sizes 50k and 200k
    .venv/bin/python scripts/bench_scale.py --docs 200000    # a quick look

Random unit vectors stand in for the encoder, so what is measured is the storage and search path
alone: the vectors are written straight into the embedding cache's shard format (``write_shard``),
once per shard size, and each search runs in a fresh subprocess that reports its own peak RSS
(Linux ``VmHWM``; ``resource.getrusage`` elsewhere). Exact search (FAISS ``Flat``, 1,000 queries,
top-1000) walks the memory-mapped shards; IVF-PQ trains on a sample and is filled shard by shard,
and its recall@100 is measured against the exact top-100. The target: exact search peaks under a
third of the full matrix.

By default the vectors are drawn around 1,000 random centres (embeddings of real text cluster, and
on structureless noise no approximate index finds neighbours); ``--clusters 0`` draws them uniformly.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.api.building_blocks import (
    IndexSpec,
    ShardedEmbeddings,
    build_or_load_index,
    search_exact,
    search_index,
    write_shard,
)

BLOCK = 10_000  # vectors are generated in seeded blocks, so every shard size stores the same corpus


def unit_vectors(start: int, stop: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    """Documents ``[start, stop)`` of the synthetic corpus (float32, unit length), reproducibly."""
    parts = []
    for block in range(start // BLOCK, math.ceil(stop / BLOCK)):
        rng = np.random.default_rng([seed, block])
        vectors = rng.standard_normal((BLOCK, dim), dtype=np.float32)
        if clusters:
            centres = np.random.default_rng([2**31, clusters]).standard_normal(
                (clusters, dim), dtype=np.float32
            )
            centres /= np.linalg.norm(centres, axis=1, keepdims=True)
            # The same centres for documents and queries; noise about as long as the centre (cosine ~0.7).
            vectors = centres[rng.integers(0, clusters, BLOCK)] + vectors / np.sqrt(dim)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        low, high = max(start, block * BLOCK), min(stop, (block + 1) * BLOCK)
        parts.append(vectors[low - block * BLOCK : high - block * BLOCK])
    return np.concatenate(parts)


def write_corpus(directory: Path, docs: int, dim: int, shard_size: int, clusters: int) -> None:
    """The synthetic corpus as a finished embedding-cache entry (shards + manifest)."""
    directory.mkdir(parents=True, exist_ok=True)
    num_shards = math.ceil(docs / shard_size)
    for index in range(num_shards):
        start, stop = index * shard_size, min(docs, (index + 1) * shard_size)
        vectors = unit_vectors(start, stop, dim, clusters, seed=0)
        write_shard(directory, index, [f"d{n}" for n in range(start, stop)], vectors, 0.0)
    manifest = {
        "format": 1,
        "kind": "corpus",
        "key": f"synthetic-{docs}-{dim}-{shard_size}-{clusters}",
        "dataset": "synthetic",
        "num_docs": docs,
        "shard_size": shard_size,
        "num_shards": num_shards,
        "dim": dim,
        "finished_shards": list(range(num_shards)),
        "complete": True,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))  # read back by each measurement


def peak_rss() -> int:
    """Peak resident set size of this process in bytes.

    On Linux this is ``VmHWM`` of /proc/self/status: ``getrusage``'s ``ru_maxrss`` survives exec, so
    a subprocess would report its parent's peak whenever that was higher. Elsewhere ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


# ----------------------------------------------------------------------------- measuring subprocess


def measure(args: argparse.Namespace) -> None:
    """One search in this (fresh) process; prints a JSON line with its peak RSS and timings."""
    import faiss  # noqa: F401  (loaded before the baseline so the library itself is not counted twice)

    directory = Path(args.directory)
    embeddings = ShardedEmbeddings(directory, json.loads((directory / "manifest.json").read_text()))
    queries = np.load(args.query_file)
    baseline = peak_rss()
    started = time.perf_counter()
    report: dict[str, object] = {"baseline_rss": baseline}
    if args.measure == "exact":
        _, names = search_exact(queries, embeddings, args.top_k)
    else:
        spec = IndexSpec(factory=args.index, nprobe=args.nprobe)
        index = build_or_load_index(spec, embeddings)
        report["build_seconds"] = round(time.perf_counter() - started, 1)
        searched = time.perf_counter()
        _, names = search_index(index, queries, args.top_k, spec, embeddings.doc_ids())
        report["search_seconds"] = round(time.perf_counter() - searched, 1)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["peak_rss"] = peak_rss()
    positions = np.array([[int(name[1:]) if name else -1 for name in row] for row in names], dtype=np.int64)
    np.save(args.output, positions)
    print(json.dumps(report))


def run_measurement(kind: str, directory: Path, queries: Path, output: Path, args) -> dict:
    command = [
        sys.executable,
        __file__,
        "--measure",
        kind,
        "--directory",
        str(directory),
        "--query-file",
        str(queries),
        "--output",
        str(output),
        "--top-k",
        str(args.top_k if kind == "exact" else 100),
        "--index",
        args.index,
        "--nprobe",
        str(args.nprobe),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"{kind} search failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------ driver


def gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--top-k", type=int, default=1000)
    parser.add_argument("--shard-sizes", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument(
        "--index",
        default="IVF1024,PQ48np",
        help="approximate index measured beside exact search (np: no polysemous training, which only "
        "Hamming-filtered search uses and which is slow; the vectors and results are the same)",
    )
    parser.add_argument("--nprobe", type=int, default=32)
    parser.add_argument("--clusters", type=int, default=1000, help="0 for uniform random unit vectors")
    parser.add_argument("--workdir", type=Path, help="where the corpora go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic corpora")
    parser.add_argument("--measure", choices=("exact", "ivf"), help=argparse.SUPPRESS)
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    parser.add_argument("--query-file", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args)
        return

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    matrix = args.docs * args.dim * 4
    kind = f"{args.clusters} clusters" if args.clusters else "uniform"
    print(
        f"corpus: {args.docs:,} synthetic unit vectors ({kind}) x dim {args.dim}; "
        f"full float32 matrix {gib(matrix)}; {args.queries:,} queries, top-{args.top_k}"
    )
    query_path = workdir / "queries.npy"
    np.save(query_path, unit_vectors(0, args.queries, args.dim, args.clusters, seed=1))
    rows = []
    try:
        exact_top = None
        for shard_size in args.shard_sizes:
            directory = workdir / f"shards-{shard_size}"
            started = time.perf_counter()
            write_corpus(directory, args.docs, args.dim, shard_size, args.clusters)
            print(f"  wrote {directory.name} in {time.perf_counter() - started:.0f} s", flush=True)
            output = workdir / f"exact-{shard_size}.npy"
            report = run_measurement("exact", directory, query_path, output, args)
            rows.append(("exact (Flat)", shard_size, report, None))
            print(f"  exact, shards of {shard_size:,}: peak {gib(report['peak_rss'])}", flush=True)
            top = np.load(output)
            if exact_top is not None:
                assert np.array_equal(top[:, :100], exact_top[:, :100]), (
                    "shard size changed the exact results"
                )
            exact_top = top
            if not args.keep and shard_size != args.shard_sizes[-1]:
                shutil.rmtree(directory)  # only the last corpus is needed again (for IVF-PQ)
        output = workdir / "ivf.npy"
        report = run_measurement("ivf", directory, query_path, output, args)
        approximate = np.load(output)
        recall = np.mean(
            [len(set(a[:100]) & set(e[:100])) / 100 for a, e in zip(approximate, exact_top, strict=True)]
        )
        rows.append((f"{args.index} nprobe={args.nprobe}", args.shard_sizes[-1], report, recall))
        print(
            f"  {args.index}: built in {report['build_seconds']:.0f} s, searched in {report['search_seconds']:.0f} s"
        )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(f"{'search':<26}{'shard size':>12}{'peak RSS':>12}{'x matrix':>10}{'time':>9}  recall@100 vs exact")
    for name, shard_size, report, recall in rows:
        print(
            f"{name:<26}{shard_size:>12,}{gib(report['peak_rss']):>12}{report['peak_rss'] / matrix:>10.3f}"
            f"{report['seconds']:>8.0f}s  {'' if recall is None else f'{recall:.3f}'}"
        )
    worst = max(report["peak_rss"] for name, _, report, _ in rows if name.startswith("exact"))
    verdict = "met" if worst < matrix / 3 else "MISSED"
    print(
        f"\ntarget: exact search under a third of the matrix ({gib(matrix / 3)}): {verdict} (worst {gib(worst)})"
    )
    print(f"(process baseline after importing numpy+faiss: {gib(rows[0][2]['baseline_rss'])})")


if __name__ == "__main__":
    main()
