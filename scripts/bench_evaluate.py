"""Benchmark run evaluation: this harness, the harness before issue 14, plain pytrec_eval and ranx.

Synthesises qrels and a run of 10,000 queries x 1,000 documents (scores rounded so ties are
common), writes them as TREC files in a temporary folder, then evaluates nDCG@10, Recall@100,
MAP and MRR@10 from the files with each tool in its own subprocess, so wall time (including
imports and reading) and peak resident memory are per tool, measured side by side in one run:

- harness: ``read_qrels`` + ``score_run(..., diagnose=False)`` (``harness.api.building_blocks``)
  on the run's path (columnar reading, queries handed to pytrec_eval a chunk at a time): the metrics
  alone, the same work as every other line
- harness+diagnostics: the same with judged@k and the tie bounds (``diagnose=True``, what ``harness
  evaluate`` and ``harness eval`` report): the bounds re-score every query whose tie order matters twice,
  so on this run, where ties are everywhere, they cost about two more evaluations
- harness-before: the same calls on the harness as of ``--before`` (default: the commit before
  issue 14, which read the run into dicts of dicts), extracted with ``git archive`` into a
  temporary folder and imported from there
- pytrec_eval: files read with the ``csv`` module into dicts, then ``RelevanceEvaluator``
  (it has no MRR@10, so it computes full MRR, ``recip_rank``: the same amount of work)
- ranx: ``Qrels.from_file`` / ``Run.from_file`` + ``ranx.evaluate`` (one untimed warm-up run
  first, so numba's compilation is cached and not counted)

Run by hand (not a test): ``.venv/bin/python scripts/bench_evaluate.py [--queries N --depth D --repeats R]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METRICS = ["ndcg@10", "recall@100", "map", "mrr@10"]
TOOLS = ("harness", "harness+diagnostics", "harness-before", "pytrec_eval", "ranx")
# The last commit before issue 14 changed how runs are read and evaluated.
BEFORE = "64ffbec"


def synthesise(folder: Path, n_queries: int, depth: int, seed: int = 0) -> tuple[Path, Path]:
    """TREC qrels (about 8 judgments per query, grades 0-2) and a run sorted in trec_eval order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    corpus = 1_000_000
    run_path, qrels_path = folder / "run.trec", folder / "qrels.trec"
    with open(run_path, "w") as run_file, open(qrels_path, "w") as qrels_file:
        for q in range(n_queries):
            qid = f"q{q}"
            docids = np.char.add("d", rng.choice(corpus, depth, replace=False).astype(str))
            scores = np.round(rng.random(depth), 3)  # ~1,000 distinct values: many ties
            order = np.lexsort((docids, scores))[::-1].tolist()  # score desc, then docid desc
            names, values = docids.tolist(), scores.tolist()  # plain str/float: repr is the number
            run_file.write(
                "".join(
                    f"{qid} Q0 {names[i]} {rank} {values[i]!r} bench\n" for rank, i in enumerate(order, 1)
                )
            )
            retrieved = rng.choice(docids, 5, replace=False)
            unretrieved = np.char.add("u", rng.choice(corpus, 3, replace=False).astype(str))
            grades = rng.integers(0, 3, 8)
            qrels_file.write(
                "".join(
                    f"{qid} 0 {docid} {grade}\n"
                    for docid, grade in zip([*retrieved, *unretrieved], grades, strict=True)
                )
            )
    return qrels_path, run_path


def child(tool: str, qrels_path: str, run_path: str) -> None:
    """Evaluate with one tool and print its metrics and peak memory as JSON."""
    import resource

    if tool in ("harness", "harness+diagnostics"):
        from harness.api.building_blocks import read_qrels, score_run

        diagnose = tool == "harness+diagnostics"
        metrics = score_run(read_qrels(qrels_path).qrels, run_path, METRICS, diagnose=diagnose).aggregate
    elif tool == "harness-before":  # imported from the extracted old tree (see measure)
        # That tree predates harness.api: its stage modules are named as they were at --before.
        read_qrels = importlib.import_module("harness.datasets.qrels").read_qrels
        evaluate = importlib.import_module("harness.evaluation.metrics").evaluate
        read_run = importlib.import_module("harness.evaluation.trec").read_run

        metrics = evaluate(read_qrels(qrels_path).qrels, read_run(run_path), METRICS).aggregate
    elif tool == "pytrec_eval":
        import csv

        import pytrec_eval

        qrels: dict[str, dict[str, int]] = {}
        with open(qrels_path, newline="") as handle:
            for qid, _, docid, rel in csv.reader(handle, delimiter=" "):
                qrels.setdefault(qid, {})[docid] = int(rel)
        run: dict[str, dict[str, float]] = {}
        with open(run_path, newline="") as handle:
            for qid, _, docid, _, score, _ in csv.reader(handle, delimiter=" "):
                run.setdefault(qid, {})[docid] = float(score)
        measures = {
            "ndcg@10": "ndcg_cut_10",
            "recall@100": "recall_100",
            "map": "map",
            "mrr@10": "recip_rank",
        }
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "map", "recip_rank"})
        per_query = evaluator.evaluate(run)
        metrics = {
            ours: pytrec_eval.compute_aggregated_measure(key, [values[key] for values in per_query.values()])
            for ours, key in measures.items()
        }
    elif tool == "ranx":
        from ranx import Qrels, Run, evaluate

        scores = evaluate(
            Qrels.from_file(qrels_path, kind="trec"), Run.from_file(run_path, kind="trec"), METRICS
        )
        metrics = {name: float(value) for name, value in scores.items()}
    else:
        raise SystemExit(f"unknown tool {tool}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_mb = usage.ru_maxrss / 1024  # Linux reports KiB
    cpu_seconds = usage.ru_utime + usage.ru_stime  # all threads: steadier than wall time on a busy machine
    print(json.dumps({"metrics": metrics, "peak_rss_mb": peak_mb, "cpu_seconds": cpu_seconds}))


def extract_before(revision: str, folder: Path) -> Path:
    """The ``harness`` package as of ``revision``, unpacked into ``folder`` (the old path stays runnable)."""
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", revision, "harness"], capture_output=True, check=True
    ).stdout
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def measure(tool: str, qrels_path: Path, run_path: Path, before: Path | None = None) -> dict:
    env = dict(os.environ)
    if tool == "harness-before":
        env["PYTHONPATH"] = str(before)  # the old tree first, so `import harness` finds it
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", tool, str(qrels_path), str(run_path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tool} failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = seconds
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=1_000)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measure each tool this many times, interleaved; keep the fastest",
    )
    parser.add_argument("--before", default=BEFORE, help="git revision of the 'before' harness (default: %(default)s)")
    parser.add_argument(
        "--tools", nargs="+", choices=TOOLS, default=list(TOOLS), help="tools to measure (default: all)"
    )
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "QRELS", "RUN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    tools = [tool for tool in TOOLS if tool in args.tools]
    with tempfile.TemporaryDirectory(prefix="bench_evaluate_") as tmp:
        before = extract_before(args.before, Path(tmp) / "before") if "harness-before" in tools else None
        started = time.perf_counter()
        qrels_path, run_path = synthesise(Path(tmp), args.queries, args.depth)
        size_mb = run_path.stat().st_size / 1e6
        print(
            f"synthesised {args.queries:,} queries x {args.depth:,} docs ({size_mb:.0f} MB run file) "
            f"in {time.perf_counter() - started:.1f} s"
        )
        if "ranx" in tools:
            measure("ranx", qrels_path, run_path)  # warm-up: numba compiles and caches its kernels
        results: dict[str, dict] = {}
        for _ in range(args.repeats):  # interleaved, so a busy spell on a shared machine hits every tool
            for tool in tools:
                result = measure(tool, qrels_path, run_path, before)
                if tool not in results or result["seconds"] < results[tool]["seconds"]:
                    results[tool] = result

    harness = results["harness"]
    print(
        f"\n{'tool':<20} {'wall s':>8} {'cpu s':>8} {'peak RSS MB':>12} {'time / harness':>15} "
        f"{'memory / harness':>17}"
    )
    for tool, result in results.items():
        print(
            f"{tool:<20} {result['seconds']:>8.1f} {result['cpu_seconds']:>8.1f} {result['peak_rss_mb']:>12.0f} "
            f"{result['seconds'] / harness['seconds']:>15.2f} {result['peak_rss_mb'] / harness['peak_rss_mb']:>17.2f}"
        )
    print(f"\n{'metric':<12}" + "".join(f"{tool:>16}" for tool in tools))
    for metric in METRICS:
        print(f"{metric:<12}" + "".join(f"{results[tool]['metrics'][metric]:>16.6f}" for tool in tools))
    print("(pytrec_eval's mrr@10 column is full MRR; ranx breaks score ties differently from trec_eval)")
    if "harness-before" in results:
        old = results["harness-before"]
        same = all(harness["metrics"][metric] == old["metrics"][metric] for metric in METRICS)
        print(
            f"\nharness vs harness-before: {harness['seconds'] / old['seconds']:.2f}x the wall time, "
            f"{harness['cpu_seconds'] / old['cpu_seconds']:.2f}x the CPU time, "
            f"{harness['peak_rss_mb'] / old['peak_rss_mb']:.2f}x the peak memory "
            f"({harness['peak_rss_mb'] / 1024:.2f} GiB vs {old['peak_rss_mb'] / 1024:.2f} GiB); "
            f"numbers {'identical' if same else 'DIFFERENT'}"
        )


if __name__ == "__main__":
    main()
