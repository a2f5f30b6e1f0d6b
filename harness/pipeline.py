"""The main job: dataset + model -> embeddings (cached) -> FAISS top-k -> TREC run -> metrics -> result folder.

Every setting that can move a number is resolved up front into one ``config`` dict. It is recorded in
``provenance.json``, and an existing result folder is reused only when its recorded config is equal,
so changing anything (data checksum, model weights, pooling, top-k, index, identical-id rule, metrics)
re-runs exactly what it has to. Embeddings themselves are cached separately, keyed by the settings
that change a vector, so a new top-k or index re-searches without re-encoding.

Each result folder is one identity: the model with its settings that move numbers away from their
defaults (:func:`identity_settings`: top-k, index, runtime, precision, split, identical-id rule, qrels
duplicates, weights, record settings changed for this run) names its own folder (``bm25@top_k=100``), so
an ablation never replaces the default run. Evaluation settings (metrics, ks, relevance level) are not
part of it: a new metric re-scores the same retrieval into the same folder.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import model_validator

from harness import __version__
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_object
from harness.core.options import (
    INT32_MAX,
    MAX_BATCH_SIZE,
    MAX_WORKERS,
    OptionsRecord,
    field_defaults,
    folder,
    option,
)
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.core.protocols import EvalDataset
from harness.datasets.dataset_registry import dataset_registry
from harness.datasets.prepare import DataSettings, check_dataset_spec, open_dataset
from harness.datasets.subset import derived_from
from harness.encoding.embedding_cache import EmbeddingCache
from harness.encoding.loaded_model import library_progress_bars
from harness.encoding.onnx_quantize import INT8_VARIANTS
from harness.encoding.plan import EXECUTORS, EncodingSettings, encoder_spec_for, encoding_plan_for
from harness.encoding.pool import parse_devices
from harness.encoding.runtime import DEFAULT_RUNTIME, check_encoder_options
from harness.encoding.sparse import SparseCache, SparseTextEncoder
from harness.evaluation.excluded_ids import apply_excluded_ids
from harness.evaluation.ir_metadata import header_from_provenance
from harness.evaluation.metrics import EvaluationSettings
from harness.evaluation.scoring_options import (
    complete_option,
    ks_option,
    metrics_option,
    qrels_duplicates_option,
    relevance_level_option,
    score_precision_option,
)
from harness.evaluation.trec import Run, read_run, top_k_ranking, write_run
from harness.models.model_registry import PRECISIONS, RUNTIMES, find_record
from harness.models.prompts import bind_prompts, bind_record
from harness.models.resolve import ResolvedModel, resolve_model
from harness.provenance import StageTimer, environment_info
from harness.results.result_store import (
    METRICS_FILE,
    PROVENANCE_FILE,
    StoredResult,
    load_result,
    result_dir,
    result_key,
    settings_label,
    write_result,
)
from harness.retrieval import bm25
from harness.retrieval.dense import IndexSpec, dense_search, parse_index_spec
from harness.retrieval.fusion import fuse
from harness.retrieval.matryoshka import dimension_models
from harness.retrieval.multivector import MultivectorRetriever, MultivectorSettings, parse_multivector_index
from harness.retrieval.rerank import (
    CrossEncoderReranker,
    RerankSettings,
    head_docids,
    passages_for,
    resolve_cross_encoder,
)
from harness.retrieval.settings import RetrievalSettings
from harness.retrieval.sparse import SeismicSpec, SparseRetriever, parse_sparse_index
from harness.retrieval.systems import SystemRecord, find_system

log = logging.getLogger(__name__)

StageSettings = TypeVar(
    "StageSettings", DataSettings, EncodingSettings, RetrievalSettings, EvaluationSettings
)


# How the corpus is encoded (harness.encoding.plan); recorded in provenance but never part of the
# result-reuse config or the cache key: every plan writes the same vectors.
SCALING_OUT = (
    "scaling out",
    "how the corpus is encoded; every choice writes the same embeddings (see README)",
)
# A folder left out is the environment's (HARNESS_RESULTS_DIR, ...), read when the options are made.
_FOLDERS = {"results_dir": default_results_dir, "data_dir": default_data_dir, "cache_dir": default_cache_dir}
# The encoder's options, recorded only when given so that runs without them keep their earlier config.
_ENCODER_OPTIONS = ("runtime", "precision", "int8")
# What each encoder option is when neither the command nor the model's record sets it (runtime.py's rule).
_ENCODER_DEFAULTS = {"runtime": DEFAULT_RUNTIME, "precision": PRECISIONS[0], "int8": "auto"}


class EvalOptions(OptionsRecord):
    """The pipeline's options: what ``harness eval``, ``harness encode`` and ``harness reproduce`` share.

    Each field is a command-line option under its argparse name (``top_k`` for ``--top-k``,
    ``no_progress``, ``runtime``/``precision``/``int8``, ``devices`` as the comma-separated text); a folder
    left out is the environment's (``HARNESS_RESULTS_DIR``, ``HARNESS_DATA_DIR``, ``HARNESS_CACHE_DIR``).
    Each stage is handed only its own part: :meth:`data_settings`, :meth:`encoding_settings`,
    :meth:`retrieval_settings`, :meth:`evaluation_settings`; :meth:`stage_values` is the flat form
    ``provenance.json`` records.

    Example: ``run_eval("scifact", "minilm", EvalOptions(top_k=100, metrics=["ndcg@10"], no_progress=True))``.
    """

    split: str | None = option(
        DataSettings.split, help="split to evaluate (default: the one the papers report)"
    )
    top_k: int = option(RetrievalSettings.top_k, low=1, high=INT32_MAX, help="documents retrieved per query")
    truncate_dim: list[int] = option(
        [],
        nargs="+",
        low=1,
        metavar="D",
        help="Matryoshka dimension(s), each its own result, all from one full-size encode "
        "(default: the model record's truncate_dim, else the full size)",
    )
    batch_size: int = option(
        EncodingSettings.batch_size, low=1, high=MAX_BATCH_SIZE, help="encoding batch size"
    )
    device: str | None = option(
        EncodingSettings.device, help="cpu, cuda, cuda:1, mps (default: the best available)"
    )
    index: str = option(
        RetrievalSettings.index,
        help="FAISS index spec: Flat (exact, default), HNSW32[,efSearch=N], IVF1024,PQ48np[,nprobe=N]",
    )
    results_dir: Path = option(
        None,
        parse=folder,
        help="where result folders are written (env HARNESS_RESULTS_DIR, default: results/)",
    )
    data_dir: Path = option(None, parse=folder, help="env HARNESS_DATA_DIR")
    cache_dir: Path = option(None, parse=folder, help="env HARNESS_CACHE_DIR")
    mirror: str | None = option(
        DataSettings.mirror, help="URL prefix or local folder with BEIR datasets (env HARNESS_BEIR_MIRROR)"
    )
    drop_identical_ids: bool | None = option(
        RetrievalSettings.drop_identical_ids,
        action="store_const",
        const=True,
        negative="--keep-identical-ids",
        help="drop hits whose doc id equals the query id (default: the dataset's convention)",
    )
    metrics: list[str] = metrics_option(
        list(EvaluationSettings.metrics), "metric names (ndcg@10, map, ...) or bare families"
    )
    ks: list[int] | None = ks_option()
    relevance_level: int = relevance_level_option()
    complete: bool = complete_option()
    score_precision: str = score_precision_option()
    strict: bool = option(
        DataSettings.strict, action="store_true", help="qrels naming unknown ids are errors"
    )
    qrels_duplicates: str = qrels_duplicates_option()
    trust_remote_code: bool = option(False, action="store_true", help="allow a model's own Python code")
    shard_size: int | None = option(
        EncodingSettings.shard_size,
        low=1,
        high=INT32_MAX,
        help="documents per embedding shard (default: corpus/8, between 256 and 50000, so a killed run resumes)",
    )
    force: bool = option(False, action="store_true", help="recompute even when an equal result exists")
    no_progress: bool = option(False, action="store_true", help="hide progress bars")
    runtime: str | None = option(
        None,
        choices=RUNTIMES,
        deprecated=("--backend",),
        help="runtime of the forward pass: exact (default: the fastest whose vectors equal torch fp32, "
        "checked once per model), torch, or onnx (ONNX Runtime, exported once into the cache)",
    )
    precision: str | None = option(
        None,
        choices=PRECISIONS,
        help="fp32 (default); bf16 on CPUs with native bf16 or on GPUs; fp16 on GPUs; int8 with the onnx "
        "runtime on CPUs (see --int8); fast: the fastest setting here whose once-per-model check passes. "
        "All but fp32 are approximate: vectors differ from fp32, each checked once against torch fp32",
    )
    int8: str | None = option(
        None,
        choices=("auto", *INT8_VARIANTS),
        help="how --precision int8 quantizes: auto (default: nbits8, the variant that passes its check) or "
        "a named variant, e.g. dynamic (faster, further from fp32; dynamic-7bit on CPUs without VNNI)",
    )
    workers: int | None = option(
        EncodingSettings.workers,
        low=1,
        high=MAX_WORKERS,
        group=SCALING_OUT,
        help="encoding workers (default: one per GPU, else one CPU process per 4 cores)",
    )
    devices: str | None = option(
        None, group=SCALING_OUT, help="comma-separated devices, one worker each, e.g. cuda:0,cuda:1"
    )
    executor: str = option(
        EncodingSettings.executor,
        choices=EXECUTORS,
        group=SCALING_OUT,
        help="local processes, or Ray actors (needs the [ray] extra; a local Ray starts if none is given)",
    )
    ray_address: str | None = option(
        EncodingSettings.ray_address,
        group=SCALING_OUT,
        help="Ray cluster to join, e.g. ray://head:10001 (env RAY_ADDRESS)",
    )
    model_weights: Path | None = option(
        None,
        flags=("--weights", "--model-weights"),
        parse=folder,
        role="input",
        metavar="DIR",
        help="run the --model record (its pooling, similarity, prompts) with the weights in DIR, e.g. a "
        "download or a fine-tuned checkpoint; the result keeps the record's name, its folder the weights' hash",
    )
    label: str | None = option(
        None,
        help="the result's name in tables and reports (default: the model and its non-default settings, "
        "e.g. 'bm25 (top_k=100)'; a local folder by its name)",
    )

    @model_validator(mode="before")
    @classmethod
    def _folders_from_the_environment(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        values = {str(key).replace("-", "_"): value for key, value in data.items()}
        return {**values, **{name: make() for name, make in _FOLDERS.items() if values.get(name) is None}}

    @property
    def progress(self) -> bool:
        """Whether progress bars are shown (``--no-progress`` hides them)."""
        return not self.no_progress

    @property
    def encoder_options(self) -> dict[str, Any]:
        """``runtime``, ``precision``, ``int8``: only those given, so runs without them keep their config."""
        return {name: getattr(self, name) for name in _ENCODER_OPTIONS if getattr(self, name) is not None}

    def stage_values(self) -> dict[str, Any]:
        """Every option as the stages name it, in the order ``provenance.json``'s ``options`` block has
        always listed them: ``progress``, ``encoder_options``, ``devices`` as a list; an empty ``metrics``
        or ``ks`` means the default, as an absent option does."""
        values: dict[str, Any] = {}
        # EvalOptions' own fields only: a command's (dataset, model...) are not pipeline options.
        for name in EvalOptions.model_fields:
            if name == "no_progress":
                values["progress"] = self.progress
            elif name in _ENCODER_OPTIONS:
                values.setdefault("encoder_options", self.encoder_options)
            elif name == "devices":
                values["devices"] = parse_devices(self.devices)
            else:
                values[name] = getattr(self, name)
        values["metrics"] = list(self.metrics or EvaluationSettings.metrics)
        values["ks"] = list(self.ks) if self.ks else None
        return values

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
        values = self.stage_values()
        return settings_type(**{part.name: copy.copy(values[part.name]) for part in fields(settings_type)})


@dataclass(frozen=True)
class RunRequest:
    """What a retriever is asked to rank: one dataset with one model, under the run's settings."""

    dataset: EvalDataset
    model: ResolvedModel
    encoding: EncodingSettings
    retrieval: RetrievalSettings
    index: (
        IndexSpec | SeismicSpec | None
    )  # retrieval.index parsed for the kind (None: lexical, multivector, exact sparse)

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


def _stored(directory: Path) -> StoredResult | None:
    if not (directory / METRICS_FILE).exists():
        return None
    try:
        return load_result(directory)
    except HarnessError:
        return None


def _reusable(directory: Path, config: dict[str, Any]) -> StoredResult | None:
    stored = _stored(directory)
    return stored if stored is not None and stored.provenance.get("config") == config else None


def _retrieval_config(config: Any) -> Any:
    """A config without its evaluation settings: what decides the run itself."""
    return (
        {key: value for key, value in config.items() if key != "evaluation"}
        if isinstance(config, dict)
        else None
    )


def _rescorable(directory: Path, config: dict[str, Any]) -> StoredResult | None:
    """A stored result whose run this config would retrieve again (only metrics, ks... differ)."""
    stored = _stored(directory)
    if stored is None or not stored.run_path.is_file():
        return None
    same_run = _retrieval_config(stored.provenance.get("config")) == _retrieval_config(config)
    return stored if same_run else None


def _earlier_result(
    target: Path, config: dict[str, Any], options: EvalOptions
) -> tuple[StoredResult | None, RunOutput | None]:
    """The stored result to return as it is (same config), or the stored run to score again (same run,
    other evaluation settings: the result keeps its folder, and nothing is retrieved again)."""
    if options.force:
        return None, None
    if (stored := _reusable(target, config)) is not None:
        log.info("reusing %s (same data, model and settings)", target)
        return _relabelled(stored, options.label), None
    if (stored := _rescorable(target, config)) is None:
        return None, None
    log.info("scoring the run in %s again (same retrieval, other evaluation settings)", target)
    retrieval = dict(stored.provenance.get("retrieval") or {})
    device, run_label = str(retrieval.pop("device", "")), str(retrieval.pop("label", ""))
    return None, RunOutput(read_run(stored.run_path), device, run_label, retrieval)


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
    description, settings = encoder.describe(), encoder.settings()
    encoder.release()  # the model and its sessions are done: the search holds the vectors instead
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
    details = {
        "encoder_settings": settings,
        "encoder": description,
        "embedding_cache": {"corpus_key": corpus.key, "directory": str(corpus.directory), "dim": corpus.dim},
        "encoding": plan.describe(),
    }
    return RunOutput(run, encoder.device, description["label"], details)


def multivector_run(request: RunRequest, timer: StageTimer) -> RunOutput:
    """Encode (or find cached) token shards, then exact MaxSim (or ``--index plaid``, with its recall
    against exact on a query sample) over them."""
    retriever = multivector_retriever(request.dataset, request.model, request.encoding, request.retrieval)
    retriever.settings = replace(retriever.settings, drop_identical_ids=request.drop_identical_ids)
    run, details = retriever.retrieve()
    for stage, seconds in retriever.timings.items():
        timer.add(f"multivector_{stage}", seconds)
    return RunOutput(run, retriever.settings.device, details["encoder"]["label"], details)


def multivector_retriever(
    dataset: EvalDataset, model: ResolvedModel, encoding: EncodingSettings, retrieval: RetrievalSettings
) -> MultivectorRetriever:
    """A late-interaction model's retriever under the run's encoding and retrieval settings."""
    settings = MultivectorSettings(
        cache_dir=encoding.cache_dir,
        top_k=retrieval.top_k,
        index=retrieval.index,
        device=encoding.device or "cpu",
        batch_size=encoding.batch_size,
        shard_size=encoding.shard_size,
    )
    return MultivectorRetriever(dataset, model, settings)


def sparse_run(request: RunRequest, timer: StageTimer) -> RunOutput:
    """Encode (or find cached) sparse vectors, then search exactly or with seismic (``--index seismic``,
    with its recall against exact on a query sample)."""
    encoding = request.encoding
    with timer.stage("load_model"):
        encoder = SparseTextEncoder.load(
            request.model, encoding.device or "cpu", batch_size=encoding.batch_size
        )
    retrieval = replace(request.retrieval, drop_identical_ids=request.drop_identical_ids)
    retriever = SparseRetriever(
        request.dataset,
        encoder,
        retrieval,
        SparseCache(encoding.cache_dir),
        index=request.index,
        shard_size=encoding.shard_size,
    )
    run, details = retriever.retrieve()
    for stage, seconds in details["sparse_timings"].items():
        timer.add(f"sparse_{stage}", seconds)
    return RunOutput(run, encoder.device, encoder.describe()["label"], details)


def _retriever_for(record: Any):
    """The run function of a record's kind: BM25, learned sparse, late interaction (MaxSim) or dense."""
    if record.is_lexical:
        return bm25_run
    return sparse_run if record.is_sparse else multivector_run if record.is_multivector else dense_run


def _index_for(record: Any, spec: str) -> IndexSpec | SeismicSpec | None:
    """``--index`` as the record's kind reads it: a FAISS spec for dense models, exact or seismic for
    sparse ones; lexical and multivector models read it themselves (None)."""
    if record.is_lexical or record.is_multivector:
        return None
    return parse_sparse_index(spec, record.name) if record.is_sparse else parse_index_spec(spec)


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
    dataset_spec: str,
    model_spec: str,
    data: DataSettings,
    *,
    trust_remote_code: bool = False,
    weights: Path | None = None,
) -> tuple[EvalDataset, ResolvedModel]:
    """Resolve the model record (with ``--weights``' folder, if given) and (downloading it if
    needed) the dataset; fails fast on bad names."""
    model = resolve_model(model_spec, trust_remote_code=trust_remote_code, weights=weights)
    dataset = open_dataset(dataset_spec, data)
    return dataset, bind_prompts(model, dataset.name)


def identity_settings(request: RunRequest, options: EvalOptions) -> dict[str, Any]:
    """The run's settings that differ from the defaults and can move a number: what tells this result
    apart from the model's default one (its folder suffix and label). Settings a lexical model ignores
    (index, encoder options) are left out, so they never fork its result."""
    settings = _dataset_identity(request, options)
    if options.top_k != RetrievalSettings.top_k:  # as asked (retrieval may go deeper: excluded ids)
        settings["top_k"] = options.top_k
    model = request.model
    if model.record.is_lexical:
        return {**settings, **_record_changes(model)}
    if (
        request.index is not None
        and request.index.describe() != parse_index_spec(RetrievalSettings.index).describe()
    ) or (model.record.is_multivector and not parse_multivector_index(request.retrieval.index).exact):
        settings["index"] = request.retrieval.index
    if options.model_weights is not None:
        settings["weights"] = str(model.identity.get("weights_hash", ""))[:8]
    return {**settings, **_encoder_identity(model, options), **_record_changes(model)}


def _dataset_identity(request: RunRequest, options: EvalOptions) -> dict[str, Any]:
    dataset, settings = request.dataset, {}
    record = dataset_registry().get(dataset.name)
    if dataset.split != (record.eval_split if record else "test"):
        settings["split"] = dataset.split
    if request.drop_identical_ids != dataset.drop_identical_ids:
        settings["drop_identical_ids"] = request.drop_identical_ids
    if options.qrels_duplicates != DataSettings.qrels_duplicates:
        settings["qrels_duplicates"] = options.qrels_duplicates
    return settings


def _encoder_identity(model: ResolvedModel, options: EvalOptions) -> dict[str, Any]:
    """``runtime``/``precision``/``int8`` given and unlike what the model runs with when not given."""
    record_defaults = {"runtime": model.record.runtime, "precision": model.record.precision}
    return {
        name: value
        for name, value in options.encoder_options.items()
        if value != (record_defaults.get(name) or _ENCODER_DEFAULTS[name])
    }


def _record_changes(model: ResolvedModel) -> dict[str, Any]:
    """Settings of the model's record changed for this run (e.g. prompts), against the registry's."""
    registered = find_record(model.record.name)
    if registered is None:
        return {"truncate_dim": model.record.truncate_dim} if model.record.truncate_dim is not None else {}
    # The registry's record resolved for the same dataset and folder, so that only real changes show.
    dataset = (model.record.resolved_prompts or {}).get("dataset")
    registered = bind_record(registered, dataset, model.source)
    mine, theirs = _record_settings(model.record), _record_settings(registered)
    return {
        key: mine.get(key) for key in sorted(mine.keys() | theirs.keys()) if mine.get(key) != theirs.get(key)
    }


def _record_settings(record: Any) -> dict[str, Any]:
    return {**record.vector_settings(), "similarity": record.similarity}


def _result_label(model: ResolvedModel, settings: dict[str, Any], options: EvalOptions) -> str:
    """``--label``, else the model (a local folder by its folder name) and its non-default settings."""
    if options.label:
        return options.label
    name = model.record.name
    if model.identity.get("folder_name"):
        name = str(model.identity["folder_name"])
    if "weights" in settings:
        settings = {**settings, "weights": Path(model.source).name}
    return settings_label(name, settings)


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
            key: str(value) if isinstance(value, Path) else value
            for key, value in options.stage_values().items()
        },
        "dataset": {
            "name": dataset.name,
            "split": dataset.split,
            "root": str(dataset.root),
            "fingerprint": dataset.fingerprint(),
            "derived_from": derived_from(dataset.root),
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
            dataset_spec,
            model_spec,
            options.data_settings(),
            trust_remote_code=options.trust_remote_code,
            weights=options.model_weights,
        )
    evaluation.metric_names()  # an unknown metric fails before any encoding
    model = dimension_models(model, options.truncate_dim)[0]  # run_pairs gives one dimension per run
    index = _index_for(model.record, retrieval.index)
    request = RunRequest(dataset, model, encoding, _deep_enough(retrieval, dataset), index)
    settings = identity_settings(request, options)
    config = _resolved_config(request, evaluation, _config_encoder_options(model, options))
    identity = ResultIdentity(
        result_key(model.slug, settings), _result_label(model, settings, options), settings
    )
    target = result_dir(options.results_dir, dataset.name, identity.key)
    stored, output = _earlier_result(target, config, options)
    if stored is not None:
        return stored
    if output is None:
        retrieve = _retriever_for(model.record)
        # --no-progress hides the libraries' own bars too (weight loading, downloads); BM25 loads no model.
        with library_progress_bars(shown=options.progress or model.record.is_lexical):
            output = retrieve(request, timer)
    provenance = _provenance(dataset, _model_provenance(model, model_spec), options, config, output)
    return _evaluate_and_write(
        target, dataset, (model.record.name, identity), output, provenance, options, timer, started
    )


@dataclass(frozen=True)
class ResultIdentity:
    """What names a result: its folder (``key``: the slug and non-default settings), its label, those settings."""

    key: str
    label: str
    settings: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "identity_settings": self.settings}


def _config_encoder_options(model: ResolvedModel, options: EvalOptions) -> dict[str, Any]:
    """The encoder options that change something: an option given at its default (``--runtime exact``)
    reuses the default run; a lexical model has no encoder, so none of them change its result."""
    return {} if model.record.is_lexical else _encoder_identity(model, options)


def _relabelled(stored: StoredResult, label: str | None) -> StoredResult:
    """A reused result, under ``--label`` when one is given now (a label moves no number)."""
    stored.reused = True
    if label is None or stored.label == label:
        return stored
    payload = read_json_object(stored.directory / METRICS_FILE)
    atomic_write_json(stored.directory / METRICS_FILE, {**payload, "label": label})
    provenance_path = stored.directory / PROVENANCE_FILE
    if isinstance(stored.provenance.get("result"), dict) and provenance_path.is_file():
        stored.provenance["result"]["label"] = label
        atomic_write_json(provenance_path, stored.provenance)
    stored.stored_label = label
    return stored


def _deep_enough(retrieval: RetrievalSettings, dataset: EvalDataset) -> RetrievalSettings:
    """Retrieval deep enough that every query still has ``top_k`` hits once its excluded ids (BRIGHT's
    ``excluded_ids``) are removed."""
    longest = max((len(ids) for ids in getattr(dataset, "excluded_ids", {}).values()), default=0)
    return replace(retrieval, top_k=retrieval.top_k + longest) if longest else retrieval


def _without_excluded_ids(dataset: EvalDataset, run: Run, top_k: int) -> Run:
    """The run with each query's excluded documents removed before scoring, as BRIGHT's run.py does (an
    excluded id that the qrels judge relevant is refused), cut back to ``top_k``."""
    excluded = getattr(dataset, "excluded_ids", {})
    return apply_excluded_ids(run, excluded, dataset.qrels, depth=top_k) if excluded else run


def _evaluate_and_write(
    target: Path,
    dataset: EvalDataset,
    name_and_identity: tuple[str, ResultIdentity],
    output: RunOutput,
    provenance: dict[str, Any],
    options: EvalOptions,
    timer: StageTimer,
    started: float,
) -> StoredResult:
    """Score ``output.run`` against the qrels and write the result folder (models and systems alike)."""
    name, identity = name_and_identity
    with timer.stage("evaluate"):
        output.run = _without_excluded_ids(dataset, output.run, options.top_k)
        scores = options.evaluation_settings().evaluate(dataset.qrels, output.run)
    timer.seconds["total"] = round(time.perf_counter() - started, 4)
    metrics_payload = {
        "dataset": dataset.name,
        "split": dataset.split,
        "model": name,
        "model_slug": identity.key,
        "label": identity.label,
        "identity_settings": identity.settings,
        **scores.to_json(per_query=True),
    }
    provenance["result"] = identity.describe()
    provenance["timings"] = timer.seconds
    tag = f"harness-{identity.key}"[:60]
    with timer.stage("write"):
        write_result(
            target,
            metrics_payload=metrics_payload,
            provenance=provenance,
            write_run_file=lambda path: write_run(
                path, output.run, tag, top_k=options.top_k, header=header_from_provenance(provenance, tag=tag)
            ),
        )
    return load_result(target)


@dataclass
class SystemParts:
    """A system bound to this machine: one run request per member, its fusion and its re-ranker."""

    record: SystemRecord
    members: list[RunRequest]
    reranker: CrossEncoderReranker | None
    maxsim: MultivectorRetriever | None = None  # a multivector record as the re-ranker (bm25 >> colbert)

    def config(self) -> dict[str, Any]:
        """The system's identity: every member's model config, the fusion, the re-ranker and its settings."""
        fusion = self.record.fusion
        return {
            "name": self.record.name,
            "members": [_model_config(request.model) for request in self.members],
            "fusion": fusion.settings().describe(len(self.members)) if fusion else None,
            "rerank": self.reranker.describe()
            if self.reranker
            else {**self.maxsim.encoder.describe(), "depth": self.record.rerank.depth}
            if self.maxsim
            else None,
        }


def system_parts(dataset: EvalDataset, system: SystemRecord, options: EvalOptions) -> SystemParts:
    """Resolve every member and the re-ranker (each fails in one line before any work starts)."""
    _refuse_weights_for_system(system, options)
    retrieval = options.retrieval_settings()
    depth = system.fusion.depth if system.fusion and system.fusion.depth else retrieval.top_k
    member_retrieval = replace(retrieval, top_k=depth)
    members = []
    for spec in system.members:
        model = bind_prompts(resolve_model(spec, trust_remote_code=options.trust_remote_code), dataset.name)
        index = _index_for(model.record, retrieval.index)
        members.append(RunRequest(dataset, model, options.encoding_settings(), member_retrieval, index))
    reranker = None
    if system.rerank is not None and _is_multivector(system.rerank.model):
        model = resolve_model(system.rerank.model, trust_remote_code=options.trust_remote_code)
        maxsim = multivector_retriever(dataset, model, options.encoding_settings(), retrieval)
        return SystemParts(system, members, None, maxsim)
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
        outputs.append(_retriever_for(request.model.record)(request, member_timer))
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
    if parts.maxsim is not None:
        depth = parts.record.rerank.depth
        with timer.stage("rerank"):
            run, details["rerank"] = parts.maxsim.rerank(run, depth)
        label = f"{label} > {parts.maxsim.model.record.name}@{depth}"
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
    dense = any(_index_for(r.model.record, "Flat") is not None for r in parts.members)
    index = parse_index_spec(options.index) if dense else None
    request = replace(parts.members[0], retrieval=options.retrieval_settings(), index=index)
    config = _resolved_config(request, options.evaluation_settings(), _system_encoder_options(parts, options))
    del config["model"]  # replaced by every member's, under "system"
    config = {"system": parts.config(), **config}
    settings = _system_identity(parts, request, options)
    label = options.label or settings_label(system.name, settings)
    identity = ResultIdentity(result_key(system.slug, settings), label, settings)
    target = result_dir(options.results_dir, dataset.name, identity.key)
    stored, output = _earlier_result(target, config, options)
    if stored is not None:
        return stored
    if output is None:
        loads_models = parts.reranker is not None or any(not r.model.record.is_lexical for r in parts.members)
        with library_progress_bars(shown=options.progress or not loads_models):
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
        target, dataset, (system.name, identity), output, provenance, options, timer, started
    )


def _system_identity(parts: SystemParts, request: RunRequest, options: EvalOptions) -> dict[str, Any]:
    """A system's non-default settings: the run's, plus any its dense members or re-ranker change.

    Fusion and re-ranking are the system itself (its name; a command-line system is named by them).
    """
    settings = {**_dataset_identity(request, options)}
    if options.top_k != RetrievalSettings.top_k:  # as asked (retrieval may go deeper: excluded ids)
        settings["top_k"] = options.top_k
    if (
        request.index is not None
        and request.index.describe() != parse_index_spec(RetrievalSettings.index).describe()
    ):
        settings["index"] = request.retrieval.index
    member_changes = {
        f"{member.model.slug}.{key}": value
        for member in parts.members
        for key, value in _record_changes(member.model).items()
    }
    return {**settings, **_system_encoder_options(parts, options), **member_changes}


def _system_encoder_options(parts: SystemParts, options: EvalOptions) -> dict[str, Any]:
    """The encoder options any member (or the re-ranker, which takes the precision) runs differently with."""
    changed: dict[str, Any] = {}
    for member in parts.members:
        changed.update(_config_encoder_options(member.model, options))
    if parts.reranker is not None and options.precision not in (None, _ENCODER_DEFAULTS["precision"]):
        changed["precision"] = options.precision
    return changed


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


def _refuse_weights_for_system(system: SystemRecord, options: EvalOptions) -> None:
    if options.model_weights is not None:
        raise HarnessError(
            f"--weights binds weights to one model record; {system.name} is a system of "
            f"{len(system.members)} model(s): evaluate its members one at a time"
        )


def check_inputs(datasets: list[str], models: list[str | SystemRecord], options: EvalOptions) -> list[str]:
    """Fail on an unknown dataset, model, system, metric, index or runtime before any pair starts working.

    Returns one note per model for which some given options have no effect.
    """
    for dataset in datasets:
        check_dataset_spec(dataset)
    notes = []
    for spec in models:
        system = find_system(spec)
        if system is not None:
            _refuse_weights_for_system(system, options)
        for model in system.members if system is not None else [spec]:
            resolved = resolve_model(
                str(model), trust_remote_code=options.trust_remote_code, weights=options.model_weights
            )
            check_encoder_options(resolved, options.device, options.encoder_options)
        if system is not None and system.rerank is not None and not _is_multivector(system.rerank.model):
            resolve_cross_encoder(system.rerank.model, trust_remote_code=options.trust_remote_code)
        if resolved.record.is_multivector:
            parse_multivector_index(options.index)
        if resolved.record.is_sparse:
            parse_sparse_index(options.index, resolved.record.name)
        unused = unused_options(resolved, options) if system is None else []
        if unused:
            verb = "has" if len(unused) == 1 else "have"
            notes.append(
                f"{' '.join(unused)} {verb} no effect with {spec} (a lexical model: no encoder, no FAISS "
                "index); ignored"
            )
    options.evaluation_settings().metric_names()
    if not all(_reads_its_own_index(str(spec)) for spec in models):
        parse_index_spec(options.index)
    return notes


def _is_multivector(spec: str) -> bool:
    """Whether ``spec`` names a multivector (ColBERT) model record."""
    record = find_record(spec)
    return record is not None and record.is_multivector


def _reads_its_own_index(spec: str) -> bool:
    """Whether ``spec`` names a record whose ``--index`` is not a FAISS spec (multivector, sparse)."""
    record = find_record(spec)
    return record is not None and (record.is_multivector or record.is_sparse)


def unused_options(model: ResolvedModel, options: EvalOptions) -> list[str]:
    """The options set away from their defaults that change nothing for ``model``."""
    if not model.record.is_lexical:
        return []
    defaults = field_defaults(EvalOptions)
    changed = [flag for name, flag in DENSE_ONLY_OPTIONS.items() if getattr(options, name) != defaults[name]]
    return changed + [f"--{name}" for name in options.encoder_options]


def _per_dimension(model_spec: str | SystemRecord, options: EvalOptions) -> list[EvalOptions]:
    """One run per Matryoshka dimension (``--truncate-dim``, else the record's list), largest first: each
    its own result, and the embedding cache encodes the corpus once for all of them."""
    record = find_record(model_spec) if isinstance(model_spec, str) else None
    dims = options.truncate_dim or (list(record.truncate_dims) if record is not None else [])
    if len(dims) <= 1:
        return [options]
    return [options.replace(truncate_dim=[dim]) for dim in sorted(set(dims), reverse=True)]


def run_pairs(
    datasets: list[str], models: list[str | SystemRecord], options: EvalOptions
) -> tuple[list[PairOutcome], list[str]]:
    """Run every pair; a failing pair is reported (one line each) and the others still run.

    With a single pair its error is raised as it is, so the CLI prints it as the one error line.
    """
    outcomes: list[PairOutcome] = []
    failures: list[str] = []
    for dataset in datasets:
        for model, run_options in [(m, o) for m in models for o in _per_dimension(m, options)]:
            started = time.perf_counter()
            try:
                result = run_eval(dataset, model, run_options)
            except HarnessError as error:
                if len(datasets) * len(models) == 1:
                    raise
                failures.append(f"{dataset} x {getattr(model, 'name', model)}: {error}")
                continue
            outcomes.append(PairOutcome(result, time.perf_counter() - started))
            log.info("wrote %s", result.directory)
    return outcomes, failures
