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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from harness import __version__
from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.core.protocols import EvalDataset
from harness.datasets.prepare import DataSettings, check_dataset_spec, open_dataset
from harness.datasets.qrels import DEFAULT_DUPLICATES
from harness.encoding.embedding_cache import EmbeddingCache
from harness.encoding.plan import EncodingSettings, encoder_spec_for, encoding_plan_for
from harness.encoding.pool import parse_devices
from harness.encoding.runtime import check_encoder_options
from harness.evaluation.metrics import DEFAULT_SCORE_PRECISION, PIPELINE_METRICS, EvaluationSettings
from harness.evaluation.trec import Run, top_k_ranking, write_run
from harness.models.resolve import ResolvedModel, resolve_model
from harness.provenance import StageTimer, environment_info
from harness.results.result_store import StoredResult, load_result, result_dir, write_result
from harness.retrieval import bm25
from harness.retrieval.dense import IndexSpec, dense_search, parse_index_spec
from harness.retrieval.fusion import fuse
from harness.retrieval.rerank import (
    CrossEncoderReranker,
    RerankSettings,
    head_docids,
    passages_for,
    resolve_cross_encoder,
)
from harness.retrieval.settings import RetrievalSettings
from harness.retrieval.systems import SystemRecord, find_system

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
    score_precision: str = DEFAULT_SCORE_PRECISION  # "float32": rank as trec_eval 9 / pytrec_eval
    strict: bool = False
    qrels_duplicates: str = DEFAULT_DUPLICATES  # a pair judged twice: "error" (trec_eval) or "last" (BEIR)
    trust_remote_code: bool = False
    shard_size: int | None = None  # None: sized by the corpus (harness.core.cache.auto_shard_size)
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
            score_precision=get("score_precision") or DEFAULT_SCORE_PRECISION,
            strict=bool(get("strict", False)),
            qrels_duplicates=get("qrels_duplicates", DEFAULT_DUPLICATES),
            trust_remote_code=bool(get("trust_remote_code", False)),
            shard_size=get("shard_size"),
            force=bool(get("force", False)),
            progress=not get("no_progress", False),
            workers=get("workers"),
            devices=parse_devices(get("devices")),
            executor=get("executor", "local"),
            ray_address=get("ray_address"),
            # Only what was asked for, so runs without these options keep their earlier result config.
            encoder_options={
                key: get(key) for key in ("runtime", "precision", "int8") if get(key) is not None
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
    dataset, retrieval = request.dataset, request.retrieval
    return {
        "dataset": {
            "name": dataset.name,
            "split": dataset.split,
            "fingerprint": dataset.fingerprint(),
            "qrels_duplicates": dataset.qrels_duplicates,
        },
        "model": _model_config(request.model),
        "retrieval": {
            "top_k": retrieval.top_k,
            "index": request.index.describe() if request.index is not None else None,
            "drop_identical_ids": request.drop_identical_ids,
        },
        "evaluation": evaluation.describe(),
        "encoder_options": encoder_options,
    }


def _model_config(model: ResolvedModel) -> dict[str, Any]:
    # A new stemmer release changes BM25 scores, so it must not reuse an old result.
    libraries = bm25.library_versions() if model.record.is_lexical else {}
    return {
        "spec": model.record.name,
        "identity": model.identity,
        "settings": model.record.vector_settings(),
        "libraries": libraries,
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


def _model_provenance(model: ResolvedModel, model_spec: str) -> dict[str, Any]:
    return {
        "spec": model_spec,
        "record": model.record.name,
        "source": model.source,
        "identity": model.identity,
        "settings": model.record.vector_settings(),
        "assumed": model.assumed,
    }


def _provenance(
    dataset: EvalDataset,
    model_block: dict[str, Any],
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
        "model": model_block,
        "retrieval": {"device": output.device, "label": output.label, **output.details},
        "environment": environment_info(output.device),
    }


def run_eval(
    dataset_spec: str,
    model_spec: str | SystemRecord,
    options: EvalOptions | None = None,
) -> StoredResult:
    """Evaluate one model (or system) on one dataset; return the stored result (reused when nothing changed)."""
    options = options or EvalOptions()
    system = find_system(model_spec)
    if system is not None:
        return run_system_eval(dataset_spec, system, options)
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
    provenance = _provenance(dataset, _model_provenance(model, model_spec), options, config, output)
    return _evaluate_and_write(
        target, dataset, (model.record.name, model.slug), output, provenance, options, timer, started
    )


def _evaluate_and_write(
    target: Path,
    dataset: EvalDataset,
    name_and_slug: tuple[str, str],
    output: RunOutput,
    provenance: dict[str, Any],
    options: EvalOptions,
    timer: StageTimer,
    started: float,
) -> StoredResult:
    """Score ``output.run`` against the qrels and write the result folder (models and systems alike)."""
    name, slug = name_and_slug
    with timer.stage("evaluate"):
        scores = options.evaluation_settings().evaluate(dataset.qrels, output.run)
    timer.seconds["total"] = round(time.perf_counter() - started, 4)
    metrics_payload = {
        "dataset": dataset.name,
        "split": dataset.split,
        "model": name,
        "model_slug": slug,
        **scores.to_json(per_query=True),
    }
    provenance["timings"] = timer.seconds
    tag = f"harness-{slug}"[:60]
    with timer.stage("write"):
        write_result(
            target,
            metrics_payload=metrics_payload,
            provenance=provenance,
            write_run_file=lambda path: write_run(path, output.run, tag, top_k=options.top_k),
        )
    return load_result(target)


@dataclass
class SystemParts:
    """A system bound to this machine: one run request per member, its fusion and its re-ranker."""

    record: SystemRecord
    members: list[RunRequest]
    reranker: CrossEncoderReranker | None

    def config(self) -> dict[str, Any]:
        """The system's identity: every member's model config, the fusion, the re-ranker and its settings."""
        fusion = self.record.fusion
        return {
            "name": self.record.name,
            "members": [_model_config(request.model) for request in self.members],
            "fusion": fusion.settings().describe(len(self.members)) if fusion else None,
            "rerank": self.reranker.describe() if self.reranker else None,
        }


def system_parts(dataset: EvalDataset, system: SystemRecord, options: EvalOptions) -> SystemParts:
    """Resolve every member and the re-ranker (each fails in one line before any work starts)."""
    retrieval = options.retrieval_settings()
    depth = system.fusion.depth if system.fusion and system.fusion.depth else retrieval.top_k
    member_retrieval = replace(retrieval, top_k=depth)
    members = []
    for spec in system.members:
        model = resolve_model(spec, trust_remote_code=options.trust_remote_code)
        index = None if model.record.is_lexical else parse_index_spec(retrieval.index)
        members.append(RunRequest(dataset, model, options.encoding_settings(), member_retrieval, index))
    reranker = None
    if system.rerank is not None:
        settings = RerankSettings(
            depth=system.rerank.depth,
            batch_size=system.rerank.batch_size or options.batch_size,
            max_length=system.rerank.max_length,
            device=options.device,
            precision=options.encoder_options.get("precision"),
        )
        model = resolve_cross_encoder(system.rerank.model, trust_remote_code=options.trust_remote_code)
        reranker = CrossEncoderReranker(model, settings, options.cache_dir, options.trust_remote_code)
    return SystemParts(system, members, reranker)


def system_run(parts: SystemParts, top_k: int, timer: StageTimer) -> RunOutput:
    """Each member's run, fused, re-ranked, cut to ``top_k``; provenance details of every step."""
    outputs = []
    for request in parts.members:
        member_timer = StageTimer()
        outputs.append((bm25_run if request.model.record.is_lexical else dense_run)(request, member_timer))
        for stage, seconds in member_timer.seconds.items():
            timer.add(f"{request.model.slug}:{stage}", seconds)
    run, label = outputs[0].run, " + ".join(output.label for output in outputs)
    fusion = parts.record.fusion
    if fusion is not None:
        with timer.stage("fuse"):
            run = fuse(
                [o.run for o in outputs], fusion.settings(), [r.model.record.name for r in parts.members]
            )
        label = f"{fusion.method}({label})"
    details: dict[str, Any] = {
        "members": [
            {
                "model": request.model.record.name,
                "device": output.device,
                "label": output.label,
                **output.details,
            }
            for request, output in zip(parts.members, outputs, strict=True)
        ]
    }
    if parts.reranker is not None:
        reranker = parts.reranker
        with timer.stage("rerank"):
            passages = passages_for(parts.members[0].dataset, head_docids(run, reranker.settings.depth))
            run = reranker.rerank(run, parts.members[0].dataset.queries, passages)
        label = f"{label} > {reranker.model.name}@{reranker.settings.depth}"
        details["rerank"] = {
            **reranker.describe(),
            "device": reranker.device,
            "pairs_scored": reranker.pairs_scored,
            "pairs_cached": reranker.pairs_cached,
            "pairs_truncated": reranker.pairs_truncated,
        }
    run = {qid: dict(top_k_ranking(docs, top_k)) for qid, docs in run.items()}
    device = parts.reranker.device if parts.reranker else outputs[-1].device
    return RunOutput(run, device, label, details)


def run_system_eval(dataset_spec: str, system: SystemRecord, options: EvalOptions) -> StoredResult:
    """``run_eval`` for a system: same result layout, reuse rule and provenance as a model's."""
    timer = StageTimer()
    started = time.perf_counter()
    with timer.stage("load_data"):
        dataset = open_dataset(dataset_spec, options.data_settings())
    options.evaluation_settings().metric_names()
    parts = system_parts(dataset, system, options)
    # The system's own retrieval settings (its top_k; the members' depth is the fusion's).
    dense = any(not r.model.record.is_lexical for r in parts.members)
    index = parse_index_spec(options.index) if dense else None
    request = replace(parts.members[0], retrieval=options.retrieval_settings(), index=index)
    config = _resolved_config(request, options.evaluation_settings(), options.encoder_options)
    del config["model"]  # replaced by every member's, under "system"
    config = {"system": parts.config(), **config}
    target = result_dir(options.results_dir, dataset.name, system.slug)
    if not options.force and (stored := _reusable(target, config)) is not None:
        log.info("reusing %s (same data, system and settings)", target)
        stored.reused = True
        return stored
    output = system_run(parts, options.top_k, timer)
    model_block = {
        "spec": system.name,
        "record": system.name,
        "kind": "system",
        "identity": config["system"],
        "members": [
            _model_provenance(r.model, spec) for r, spec in zip(parts.members, system.members, strict=True)
        ],
    }
    provenance = _provenance(dataset, model_block, options, config, output)
    return _evaluate_and_write(
        target, dataset, (system.name, system.slug), output, provenance, options, timer, started
    )


@dataclass
class PairOutcome:
    """One (dataset, model) pair of ``run_pairs``: its stored result and how long it took here."""

    result: StoredResult
    seconds: float


# Options that only shape dense encoding or the FAISS search, by EvalOptions field: a lexical model
# (BM25) ignores them, so setting one is reported rather than silently dropped.
DENSE_ONLY_OPTIONS = {
    "batch_size": "--batch-size",
    "device": "--device",
    "index": "--index",
    "shard_size": "--shard-size",
    "trust_remote_code": "--trust-remote-code",
    "workers": "--workers",
    "devices": "--devices",
    "executor": "--executor",
    "ray_address": "--ray-address",
}


def check_inputs(datasets: list[str], models: list[str | SystemRecord], options: EvalOptions) -> list[str]:
    """Fail on an unknown dataset, model, system, metric, index or runtime before any pair starts working.

    Returns one note per model for which some given options have no effect.
    """
    for dataset in datasets:
        check_dataset_spec(dataset)
    notes = []
    for spec in models:
        system = find_system(spec)
        for model in system.members if system is not None else [spec]:
            resolved = resolve_model(str(model), trust_remote_code=options.trust_remote_code)
            check_encoder_options(resolved, options.device, options.encoder_options)
        if system is not None and system.rerank is not None:
            resolve_cross_encoder(system.rerank.model, trust_remote_code=options.trust_remote_code)
        unused = unused_options(resolved, options) if system is None else []
        if unused:
            verb = "has" if len(unused) == 1 else "have"
            notes.append(
                f"{' '.join(unused)} {verb} no effect with {spec} (a lexical model: no encoder, no FAISS "
                "index); ignored"
            )
    options.evaluation_settings().metric_names()
    parse_index_spec(options.index)
    return notes


def unused_options(model: ResolvedModel, options: EvalOptions) -> list[str]:
    """The options set away from their defaults that change nothing for ``model``."""
    if not model.record.is_lexical:
        return []
    defaults = {part.name: part.default for part in fields(EvalOptions)}
    changed = [flag for name, flag in DENSE_ONLY_OPTIONS.items() if getattr(options, name) != defaults[name]]
    return changed + [f"--{name}" for name in options.encoder_options]


def run_pairs(
    datasets: list[str], models: list[str | SystemRecord], options: EvalOptions
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
                failures.append(f"{dataset} x {getattr(model, 'name', model)}: {error}")
                continue
            outcomes.append(PairOutcome(result, time.perf_counter() - started))
            log.info("wrote %s", result.directory)
    return outcomes, failures
