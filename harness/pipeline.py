"""The main job: dataset + model -> embeddings (cached) -> FAISS top-k -> TREC run -> metrics -> result folder.

Every setting that can move a number is resolved up front into one ``config`` dict. It is recorded in
``provenance.json``, and an existing result folder is reused only when its recorded config is equal,
so changing anything (data checksum, model weights, pooling, top-k, index, identical-id rule, metrics)
re-runs exactly what it has to. Embeddings themselves are cached separately, keyed by the settings
that change a vector, so a new top-k or index re-searches without re-encoding.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from harness import __version__
from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.core.protocols import EvalDataset
from harness.datasets.prepare import DataSettings, open_dataset
from harness.datasets.qrels import DEFAULT_DUPLICATES
from harness.datasets.registry import get_dataset_record
from harness.encoding.plan import EncodingSettings, encoder_spec_for, encoding_plan_for
from harness.encoding.pool import parse_devices
from harness.encoding.runtime import check_encoder_options
from harness.encoding.store import EmbeddingCache
from harness.evaluation.metrics import PIPELINE_METRICS, EvaluationSettings
from harness.evaluation.trec import Run, write_run
from harness.models.resolve import ResolvedModel, resolve_model
from harness.provenance import StageTimer, environment_info
from harness.results.store import StoredResult, load_result, result_dir, write_result
from harness.retrieval import bm25
from harness.retrieval.dense import IndexSpec, dense_search, parse_index_spec
from harness.retrieval.settings import RetrievalSettings

log = logging.getLogger(__name__)

StageSettings = TypeVar(
    "StageSettings", DataSettings, EncodingSettings, RetrievalSettings, EvaluationSettings
)


@dataclass
class EvalOptions:
    """Everything ``harness eval`` can be told; ``None`` means the registry's or the harness's default.

    The flat form the CLI and suites fill in; each stage is handed only its own part
    (``data_settings``, ``encoding_settings``, ``retrieval_settings``, ``evaluation_settings``).
    """

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
    qrels_duplicates: str = DEFAULT_DUPLICATES  # a pair judged twice: "error" (trec_eval) or "last" (BEIR)
    trust_remote_code: bool = False
    shard_size: int = 50_000
    force: bool = False
    progress: bool = True
    encoder_options: dict[str, Any] = field(default_factory=dict)
    # How the corpus is encoded (harness.encoding.plan); recorded in provenance but never part of the
    # result-reuse config or the cache key: every plan writes the same vectors.
    workers: int | None = None
    devices: list[str] | None = None
    executor: str = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        self.results_dir = Path(self.results_dir)
        self.data_dir = Path(self.data_dir)
        self.cache_dir = Path(self.cache_dir)
        self.retrieval_settings()  # bad values fail here, before any work
        self.encoding_settings()

    @classmethod
    def from_command_options(cls, values: Mapping[str, Any]) -> EvalOptions:
        """The options of ``harness eval`` (argparse dests, e.g. ``top_k``, ``no_progress``) as ``EvalOptions``.

        One translation for every caller (the command line, experiment steps); absent or ``None`` folders
        mean the defaults (env ``HARNESS_*_DIR``).
        """
        get = values.get
        folders = {
            name: get(name) or default()
            for name, default in (
                ("results_dir", default_results_dir),
                ("data_dir", default_data_dir),
                ("cache_dir", default_cache_dir),
            )
        }
        return cls(
            split=get("split"),
            top_k=get("top_k", 1000),
            batch_size=get("batch_size", 128),
            device=get("device"),
            index=get("index", "Flat"),
            **folders,
            mirror=get("mirror"),
            drop_identical_ids=get("drop_identical_ids"),
            metrics=list(get("metrics") or PIPELINE_METRICS),
            ks=list(get("ks")) if get("ks") else None,
            relevance_level=get("relevance_level", 1),
            complete=bool(get("complete", False)),
            strict=bool(get("strict", False)),
            qrels_duplicates=get("qrels_duplicates", DEFAULT_DUPLICATES),
            trust_remote_code=bool(get("trust_remote_code", False)),
            shard_size=get("shard_size", 50_000),
            force=bool(get("force", False)),
            progress=not get("no_progress", False),
            workers=get("workers"),
            devices=parse_devices(get("devices")),
            executor=get("executor", "local"),
            ray_address=get("ray_address"),
            # Only what was asked for, so runs without these options keep their earlier result config.
            encoder_options={
                key: get(key) for key in ("runtime", "precision") if get(key) is not None
            },
        )

    def data_settings(self) -> DataSettings:
        return self._part(DataSettings)

    def encoding_settings(self) -> EncodingSettings:
        return self._part(EncodingSettings)

    def retrieval_settings(self) -> RetrievalSettings:
        return self._part(RetrievalSettings)

    def evaluation_settings(self) -> EvaluationSettings:
        return self._part(EvaluationSettings)

    def _part(self, settings_type: type[StageSettings]) -> StageSettings:
        """One stage's settings: its fields, copied from the options of the same name."""
        return settings_type(
            **{part.name: copy.copy(getattr(self, part.name)) for part in fields(settings_type)}
        )


@dataclass(frozen=True)
class RunRequest:
    """What a retriever is asked to rank: one dataset with one model, under the run's settings."""

    dataset: EvalDataset
    model: ResolvedModel
    encoding: EncodingSettings
    retrieval: RetrievalSettings
    index: IndexSpec | None  # retrieval.index parsed and checked (None for lexical models)

    @property
    def drop_identical_ids(self) -> bool:
        return self.retrieval.drops_identical_ids(self.dataset.drop_identical_ids)


@dataclass
class RunOutput:
    """What a retriever hands back: the run, and the details provenance records about how it was made."""

    run: Run
    device: str
    label: str
    details: dict[str, Any]


def _resolved_config(
    request: RunRequest, evaluation: EvaluationSettings, encoder_options: dict[str, Any]
) -> dict[str, Any]:
    """The settings that determine the numbers; equal configs mean a result can be reused."""
    dataset, model, retrieval = request.dataset, request.model, request.retrieval
    # A new stemmer release changes BM25 scores, so it must not reuse an old result.
    libraries = bm25.library_versions() if model.record.is_lexical else {}
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
            "top_k": retrieval.top_k,
            "index": request.index.describe() if request.index is not None else None,
            "drop_identical_ids": request.drop_identical_ids,
        },
        "evaluation": evaluation.describe(),
        "encoder_options": encoder_options,
    }


def _reusable(directory: Path, config: dict[str, Any]) -> StoredResult | None:
    if not (directory / "metrics.json").exists():
        return None
    try:
        stored = load_result(directory)
    except HarnessError:
        return None
    return stored if stored.provenance.get("config") == config else None


def dense_run(request: RunRequest, timer: StageTimer) -> RunOutput:
    """Encode (or find cached) corpus and queries, then search: FAISS exact or the ``retrieval.index``."""
    dataset, model, encoding, retrieval = request.dataset, request.model, request.encoding, request.retrieval
    with timer.stage("load_model"):
        # Built as ``harness encode`` builds it (encoder_spec_for), so both find the same cache entry.
        encoder = encoder_spec_for(model, encoding).build(encoding.device)
        plan = encoding_plan_for(model, encoder, encoding)
    cache = EmbeddingCache(encoding.cache_dir)
    with timer.stage("encode_corpus"):
        corpus = cache.corpus(
            dataset,
            encoder,
            shard_size=encoding.shard_size,
            progress=encoding.progress,
            encode_shards=plan.encode_shards,
        )
    with timer.stage("encode_queries"):
        query_ids, query_vectors = cache.queries(dataset, encoder)
    with timer.stage("search"):
        run = dense_search(
            query_vectors,
            query_ids,
            corpus,
            retrieval.top_k,
            request.index,
            normalize=model.record.similarity == "cosine",
            drop_identical_ids=request.drop_identical_ids,
        )
    description = encoder.describe()
    details = {
        "encoder_settings": encoder.settings(),
        "encoder": description,
        "embedding_cache": {"corpus_key": corpus.key, "directory": str(corpus.directory), "dim": corpus.dim},
        "encoding": plan.describe(),
    }
    return RunOutput(run, encoder.device, description["label"], details)


def bm25_run(request: RunRequest, timer: StageTimer) -> RunOutput:
    """Index (or find the cached index of) the corpus with BM25 and rank every query."""
    encoding = request.encoding
    retriever = bm25.BM25Retriever(
        request.model.record, cache_dir=encoding.cache_dir, progress=encoding.progress
    )
    with timer.stage("retrieve"):
        run = retriever.retrieve(
            request.dataset, request.retrieval.top_k, drop_identical_ids=request.drop_identical_ids
        )
    for stage, seconds in retriever.timings.items():
        timer.add(f"bm25_{stage}", seconds)
    settings = retriever.settings()
    return RunOutput(run, "cpu", str(settings.get("library") or "bm25"), {"bm25_settings": settings})


def load_inputs(
    dataset_spec: str, model_spec: str, data: DataSettings, *, trust_remote_code: bool = False
) -> tuple[EvalDataset, ResolvedModel]:
    """Resolve the model record and (downloading it if needed) the dataset; fails fast on bad names."""
    model = resolve_model(model_spec, trust_remote_code=trust_remote_code)
    return open_dataset(dataset_spec, data), model


def _provenance(
    dataset: EvalDataset,
    model: ResolvedModel,
    model_spec: str,
    options: EvalOptions,
    config: dict,
    output: RunOutput,
) -> dict[str, Any]:
    return {
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
        "retrieval": {"device": output.device, "label": output.label, **output.details},
        "environment": environment_info(output.device),
    }


def run_eval(
    dataset_spec: str,
    model_spec: str,
    options: EvalOptions | None = None,
) -> StoredResult:
    """Evaluate one model on one dataset and return the stored result (reused when nothing changed)."""
    options = options or EvalOptions()
    encoding, retrieval, evaluation = (
        options.encoding_settings(),
        options.retrieval_settings(),
        options.evaluation_settings(),
    )
    timer = StageTimer()
    started = time.perf_counter()
    with timer.stage("load_data"):
        dataset, model = load_inputs(
            dataset_spec, model_spec, options.data_settings(), trust_remote_code=options.trust_remote_code
        )
    evaluation.metric_names()  # an unknown metric fails before any encoding
    index = None if model.record.is_lexical else parse_index_spec(retrieval.index)
    request = RunRequest(dataset, model, encoding, retrieval, index)
    config = _resolved_config(request, evaluation, encoding.encoder_options)
    target = result_dir(options.results_dir, dataset.name, model.slug)
    if not options.force and (stored := _reusable(target, config)) is not None:
        log.info("reusing %s (same data, model and settings)", target)
        stored.reused = True
        return stored

    retrieve = bm25_run if model.record.is_lexical else dense_run
    output = retrieve(request, timer)
    with timer.stage("evaluate"):
        scores = evaluation.evaluate(dataset.qrels, output.run)
    timer.seconds["total"] = round(time.perf_counter() - started, 4)

    metrics_payload = {
        "dataset": dataset.name,
        "split": dataset.split,
        "model": model.record.name,
        "model_slug": model.slug,
        **scores.to_json(per_query=True),
    }
    provenance = _provenance(dataset, model, model_spec, options, config, output)
    provenance["timings"] = timer.seconds
    tag = f"harness-{model.slug}"[:60]
    with timer.stage("write"):
        write_result(
            target,
            metrics_payload=metrics_payload,
            provenance=provenance,
            write_run_file=lambda path: write_run(path, output.run, tag, top_k=retrieval.top_k),
        )
    return load_result(target)


@dataclass
class PairOutcome:
    """One (dataset, model) pair of ``run_pairs``: its stored result and how long it took here."""

    result: StoredResult
    seconds: float


def check_inputs(datasets: list[str], models: list[str], options: EvalOptions) -> None:
    """Fail on an unknown dataset, model, metric, index or runtime before any pair starts working."""
    for dataset in datasets:
        if not Path(dataset).is_dir():
            get_dataset_record(dataset)
    for model in models:
        resolved = resolve_model(model, trust_remote_code=options.trust_remote_code)
        check_encoder_options(resolved, options.device, options.encoder_options)
    options.evaluation_settings().metric_names()
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
