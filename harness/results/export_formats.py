"""A harness result written in other tools' formats: MTEB's result files and Hugging Face's model-index.

``mteb``: the MTEB results repository's layout, ``<org>__<model>/<revision>/<Task>.json`` (mteb's
``TaskResult``: ``dataset_revision``, ``task_name``, ``mteb_version``, ``scores.<split>`` = one subset's
scores under mteb's keys, ``main_score`` = ``ndcg_at_10``, ``evaluation_time``), with ``model_meta.json``
(``name``, ``revision``) and ``run_settings.jsonl`` (one line per task: its splits, subsets and the
library versions, as mteb's ``ResultCache.save_to_cache`` writes it). The numbers are rounded as mteb
rounds its own: nDCG, MAP, recall, precision and hit rate to 5 decimals (mteb's
``parse_metrics_from_scores``), every score to 6 on disk (``TaskResult.to_disk``). ``mteb_version`` is
null (mteb did not compute them); ``dataset_revision`` is the harness's data checksum (below).

``model-index``: the YAML a Hugging Face model card carries in its front matter, one entry per model,
one result per dataset (task type ``retrieval``, the dataset's name, hub id, split and revision, every
metric under mteb's metric names, and the source when its url is given: Hugging Face takes a source
name only with a url), checked against the keys the model-index spec requires.

A dataset's revision here is ``sha256:`` + a digest of the data files' checksums the result recorded
(corpus, queries, qrels): the data the numbers were computed on, not a hub commit.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, StrictFloat

from harness import __version__
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write, atomic_write_json, iter_lines, parse_json, read_json_or_none
from harness.datasets.dataset_registry import dataset_registry
from harness.datasets.mteb_tasks import MtebTasks, harness_metric, load_mteb_tasks, mteb_metric
from harness.evaluation.metrics import pretty_metric
from harness.results.result_store import StoredResult

EXPORT_FORMATS = ("mteb", "model-index")
MODEL_META_FILE = "model_meta.json"
RUN_SETTINGS_FILE = "run_settings.jsonl"
MODEL_INDEX_FILE = "model-index.yaml"
# mteb's folder name for a model with no revision (mteb/cache/result_cache.py).
NO_REVISION = "no_revision_available"
HF_SUBSET = "default"
# Decimals mteb keeps: its evaluator rounds these families to 5, TaskResult.to_disk every score to 6.
_EVALUATOR_DECIMALS, _DISK_DECIMALS = 5, 6
_EVALUATOR_ROUNDED = ("ndcg_at_", "map_at_", "recall_at_", "precision_at_", "hit_rate_at_")
# The packages mteb records in run_settings.jsonl (mteb/cache/result_cache.py _get_package_versions).
_RUN_SETTINGS_PACKAGES = ("mteb", "torch", "sentence-transformers", "flash-attn", "transformers")
HARNESS_NAME = "beir-harness"


# ----------------------------------------------------------------------------------- identities


def _section(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def model_identity(result: StoredResult) -> tuple[str, str]:
    """``(model name, revision)`` as MTEB names them: the hub id and commit where known."""
    identity = _section(_section(result.provenance.get("model")).get("identity"))
    name = identity.get("model_id") if isinstance(identity.get("model_id"), str) else result.model
    if "/" in name and (name.startswith(("/", ".", "~")) or Path(name).exists()):
        name = result.model_slug  # a local checkpoint folder: the slug the harness gave it
    revision = identity.get("revision")
    return name, revision if isinstance(revision, str) and revision else NO_REVISION


def data_revision(result: StoredResult) -> str:
    """``sha256:`` + a digest of the data files' checksums the result recorded (what was scored)."""
    fingerprint = result.data_fingerprint
    if not fingerprint:
        raise HarnessError(
            f"{result.directory}: the result records no data checksums (provenance.json dataset.fingerprint); "
            "rerun the evaluation"
        )
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(fingerprint.items()))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def _rounded(key: str, value: float) -> float:
    if key.startswith(_EVALUATOR_ROUNDED):
        value = round(value, _EVALUATOR_DECIMALS)
    return round(value, _DISK_DECIMALS)


def mteb_scores(result: StoredResult, tasks: MtebTasks) -> dict[str, Any]:
    """The subset scores mteb would write for the result's metrics (its keys, its rounding)."""
    record = tasks.task_of(result.dataset)
    scores: dict[str, Any] = {}
    for metric, value in sorted(result.metrics.items()):
        key = mteb_metric(metric)
        if key is not None:
            scores[key] = _rounded(key, value)
    if record.main_score not in scores:
        metric = harness_metric(record.main_score) or record.main_score
        raise HarnessError(
            f"{result.directory}: no {metric}, MTEB's main score for {record.task}; rerun with it among --metrics"
        )
    return {
        **scores,
        "main_score": scores[record.main_score],
        "hf_subset": HF_SUBSET,
        "languages": record.languages,
    }


# ------------------------------------------------------------------------------------------ mteb


def _timestamp(result: StoredResult) -> float | None:
    created = result.provenance.get("created_at")
    try:
        return datetime.fromisoformat(created).timestamp() if isinstance(created, str) else None
    except ValueError:
        return None


def task_result(result: StoredResult, tasks: MtebTasks) -> dict[str, Any]:
    """The result as mteb's ``TaskResult`` JSON."""
    total = _section(result.provenance.get("timings")).get("total")
    return {
        "dataset_revision": data_revision(result),
        "task_name": tasks.task_of(result.dataset).task,
        "mteb_version": None,
        "scores": {result.split: [mteb_scores(result, tasks)]},
        "evaluation_time": float(total) if isinstance(total, (int, float)) else None,
        "kg_co2_emissions": None,
        "date": _timestamp(result),
    }


def _run_settings(result: StoredResult, task: str) -> dict[str, Any]:
    versions = _section(_section(result.provenance.get("environment")).get("versions"))
    options = _section(result.provenance.get("options"))
    batch_size = options.get("batch_size")
    return {
        "task": task,
        "splits": [result.split],
        "version": {
            **{package: versions.get(package) for package in _RUN_SETTINGS_PACKAGES},
            HARNESS_NAME: result.provenance.get("harness_version"),
        },
        "encode_kwargs": {"batch_size": batch_size} if isinstance(batch_size, int) else {},
        "subsets": [HF_SUBSET],
    }


def _model_meta(result: StoredResult, name: str, revision: str) -> dict[str, Any]:
    settings = _section(_section(result.provenance.get("model")).get("settings"))
    return {
        "name": name,
        "revision": revision,
        "max_tokens": settings.get("max_length"),
        "framework": [],
        "modalities": ["text"],
        "reference": f"https://huggingface.co/{name}" if "/" in name else None,
    }


def _merged_run_settings(path: Path, entries: list[dict[str, Any]]) -> str:
    """The folder's run settings with ``entries`` replacing the lines of the tasks they describe."""
    replaced = {entry["task"] for entry in entries}
    kept: list[dict[str, Any]] = []
    if path.is_file():
        for number, line in iter_lines(path):
            try:
                entry = parse_json(line, path, number) if line.strip() else None
            except InputError:
                continue  # mteb skips an unreadable line too (_read_run_settings_from_file)
            if isinstance(entry, dict) and entry.get("task") not in replaced:
                kept.append(entry)
    return "".join(json.dumps(entry) + "\n" for entry in [*kept, *entries])


def write_mteb(results: list[StoredResult], output: Path) -> list[Path]:
    """``output/<org>__<model>/<revision>/<Task>.json`` per result, with model_meta.json and run_settings.jsonl.

    Every file is computed before the first is written, so a result that cannot be exported (a dataset
    with no MTEB task, no nDCG@10) leaves the output as it was.
    """
    tasks = load_mteb_tasks()
    files: dict[Path, dict[str, Any]] = {}
    settings: dict[Path, list[dict[str, Any]]] = defaultdict(list)
    meta: dict[Path, dict[str, Any]] = {}
    for result in results:
        name, revision = model_identity(result)
        folder = output / name.replace("/", "__") / revision
        task = tasks.task_of(result.dataset).task
        payload = task_result(result, tasks)
        if folder / f"{task}.json" in files:  # another split of the same dataset: one file, both splits
            files[folder / f"{task}.json"]["scores"].update(payload["scores"])
        else:
            files[folder / f"{task}.json"] = payload
        settings[folder].append(_run_settings(result, task))
        meta.setdefault(folder, _model_meta(result, name, revision))
    for path, payload in files.items():
        atomic_write_json(path, payload)
    written = list(files)
    for folder, entries in settings.items():
        existing = read_json_or_none(folder / MODEL_META_FILE)
        if existing is None or existing.get("name") != meta[folder]["name"]:
            atomic_write_json(folder / MODEL_META_FILE, meta[folder])
            written.append(folder / MODEL_META_FILE)
        merged = _merged_run_settings(folder / RUN_SETTINGS_FILE, entries)
        with atomic_write(folder / RUN_SETTINGS_FILE) as handle:
            handle.write(merged)
        written.append(folder / RUN_SETTINGS_FILE)
    return written


# ----------------------------------------------------------------------------------- model-index


class _Spec(BaseModel):
    # The model-index spec (huggingface/hub-docs modelcard.md): required keys have no default here.
    model_config = ConfigDict(extra="forbid", frozen=True)


class IndexTask(_Spec):
    type: str
    name: str | None = None


class IndexDataset(_Spec):
    name: str
    type: str
    split: str | None = None
    revision: str | None = None


class IndexMetric(_Spec):
    type: str
    value: StrictFloat
    name: str | None = None


class IndexSource(_Spec):
    # huggingface_hub refuses a source name without a url (EvalResult.__post_init__).
    name: str
    url: str


class IndexResult(_Spec):
    task: IndexTask
    dataset: IndexDataset
    metrics: list[IndexMetric]
    source: IndexSource | None = None


class ModelIndexEntry(_Spec):
    name: str
    results: list[IndexResult]


def _index_metric(metric: str, value: float) -> IndexMetric:
    return IndexMetric(
        type=mteb_metric(metric) or metric.replace("@", "_at_"), value=value, name=pretty_metric(metric)
    )


def index_result(result: StoredResult, source_url: str | None = None) -> IndexResult:
    """One dataset's entry: task, dataset (name, hub id, split, data revision), every metric, and with
    ``source_url`` (where the numbers are published) the source."""
    record = dataset_registry().get(result.dataset)
    title = record.title if record is not None and record.title else result.dataset
    return IndexResult(
        task=IndexTask(type="retrieval", name="Retrieval"),
        dataset=IndexDataset(
            name=f"BEIR {title}",
            type=(record.hf_corpus if record is not None and record.hf_corpus else result.dataset),
            split=result.split,
            revision=data_revision(result),
        ),
        metrics=[_index_metric(metric, value) for metric, value in result.metrics.items()],
        source=IndexSource(name=_source_name(result), url=source_url) if source_url else None,
    )


def _source_name(result: StoredResult) -> str:
    return f"{HARNESS_NAME} {result.provenance.get('harness_version') or __version__}"


def model_index(
    results: list[StoredResult], source_url: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``{"model-index": [...]}``: one entry per model, each result one of its results."""
    entries: dict[str, list[IndexResult]] = defaultdict(list)
    for result in results:
        entries[model_identity(result)[0]].append(index_result(result, source_url))
    document = [ModelIndexEntry(name=name, results=found) for name, found in entries.items()]
    return {"model-index": [entry.model_dump(exclude_none=True) for entry in document]}


def write_model_index(results: list[StoredResult], output: Path, source_url: str | None = None) -> list[Path]:
    """``output/<org>__<model>/model-index.yaml`` per model: paste it into the card's front matter."""
    by_model: dict[str, list[StoredResult]] = defaultdict(list)
    for result in results:
        by_model[model_identity(result)[0]].append(result)
    texts = {
        output / name.replace("/", "__") / MODEL_INDEX_FILE: yaml.safe_dump(
            model_index(members, source_url), sort_keys=False, allow_unicode=True
        )
        for name, members in by_model.items()
    }
    for path, text in texts.items():
        with atomic_write(path) as handle:
            handle.write(text)
    return list(texts)


def export_results(
    results: list[StoredResult], format: str, output: Path, *, source_url: str | None = None
) -> list[Path]:
    """Write ``results`` in ``format`` (``mteb`` or ``model-index``) below ``output``; the files written.

    ``source_url``: where the numbers are published, the model-index's source (none without it).
    """
    if format == "mteb":
        return write_mteb(results, output)
    if format == "model-index":
        return write_model_index(results, output, source_url)
    raise HarnessError(f"unknown export format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}")
