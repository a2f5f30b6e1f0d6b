"""The results layout: one folder per (dataset, model, settings) holding the run, its metrics and its provenance.

``results/<dataset>/<model-slug>/`` holds a model's result under the default settings; a run with any
setting that can move a number away from its default (``top_k``, ``index``, ``precision``, the weights
given with ``--weights``...) has its own folder ``<model-slug>@<settings>``, e.g. ``bm25@top_k=100``
(:func:`result_key`), so an ablation never replaces another result. Each folder contains

- ``run.trec``: the TREC run file (real ranks, full-precision scores, trec_eval order);
- ``metrics.json``: dataset, split, model, the aggregate metrics, per-query values and the evaluation settings;
- ``provenance.json``: everything that produced the numbers (config, data checksums, model identity,
  library versions, hardware, timings).

A result folder is written whole or not at all: files go to a hidden sibling folder first, which then
replaces the old folder, so an interrupted run never leaves a half-written result behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.fileio import atomic_write_json, read_json_object
from harness.core.output_guard import RESULT_MARKERS
from harness.core.staging import owner_tag, staged_folder

RUN_FILE = "run.trec"
# The two files that together mark a result folder (the output guard refuses writes into one).
METRICS_FILE, PROVENANCE_FILE = RESULT_MARKERS
_REQUIRED_METRICS_KEYS = ("dataset", "split", "model", "model_slug", "metrics", "per_query")
# Between a model's slug and its non-default settings in a folder name: slugs never hold it (slugify).
SETTINGS_MARK = "@"
# A settings suffix longer than this, or one whose values need characters a folder name should not
# hold, ends in a short hash of the exact settings instead of spelling them all out.
_READABLE_SUFFIX = 48
_SAFE_VALUE = re.compile(r"[A-Za-z0-9._-]+")


@dataclass
class StoredResult:
    """One result folder, read back."""

    directory: Path
    dataset: str
    split: str
    model: str
    model_slug: str
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    settings: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)
    judged: dict[str, Any] = field(default_factory=dict)  # metrics.json "judged" (empty in older results)
    ties: dict[str, Any] = field(default_factory=dict)  # metrics.json "ties" (empty in older results)
    # True when the pipeline returned this folder instead of recomputing it (same config).
    reused: bool = False
    # metrics.json "identity_settings": the settings that moved away from their defaults (empty in older
    # results and for default runs), and "label": the name tables print (None in older results).
    identity_settings: dict[str, Any] = field(default_factory=dict)
    stored_label: str | None = None

    @property
    def label(self) -> str:
        """The column label: ``--label``, else the model (a local folder by its name) and its settings.

        Older results, written before labels were stored, get the label their settings would have given.
        Labels are unique per result only together: :func:`harness.results.collect.display_labels`.
        """
        if self.stored_label:
            return self.stored_label
        return settings_label(self.model_name, self.identity_settings)

    @property
    def model_name(self) -> str:
        """The model's name without a path: a local checkpoint folder is known by its folder name."""
        model_info = _mapping(self.provenance.get("model"))
        folder_name = _mapping(model_info.get("identity")).get("folder_name")
        if self.model_slug.startswith("local__") and isinstance(folder_name, str) and folder_name:
            return folder_name
        return self.model

    @property
    def run_path(self) -> Path:
        return self.directory / RUN_FILE

    @property
    def data_fingerprint(self) -> dict[str, str]:
        fingerprint = _mapping(_mapping(self.provenance.get("dataset")).get("fingerprint"))
        return {str(name): value for name, value in fingerprint.items() if isinstance(value, str)}

    @property
    def runtime_label(self) -> str:
        """How the run computed its scores: ``exact (torch) fp32``, ``onnx int8``, ``bm25s`` ..."""
        retrieval = _mapping(self.provenance.get("retrieval"))
        # Results written before the label was recorded: the encoder's label, or BM25's library.
        label = retrieval.get("label") or _mapping(retrieval.get("encoder")).get("label")
        return str(label or _mapping(retrieval.get("bm25_settings")).get("library") or "-")

    def per_query_values(self, metric: str) -> dict[str, float]:
        return {qid: values[metric] for qid, values in self.per_query.items() if metric in values}

    def judged_share(self, k: int) -> float | None:
        """Mean judged@k, or None when the result did not record it."""
        value = _mapping(self.judged.get("mean")).get(f"judged@{k}")
        return float(value) if isinstance(value, (int, float)) else None


def result_dir(results_dir: str | Path, dataset: str, model_slug: str) -> Path:
    """Where the result of ``model_slug`` on ``dataset`` lives (``/`` in cqadupstack names becomes a folder).

    ``model_slug`` is a :func:`result_key`: the model's slug, with its non-default settings when it has any.
    """
    return Path(results_dir) / dataset / model_slug


def _settings_text(settings: dict[str, Any]) -> str:
    return "+".join(f"{name}={_value_text(settings[name])}" for name in sorted(settings))


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True)


def result_key(model_slug: str, settings: dict[str, Any]) -> str:
    """The result folder's name: the slug alone for default settings, else ``slug@name=value+...``.

    Deterministic; values that a folder name should not hold, or too many of them, become a readable
    start plus a hash of the exact settings, so two different settings never share a folder.
    """
    if not settings:
        return model_slug
    text = _settings_text(settings)
    values_safe = all(_SAFE_VALUE.fullmatch(_value_text(value)) for value in settings.values())
    if values_safe and len(text) <= _READABLE_SUFFIX:
        return f"{model_slug}{SETTINGS_MARK}{text}"
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9._=+-]+", "-", text)[: _READABLE_SUFFIX - 11].rstrip("-+")
    return f"{model_slug}{SETTINGS_MARK}{readable}-{digest}"


def settings_label(name: str, settings: dict[str, Any]) -> str:
    """A column label: the model's name and its non-default settings, e.g. ``bm25 (top_k=100)``."""
    if not settings:
        return name
    shown = ", ".join(f"{key}={_value_text(settings[key])}" for key in sorted(settings))
    return f"{name} ({shown})"


def write_result(
    directory: str | Path,
    *,
    metrics_payload: dict[str, Any],
    provenance: dict[str, Any],
    write_run_file: Any,
) -> Path:
    """Write a complete result folder atomically.

    ``write_run_file(path)`` writes the run into the staging folder; ``metrics_payload`` must carry
    at least the keys of :data:`_REQUIRED_METRICS_KEYS`. The staging folder names its owner, so the
    leftovers of a killed writer are freed by the next write of the same result (``staged_folder``).
    """
    directory = Path(directory)
    missing = [key for key in _REQUIRED_METRICS_KEYS if key not in metrics_payload]
    if missing:
        raise ValueError(f"metrics payload lacks {missing}")
    directory.parent.mkdir(parents=True, exist_ok=True)
    with staged_folder(directory) as staging:
        write_run_file(staging / RUN_FILE)
        atomic_write_json(staging / METRICS_FILE, metrics_payload)
        atomic_write_json(staging / PROVENANCE_FILE, provenance)
        if directory.exists():
            # Swap in two renames so a reader sees either the old folder or the new one, never a mix; the
            # old one is set aside under a staging name, so a kill between the renames leaves it freeable.
            retired = directory.with_name(f".{directory.name}.old{owner_tag()}{secrets.token_hex(3)}.tmp")
            os.replace(directory, retired)
            os.replace(staging, directory)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, directory)
    return directory


def _mapping(value: Any) -> dict[str, Any]:
    """A provenance section as a mapping (an edited file may hold anything there: then empty)."""
    return value if isinstance(value, dict) else {}


def load_result(directory: str | Path) -> StoredResult:
    """Read a result folder; a corrupt or incomplete one raises :class:`InputError` naming the file."""
    directory = Path(directory)
    metrics_path = directory / METRICS_FILE
    payload = read_json_object(metrics_path, fix="rerun the evaluation")
    missing = [key for key in _REQUIRED_METRICS_KEYS if key not in payload]
    if missing:
        raise InputError(metrics_path, None, f"missing keys {', '.join(missing)}", "rerun the evaluation")
    if not isinstance(payload["metrics"], dict) or not all(
        isinstance(value, (int, float)) for value in payload["metrics"].values()
    ):
        raise InputError(metrics_path, None, "'metrics' must map metric names to numbers")
    for key in ("dataset", "split", "model", "model_slug"):
        if not isinstance(payload[key], str):
            raise InputError(metrics_path, None, f"{key!r} must be text", "rerun the evaluation")
    per_query = payload["per_query"]
    n_queries = payload.get("n_queries", len(per_query) if isinstance(per_query, dict) else 0)
    if not isinstance(n_queries, int) or isinstance(n_queries, bool) or n_queries < 0:
        raise InputError(metrics_path, None, "'n_queries' must be a whole number", "rerun the evaluation")
    settings = payload.get("settings", {})
    if not isinstance(settings, dict):
        raise InputError(metrics_path, None, "'settings' must be a mapping", "rerun the evaluation")
    provenance_path = directory / PROVENANCE_FILE
    provenance = (
        read_json_object(provenance_path, fix="rerun the evaluation") if provenance_path.exists() else {}
    )
    return StoredResult(
        directory=directory,
        dataset=payload["dataset"],
        split=payload["split"],
        model=payload["model"],
        model_slug=payload["model_slug"],
        metrics={name: float(value) for name, value in payload["metrics"].items()},
        per_query=per_query,
        n_queries=n_queries,
        settings=settings,
        provenance=provenance,
        judged=payload.get("judged") if isinstance(payload.get("judged"), dict) else {},
        ties=payload.get("ties") if isinstance(payload.get("ties"), dict) else {},
        identity_settings=_mapping(payload.get("identity_settings")),
        stored_label=payload["label"] if isinstance(payload.get("label"), str) else None,
    )


def iter_result_dirs(results_dir: str | Path) -> Iterator[Path]:
    """Every folder below ``results_dir`` holding a metrics file, in sorted order (hidden staging folders skipped)."""
    root = Path(results_dir)
    for metrics_path in sorted(root.rglob(METRICS_FILE)):
        relative = metrics_path.parent.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        yield metrics_path.parent


def scan_results(results_dir: str | Path) -> tuple[list[StoredResult], list[tuple[Path, str]]]:
    """All readable results, and ``(path, reason)`` for each folder that could not be read."""
    good: list[StoredResult] = []
    bad: list[tuple[Path, str]] = []
    for directory in iter_result_dirs(results_dir):
        try:
            good.append(load_result(directory))
        except InputError as error:
            bad.append((directory, str(error)))
    return good, bad
