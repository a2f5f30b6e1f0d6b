"""The main job: dataset + model -> embeddings (cached) -> FAISS top-k -> TREC run -> metrics -> result folder.

Every setting that can move a number is resolved up front into one ``config`` dict. It is recorded in
``provenance.json``, and an existing result folder is reused only when its recorded config is equal,
so changing anything (data checksum, model weights, pooling, top-k, index, identical-id rule, metrics)
re-runs exactly what it has to. Embeddings themselves are cached separately, keyed by the settings
that change a vector, so a new top-k or index re-searches without re-encoding.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.evaluation.metrics import PIPELINE_METRICS
from harness.provenance import StageTimer, environment_info
from harness.results.store import StoredResult, load_result, result_dir, write_result

log = logging.getLogger(__name__)

@dataclass
class EvalOptions:
    """Everything ``harness eval`` can be told; ``None`` means the registry's or the harness's default."""

    split: str | None = None
    top_k: int = 1000
    batch_size: int = 128
    device: str | None = None
    index: str = "Flat"
    results_dir: Path = field(default_factory=default_results_dir)
    data_dir: Path = field(default_factory=default_data_dir)
    cache_dir: Path = field(default_factory=default_cache_dir)
    mirror: str | None = None
    drop_identical_ids: bool | None = None
    metrics: list[str] = field(default_factory=lambda: list(PIPELINE_METRICS))
    ks: list[int] | None = None  # cut-offs for bare family names in ``metrics``
    relevance_level: int = 1
    complete: bool = False
    strict: bool = False
    qrels_duplicates: str = "error"  # a (query, doc) pair judged twice: "error" (trec_eval) or "last" (BEIR)
    trust_remote_code: bool = False
    shard_size: int = 50_000
    force: bool = False
    progress: bool = True
    encoder_options: dict[str, Any] = field(default_factory=dict)
    # How the corpus is encoded (harness.encoding.pool); recorded in provenance but never part of the
    # result-reuse config or the cache key: every plan writes the same vectors.
    workers: int | None = None
    devices: list[str] | None = None
    executor: str = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.top_k <= 0:
            raise HarnessError(f"--top-k must be a positive number of documents, got {self.top_k}")
        if self.batch_size <= 0:
            raise HarnessError(f"--batch-size must be positive, got {self.batch_size}")
        self.results_dir = Path(self.results_dir)
        self.data_dir = Path(self.data_dir)
        self.cache_dir = Path(self.cache_dir)


def _resolved_config(
    dataset, model, options: EvalOptions, drop_identical: bool, index_spec
) -> dict[str, Any]:
    """The settings that determine the numbers; equal configs mean a result can be reused."""
    libraries = {}
    if model.record.is_lexical:
        from harness.retrieval.bm25 import library_versions

        # A new stemmer release changes BM25 scores, so it must not reuse an old result.
        libraries = library_versions()
    return {
        "dataset": {
            "name": dataset.name,
            "split": dataset.split,
            "fingerprint": dataset.fingerprint(),
            "qrels_duplicates": dataset.qrels_duplicates,
        },
        "model": {
            "spec": model.record.name,
            "identity": model.identity,
            "settings": model.record.vector_settings(),
            "libraries": libraries,
        },
        "retrieval": {
            "top_k": options.top_k,
            "index": index_spec.describe() if index_spec is not None else None,
            "drop_identical_ids": drop_identical,
        },
        "evaluation": {
            "metrics": options.metrics,
            "ks": options.ks,
            "relevance_level": options.relevance_level,
            "complete": options.complete,
        },
        "encoder_options": options.encoder_options,
    }


def _reusable(directory: Path, config: dict[str, Any]) -> StoredResult | None:
    if not (directory / "metrics.json").exists():
        return None
    try:
        stored = load_result(directory)
    except HarnessError:
        return None
    return stored if stored.provenance.get("config") == config else None


def _dense_run(dataset, model, options: EvalOptions, index_spec, drop_identical: bool, timer: StageTimer):
    from harness.encoding.encoder import Encoder
    from harness.encoding.plan import encoding_plan_for
    from harness.encoding.store import EmbeddingCache
    from harness.retrieval.dense import dense_search

    with timer.stage("load_model"):
        encoder = Encoder(
            model,
            device=options.device,
            batch_size=options.batch_size,
            cache_dir=options.cache_dir,
            **options.encoder_options,
        )
        plan = encoding_plan_for(model, encoder, options)
    cache = EmbeddingCache(options.cache_dir)
    with timer.stage("encode_corpus"):
        corpus = cache.corpus(
            dataset,
            encoder,
            shard_size=options.shard_size,
            progress=options.progress,
            encode_shards=plan.encode_shards,
        )
    with timer.stage("encode_queries"):
        query_ids, query_vectors = cache.queries(dataset, encoder)
    with timer.stage("search"):
        run = dense_search(
            query_vectors,
            query_ids,
            corpus,
            options.top_k,
            index_spec,
            normalize=model.record.similarity == "cosine",
            drop_identical_ids=drop_identical,
        )
    description = encoder.describe()
    details = {
        "device": encoder.device,
        "label": description["label"],
        "encoder_settings": encoder.settings(),
        "encoder": description,
        "embedding_cache": {"corpus_key": corpus.key, "directory": str(corpus.directory), "dim": corpus.dim},
        "encoding": plan.describe(),
    }
    return run, details


def _bm25_run(dataset, model, options: EvalOptions, drop_identical: bool, timer: StageTimer):
    from harness.retrieval.bm25 import BM25Retriever

    retriever = BM25Retriever(model.record, cache_dir=options.cache_dir, progress=options.progress)
    with timer.stage("retrieve"):
        run = retriever.retrieve(dataset, options.top_k, drop_identical_ids=drop_identical)
    for stage, seconds in retriever.timings.items():
        timer.add(f"bm25_{stage}", seconds)
    settings = retriever.settings()
    return run, {"device": "cpu", "label": str(settings.get("library") or "bm25"), "bm25_settings": settings}


def load_inputs(dataset_spec: str, model_spec: str, options: EvalOptions):
    """Resolve (and if needed download) the dataset and the model record; fails fast on bad names."""
    from harness.datasets.beir import load_dataset
    from harness.datasets.prepare import prepare_dataset
    from harness.models.resolve import resolve_model

    model = resolve_model(model_spec, trust_remote_code=options.trust_remote_code)
    folder = prepare_dataset(dataset_spec, data_dir=options.data_dir, mirror=options.mirror)
    name = dataset_spec if not Path(dataset_spec).exists() else None
    dataset = load_dataset(
        folder, options.split, strict=options.strict, name=name, qrels_duplicates=options.qrels_duplicates
    )
    return dataset, model


def run_eval(
    dataset_spec: str,
    model_spec: str,
    options: EvalOptions | None = None,
) -> StoredResult:
    """Evaluate one model on one dataset and return the stored result (reused when nothing changed)."""
    from harness.evaluation.metrics import evaluate, parse_metrics
    from harness.evaluation.trec import write_run
    from harness.retrieval.dense import parse_index_spec

    options = options or EvalOptions()
    timer = StageTimer()
    started = time.perf_counter()
    with timer.stage("load_data"):
        dataset, model = load_inputs(dataset_spec, model_spec, options)
    metric_names = parse_metrics(options.metrics, options.ks)
    drop_identical = (
        dataset.drop_identical_ids if options.drop_identical_ids is None else options.drop_identical_ids
    )
    is_bm25 = model.record.is_lexical
    index_spec = None if is_bm25 else parse_index_spec(options.index)
    config = _resolved_config(dataset, model, options, drop_identical, index_spec)
    target = result_dir(options.results_dir, dataset.name, model.slug)
    if not options.force and (stored := _reusable(target, config)) is not None:
        log.info("reusing %s (same data, model and settings)", target)
        stored.reused = True
        return stored

    if is_bm25:
        run, details = _bm25_run(dataset, model, options, drop_identical, timer)
    else:
        run, details = _dense_run(dataset, model, options, index_spec, drop_identical, timer)
    with timer.stage("evaluate"):
        evaluation = evaluate(
            dataset.qrels,
            run,
            metric_names,
            relevance_level=options.relevance_level,
            complete=options.complete,
        )
    timer.seconds["total"] = round(time.perf_counter() - started, 4)

    metrics_payload = {
        "dataset": dataset.name,
        "split": dataset.split,
        "model": model.record.name,
        "model_slug": model.slug,
        **evaluation.to_json(per_query=True),
    }
    provenance = {
        "harness_version": __version__,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "config": config,
        "options": {
            key: str(value) if isinstance(value, Path) else value for key, value in asdict(options).items()
        },
        "dataset": {
            "name": dataset.name,
            "split": dataset.split,
            "root": str(dataset.root),
            "fingerprint": dataset.fingerprint(),
            "counts": {
                "docs": dataset.num_docs,
                "queries": len(dataset.queries),
                "qrels": sum(len(docs) for docs in dataset.qrels.values()),
            },
        },
        "model": {
            "spec": model_spec,
            "record": model.record.name,
            "source": model.source,
            "identity": model.identity,
            "settings": model.record.vector_settings(),
            "assumed": model.assumed,
        },
        "retrieval": details,
        "environment": environment_info(details.get("device")),
        "timings": timer.seconds,
    }
    tag = f"harness-{model.slug}"[:60]
    with timer.stage("write"):
        write_result(
            target,
            metrics_payload=metrics_payload,
            provenance=provenance,
            write_run_file=lambda path: write_run(path, run, tag, top_k=options.top_k),
        )
    return load_result(target)


@dataclass
class PairOutcome:
    """One (dataset, model) pair of ``run_pairs``: its stored result and how long it took here."""

    result: StoredResult
    seconds: float


def check_inputs(datasets: list[str], models: list[str], options: EvalOptions) -> None:
    """Fail on an unknown dataset, model, metric, index or runtime before any pair starts working."""
    from harness.datasets.registry import get_dataset_record
    from harness.encoding.runtime import check_encoder_options
    from harness.evaluation.metrics import parse_metrics
    from harness.models.resolve import resolve_model
    from harness.retrieval.dense import parse_index_spec

    for dataset in datasets:
        if not Path(dataset).is_dir():
            get_dataset_record(dataset)
    for model in models:
        resolved = resolve_model(model, trust_remote_code=options.trust_remote_code)
        check_encoder_options(resolved, options.device, options.encoder_options)
    parse_metrics(options.metrics, options.ks)
    parse_index_spec(options.index)


def run_pairs(
    datasets: list[str], models: list[str], options: EvalOptions
) -> tuple[list[PairOutcome], list[str]]:
    """Run every pair; a failing pair is reported (one line each) and the others still run.

    With a single pair its error is raised as it is, so the CLI prints it as the one error line.
    """
    outcomes: list[PairOutcome] = []
    failures: list[str] = []
    for dataset in datasets:
        for model in models:
            started = time.perf_counter()
            try:
                result = run_eval(dataset, model, options)
            except HarnessError as error:
                if len(datasets) * len(models) == 1:
                    raise
                failures.append(f"{dataset} x {model}: {error}")
                continue
            outcomes.append(PairOutcome(result, time.perf_counter() - started))
            log.info("wrote %s", result.directory)
    return outcomes, failures
