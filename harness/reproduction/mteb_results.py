"""Read a folder of MTEB results into published cells: model x BEIR dataset -> metrics, with provenance.

The folder is laid out as the MTEB results repository (embeddings-benchmark/results), at any level:

- the repository itself (a ``results/`` folder inside) or its ``results/`` folder:
  ``<org>__<model>/<revision>/<Task>.json``;
- one model's folder: ``<revision>/<Task>.json``;
- one revision folder: ``<Task>.json`` (the model named by its ``model_meta.json``, else by its parent folder);
- flat copies named ``<org>__<model>_<revision>_<Task>.json`` (the revision is what follows the model's
  first ``_``; a model whose own name holds ``_`` needs the repository layout).

Each ``<Task>.json`` is mteb's ``TaskResult`` (``scores.<split>[i]`` per subset, mteb 1.11 and later) or
the older form (``<split>: {...}``); its v2 keys (``ndcg_at_10``) and older keys (``NDCG@10``) both read
as the harness's metric names. Tasks are mapped to BEIR datasets by ``records/mteb_tasks.yaml``; a
dataset there reported as a group (CQADupStack) gets the plain mean over its tasks when all are present.
Each cell keeps the file's ``dataset_revision`` and ``mteb_version`` as its provenance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import read_json_object
from harness.datasets.mteb_tasks import MtebTasks, harness_metric, load_mteb_tasks

MODEL_META_FILE = "model_meta.json"
# mteb's name for a model with no revision (mteb/cache/result_cache.py, ModelMeta.revision None).
NO_REVISION = "no_revision_available"
_LAYOUT = (
    "<org>__<model>/<revision>/<Task>.json, <revision>/<Task>.json, <Task>.json beside model_meta.json, "
    "or <org>__<model>_<revision>_<Task>.json"
)


@dataclass(frozen=True)
class MtebCell:
    """One model x dataset cell read from MTEB result files."""

    model: str  # the harness's name for the model (records/mteb_tasks.yaml models:, else MTEB's name)
    mteb_model: str  # as the results folder names it
    revision: str  # the model revision folder
    dataset: str
    split: str
    task: str  # the MTEB task, or "mean of N tasks" for a group
    metrics: dict[str, float]
    file: Path  # the task file (a group: the revision folder)
    dataset_revision: str | None = None
    mteb_version: str | None = None
    identical_ids_dropped: bool = False  # the task's ignore_identical_ids (records/mteb_tasks.yaml)


@dataclass
class MtebImport:
    """What a folder gave: the cells, and one note per thing left out."""

    folder: Path
    cells: list[MtebCell] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _TaskFile:
    path: Path
    model: str
    revision: str


# ------------------------------------------------------------------------------------------ layout


def _is_task_file(path: Path) -> bool:
    return path.is_file() and path.suffix == ".json" and path.name != MODEL_META_FILE


def _meta_name(folder: Path) -> tuple[str, str] | None:
    """``(name, revision)`` from a revision folder's ``model_meta.json``, as mteb reads it."""
    path = folder / MODEL_META_FILE
    if not path.is_file():
        return None
    meta = read_json_object(path)
    name, revision = meta.get("name"), meta.get("revision")
    if not isinstance(name, str) or not name:
        raise InputError(path, None, "no 'name' naming the model")
    return name, revision if isinstance(revision, str) and revision else folder.name


def _revision_folder(folder: Path, model_folder: str) -> list[_TaskFile]:
    """A revision folder's task files: the model as its model_meta.json names it, else as mteb reads the
    path (``<org>__<model>`` -> ``org/model``)."""
    model, revision = _meta_name(folder) or (model_folder.replace("__", "/"), folder.name)
    return [_TaskFile(path, model, revision) for path in sorted(folder.iterdir()) if _is_task_file(path)]


def _flat_file(path: Path, task: str) -> _TaskFile | None:
    """``<org>__<model>_<revision>_<Task>.json`` -> its model and revision; None when not so named."""
    prefix = path.stem.removesuffix(f"_{task}")
    if prefix == path.stem or "__" not in prefix:
        return None
    org, rest = prefix.split("__", 1)
    model, _, revision = rest.partition("_")
    return _TaskFile(path, f"{org}/{model}", revision or NO_REVISION) if model else None


def _task_files(folder: Path) -> list[_TaskFile]:
    """Every task file below ``folder`` with its model and revision; an unknown layout is one error line."""
    if not folder.is_dir():
        raise HarnessError(f"MTEB results folder not found: {folder}")
    if (folder / "results").is_dir() and not any(_is_task_file(path) for path in folder.iterdir()):
        folder = folder / "results"  # a clone of the results repository
    in_models = sorted({path.parent for path in folder.glob("*/*/*.json") if _is_task_file(path)})
    if in_models:  # the repository's results/ folder: <model>/<revision>/<Task>.json
        return [task for revision in in_models for task in _revision_folder(revision, revision.parent.name)]
    revisions = sorted({path.parent for path in folder.glob("*/*.json") if _is_task_file(path)})
    if revisions:  # one model's folder: <revision>/<Task>.json
        return [task for revision in revisions for task in _revision_folder(revision, folder.name)]
    files = sorted(path for path in folder.iterdir() if _is_task_file(path))
    if not files:
        raise HarnessError(f"{folder} is not an MTEB results folder: no task file ({_LAYOUT}) found")
    if (folder / MODEL_META_FILE).is_file():  # one revision folder
        return _revision_folder(folder, folder.parent.name)
    flat = [_flat_file(path, _task_name(path, read_json_object(path))) for path in files]
    if all(flat):
        return [task_file for task_file in flat if task_file is not None]
    if "__" in folder.parent.name:  # a revision folder inside <org>__<model>/, as mteb reads one
        return _revision_folder(folder, folder.parent.name)
    unnamed = next(path.name for task_file, path in zip(flat, files, strict=True) if task_file is None)
    raise HarnessError(
        f"{folder} is not an MTEB results folder: {unnamed} is not named <org>__<model>_<revision>_<Task>.json, "
        f"and the folder has no {MODEL_META_FILE} and is not inside an <org>__<model> folder ({_LAYOUT})"
    )


# ------------------------------------------------------------------------------------------ scores


def _task_name(path: Path, payload: dict[str, Any]) -> str:
    name = payload.get("task_name", payload.get("mteb_dataset_name"))
    if not isinstance(name, str) or not name:
        raise InputError(
            path, None, "not an MTEB task result: no 'task_name' (mteb 1.11+) or 'mteb_dataset_name' (older)"
        )
    return name


def _split_scores(path: Path, payload: dict[str, Any], split: str) -> dict[str, Any] | None:
    """The scores of ``split`` (the ``default`` subset, else the first): v1.11+ or the older layout."""
    if "scores" in payload:
        scores = payload["scores"]
        if not isinstance(scores, dict):
            raise InputError(path, None, "'scores' must map splits to lists of subset scores")
        subsets = scores.get(split)
        if subsets is None:
            return None
        if not isinstance(subsets, list) or not all(isinstance(subset, dict) for subset in subsets):
            raise InputError(path, None, f"'scores.{split}' must be a list of subset scores")
        default = [subset for subset in subsets if subset.get("hf_subset", "default") == "default"]
        return (default or subsets or [None])[0]
    scores = payload.get(split)
    if scores is None:
        return None
    if not isinstance(scores, dict):
        raise InputError(path, None, f"'{split}' must map score names to numbers")
    return scores


def _metrics(scores: dict[str, Any]) -> dict[str, float]:
    """The ranking metrics among a subset's scores, under the harness's names (v2 keys win over old ones)."""
    metrics: dict[str, float] = {}
    for key in sorted(scores, key=lambda name: "@" not in name):  # mteb 2's keys last, so they win
        name = harness_metric(key)
        value = scores[key]
        if name and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            metrics[name] = float(value)
    return metrics


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _read_cell(
    task_file: _TaskFile, tasks: MtebTasks, notes: list[str], unmapped: set[str]
) -> MtebCell | None:
    payload = read_json_object(task_file.path)
    task = _task_name(task_file.path, payload)
    dataset = tasks.dataset_of(task)
    if dataset is None:
        unmapped.add(task)
        return None
    split = tasks.datasets[dataset].split
    scores = _split_scores(task_file.path, payload, split)
    metrics = _metrics(scores or {})
    if not metrics:
        notes.append(f"{task_file.path} has no {split!r} ranking scores for {task}; left out")
        return None
    return MtebCell(
        model=tasks.harness_model(task_file.model),
        mteb_model=task_file.model,
        revision=task_file.revision,
        dataset=dataset,
        split=split,
        task=task,
        metrics=metrics,
        file=task_file.path,
        dataset_revision=_text(payload.get("dataset_revision")),
        mteb_version=_text(payload.get("mteb_version")),
        identical_ids_dropped=tasks.datasets[dataset].ignore_identical_ids,
    )


def _group_cells(cells: list[MtebCell], tasks: MtebTasks, notes: list[str]) -> list[MtebCell]:
    """A group's mean cell for every model revision holding all its members (BEIR's CQADupStack mean)."""
    grouped: list[MtebCell] = []
    for name, group in tasks.groups.items():
        for key in sorted({(cell.mteb_model, cell.revision) for cell in cells}):
            members = {cell.dataset: cell for cell in cells if (cell.mteb_model, cell.revision) == key}
            present = [members[member] for member in group.members if member in members]
            if not present:
                continue
            if len(present) < len(group.members):
                notes.append(
                    f"{key[0]} ({key[1]}): {len(present)} of the {len(group.members)} tasks of {name}; "
                    "no mean is formed"
                )
                continue
            shared = set.intersection(*(set(cell.metrics) for cell in present))
            versions = sorted({cell.mteb_version for cell in present if cell.mteb_version})
            first = present[0]
            grouped.append(
                MtebCell(
                    model=first.model,
                    mteb_model=first.mteb_model,
                    revision=first.revision,
                    dataset=name,
                    split=first.split,
                    task=f"mean of {len(present)} tasks ({', '.join(cell.task for cell in present)})",
                    metrics={
                        m: sum(cell.metrics[m] for cell in present) / len(present) for m in sorted(shared)
                    },
                    file=first.file.parent,
                    mteb_version=", ".join(versions) or None,
                    identical_ids_dropped=first.identical_ids_dropped,
                )
            )
    return grouped


def read_mteb_results(folder: str | Path, tasks: MtebTasks | None = None) -> MtebImport:
    """The cells of an MTEB results folder; tasks with no BEIR equivalent are named in one note line.

    A folder in none of the layouts, a task file that is not a task result, or a folder with no task
    that maps to a BEIR dataset, is one error line.
    """
    folder = Path(folder)
    tasks = tasks or load_mteb_tasks()
    imported = MtebImport(folder)
    unmapped: set[str] = set()
    for task_file in _task_files(folder):
        cell = _read_cell(task_file, tasks, imported.notes, unmapped)
        if cell is not None:
            imported.cells.append(cell)
    if not imported.cells:
        found = ", ".join(sorted(unmapped)) or "none with scores"
        raise HarnessError(
            f"{folder}: no MTEB task with a BEIR equivalent (found: {found}); the tasks the harness maps are "
            "listed in records/mteb_tasks.yaml"
        )
    imported.cells += _group_cells(imported.cells, tasks, imported.notes)
    if unmapped:
        imported.notes.insert(
            0,
            f"{folder}: MTEB task(s) with no BEIR equivalent left out: {', '.join(sorted(unmapped))}",
        )
    return imported
