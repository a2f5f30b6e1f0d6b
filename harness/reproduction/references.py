"""Published numbers (``records/references.yaml``): what a paper or a leaderboard says a model scores.

Each entry names its source and the evaluation conditions that source used, so a comparison can say
exactly what it compares against. Where two sources publish the same cell, both are kept and the one
marked ``preferred`` is used by default. A ``references.yaml`` in ``HARNESS_CONFIG_DIR`` adds sources and
entries; a source with a shipped id, or an entry for a shipped (model, dataset, source) cell, replaces it.

A folder of MTEB results (:mod:`harness.reproduction.mteb_results`) given instead of a references file
becomes the cells of source ``mteb-results`` (the shipped source's conditions, located at the folder),
each carrying its file, ``dataset_revision`` and ``mteb_version``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import StrictFloat, field_validator, model_validator

from harness.core.config import Record, read_yaml, record_files, shipped_dir, validate
from harness.core.errors import HarnessError, InputError
from harness.core.options import option
from harness.models.model_registry import find_record
from harness.reproduction.mteb_results import MtebCell, read_mteb_results
from harness.results.collect import model_labels
from harness.results.result_store import StoredResult

REFERENCES_FILE = "references.yaml"
# The source an MTEB results folder's cells belong to (its conditions: references.yaml's entry).
MTEB_SOURCE = "mteb-results"


class RecordedSettings(Record):
    """How a source ran one model, in the terms a harness result records its settings (what
    ``harness diff RESULT ref:...`` sets beside the result's); ``stated_by`` says where the source states it."""

    stated_by: str
    kind: str | None = None
    title_join: str | None = None
    params: dict[str, Any] = {}
    pooling: str | None = None
    normalize: bool | None = None
    max_length: int | None = None
    query_prefix: str | None = None
    doc_prefix: str | None = None


class SourceRecord(Record):
    """A ``sources:`` entry: where numbers were published (a commit, a paper table or a url)."""

    title: str | None = None
    repo: str | None = None
    file: str | None = None
    commit: str | None = None
    url: str | None = None
    paper: str | None = None
    table: str | None = None
    evaluator: str | None = None
    conditions: dict[str, Any] = {}
    models: dict[str, RecordedSettings] = {}  # model name or alias -> how the source ran it
    note: str = ""

    @model_validator(mode="after")
    def _names_a_location(self) -> SourceRecord:
        if not (self.commit or self.paper or self.url):
            raise ValueError("a source must name a commit, a paper or a url")
        return self


class EntryRecord(Record):
    """An ``entries:`` item: one model x dataset cell of published metrics from one source."""

    model: str
    dataset: str
    source: str
    metrics: dict[str, StrictFloat]
    preferred: bool = False
    verified: bool = True
    file: str | None = None
    commit: str | None = None
    paper: str | None = None
    table: str | None = None
    mteb_version: str | None = None
    dataset_revision: str | None = None  # the data revision the source scored (MTEB: a hub commit)
    model_revision: str | None = None
    split: str | None = None  # when it differs from the source's conditions (MTEB's MSMARCO: dev)
    identical_ids: str | None = None  # this cell's rule, where the source's conditions leave it to the task
    note: str = ""

    @field_validator("metrics")
    @classmethod
    def _lowercase_metric_names(cls, metrics: dict[str, float]) -> dict[str, float]:
        return {name.lower(): float(value) for name, value in metrics.items()}


class ReferencesFile(Record):
    """A whole references file."""

    sources: dict[str, SourceRecord] = {}
    entries: list[EntryRecord] = []


@dataclass(frozen=True)
class Source:
    """Where a set of numbers was published and under which evaluation rules."""

    id: str
    title: str
    location: str  # "repo/file@commit" or "paper, table"
    conditions: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    models: dict[str, RecordedSettings] = field(default_factory=dict)

    def model_settings(self, model: str) -> RecordedSettings | None:
        """How this source ran ``model`` (matched by its name, its record's name or an alias), if it says."""
        names = {name.lower() for name in model_aliases(model)}
        return next((settings for key, settings in self.models.items() if key.lower() in names), None)


@dataclass(frozen=True)
class Reference:
    """One published model x dataset cell (an ``entries:`` item) with the source it names, resolved."""

    entry: EntryRecord
    source: Source
    location: str = ""  # a more precise file / commit than the source's, when the entry has one

    @property
    def model(self) -> str:
        return self.entry.model

    @property
    def dataset(self) -> str:
        return self.entry.dataset

    @property
    def metrics(self) -> dict[str, float]:
        """Metric name (lower case) -> published value."""
        return self.entry.metrics

    @property
    def preferred(self) -> bool:
        return self.entry.preferred

    @property
    def verified(self) -> bool:
        return self.entry.verified

    @property
    def note(self) -> str:
        return self.entry.note.strip()

    @property
    def settings(self) -> RecordedSettings | None:
        """How the source ran this cell's model, where it says (``models:`` of its source)."""
        return self.source.model_settings(self.model)

    @property
    def split(self) -> str | None:
        """The split the numbers are for: the entry's own, else its source's conditions'."""
        return self.entry.split or self.source.conditions.get("split")

    def provenance(self) -> str:
        """What the source recorded about how the numbers were made (mteb version, dataset revision)."""
        parts = [f"mteb {self.entry.mteb_version}" if self.entry.mteb_version else ""]
        if self.entry.dataset_revision:
            parts.append(f"dataset revision {self.entry.dataset_revision}")
        return ", ".join(part for part in parts if part)

    def describe(self) -> str:
        where = self.location or self.source.location
        flag = "" if self.verified else " (unverified)"
        made = f" ({self.provenance()})" if self.provenance() else ""
        return f"{self.source.id}: {where}{made}{flag}"


def _location(
    paper: str | None, table: str | None, repo: str | None, file: str | None, commit: str | None
) -> str:
    if paper:
        return f"{paper}, {table or 'table ?'}"
    text = ":".join(part for part in (repo, file) if part)
    return f"{text}@{commit[:12]}" if commit else text


def _source(source_id: str, record: SourceRecord) -> Source:
    location = _location(record.paper, record.table, record.repo, record.file, record.commit)
    return Source(
        id=source_id,
        title=record.title or source_id,
        location=location or record.url or "",
        conditions=dict(record.conditions),
        note=record.note.strip(),
        models=dict(record.models),
    )


def _reference(entry: EntryRecord, source: Source, record: SourceRecord) -> Reference:
    # An entry's own file (and commit) inside its source's repository, when it names one.
    location = (
        _location(entry.paper, entry.table, record.repo, entry.file, entry.commit) if entry.file else ""
    )
    return Reference(entry, source, location)


def read_references_file(path: str | Path) -> ReferencesFile:
    """One references file, validated (an unknown key or a non-numeric metric names the file and key)."""
    return validate(ReferencesFile, read_yaml(path) or {}, path)


@dataclass
class ReferenceSet:
    """The references read, and one note per thing an import left out (MTEB tasks with no BEIR dataset)."""

    references: list[Reference]
    notes: list[str] = field(default_factory=list)


def read_references(path: str | Path | None = None) -> ReferenceSet:
    """The references of ``path``: a references YAML file, or a folder of MTEB results; by default the
    shipped references file with the user's on top."""
    if path is not None and Path(path).is_dir():
        return _mteb_references(Path(path))
    return ReferenceSet(_yaml_references(path))


def load_references(path: str | Path | None = None) -> list[Reference]:
    """The references of ``path`` (see :func:`read_references`), without the import's notes."""
    return read_references(path).references


def _yaml_references(path: str | Path | None) -> list[Reference]:
    """The references: ``path`` alone, else the shipped file with the user's on top.

    Every entry must name a source defined in one of the files read.
    """
    paths = [Path(path)] if path is not None else record_files(REFERENCES_FILE)
    if path is not None and not paths[0].is_file():
        raise HarnessError(f"references file or MTEB results folder not found: {path}")
    sources: dict[str, tuple[SourceRecord, Source]] = {}
    entries: dict[tuple[str, str, str], tuple[EntryRecord, Path]] = {}
    for file in paths:
        document = read_references_file(file)
        sources.update({key: (record, _source(key, record)) for key, record in document.sources.items()})
        for entry in document.entries:
            entries[(entry.model.lower(), entry.dataset, entry.source)] = (entry, file)
    references: list[Reference] = []
    for entry, file in entries.values():
        if entry.source not in sources:
            raise InputError(
                file, None, f"entry {entry.model} on {entry.dataset} names unknown source {entry.source!r}"
            )
        record, source = sources[entry.source]
        references.append(_reference(entry, source, record))
    return references


def _mteb_source(folder: Path) -> Source:
    """Source ``mteb-results`` (its conditions as references.yaml states them), located at ``folder``."""
    records = [read_references_file(file).sources.get(MTEB_SOURCE) for file in record_files(REFERENCES_FILE)]
    record = next((record for record in reversed(records) if record is not None), None)
    shipped = _source(MTEB_SOURCE, record) if record is not None else None
    return Source(
        id=MTEB_SOURCE,
        title=f"MTEB results folder {display_path(folder)}",
        location=display_path(folder),
        conditions=dict(shipped.conditions) if shipped else {},
        note=shipped.note if shipped else "",
        models=dict(shipped.models) if shipped else {},
    )


def _pinned_revision(model: str) -> str | None:
    try:
        record = find_record(model)
    except HarnessError:
        return None
    return record.revision if record is not None else None


def _mteb_entry(cell: MtebCell, preferred: bool) -> EntryRecord:
    return EntryRecord(
        model=cell.model,
        dataset=cell.dataset,
        source=MTEB_SOURCE,
        metrics=cell.metrics,
        preferred=preferred,
        file=str(cell.file),
        mteb_version=cell.mteb_version,
        dataset_revision=cell.dataset_revision,
        model_revision=cell.revision,
        split=cell.split,
        identical_ids=f"{'dropped' if cell.identical_ids_dropped else 'kept'} (mteb task {cell.task})",
        note=f"MTEB task {cell.task}, {cell.mteb_model} revision {cell.revision}",
    )


def _mteb_references(folder: Path) -> ReferenceSet:
    """An MTEB results folder's cells; of two revisions of one model on one dataset, the one the model
    record pins (else the first) is preferred and the other kept."""
    imported = read_mteb_results(folder)
    source = _mteb_source(folder)
    chosen: dict[tuple[str, str], MtebCell] = {}
    for cell in imported.cells:
        key = (cell.model.lower(), cell.dataset)
        if key not in chosen or cell.revision == _pinned_revision(cell.model):
            chosen[key] = cell
    references = [
        Reference(
            _mteb_entry(cell, chosen[(cell.model.lower(), cell.dataset)] is cell),
            source,
            display_path(cell.file),
        )
        for cell in imported.cells
    ]
    return ReferenceSet(references, imported.notes)


def display_path(path: str | Path) -> str:
    """``path`` as a report may show it: a shipped record relative to the package's folder
    (``harness/records/suites/NAME.yaml``), anything else relative to the current directory."""
    path = Path(path).resolve()
    package_parent = shipped_dir().resolve().parent.parent
    if path.is_relative_to(package_parent / "harness"):
        return path.relative_to(package_parent).as_posix()
    return os.path.relpath(path)


def model_aliases(name: str) -> set[str]:
    """``name`` plus, for a registry model, its record name, aliases and hub id (how sources name it)."""
    names = {name}
    try:
        record = find_record(name)
    except HarnessError:
        record = None
    if record is not None:
        names |= {record.name, *record.aliases}
        if record.model_id:
            names.add(record.model_id)
    return names


def find_references(
    references: list[Reference], model_names: set[str], dataset: str, metric: str | None = None
) -> list[Reference]:
    """Entries for any of ``model_names`` on ``dataset`` (optionally carrying ``metric``), preferred first."""
    wanted = {name.lower() for name in model_names}
    found = [
        ref
        for ref in references
        if ref.model.lower() in wanted
        and ref.dataset == dataset
        and (metric is None or metric.lower() in ref.metrics)
    ]
    return sorted(found, key=lambda ref: (not ref.preferred, ref.source.id))


def published_results(results: list[StoredResult], references: list[Reference]) -> list[StoredResult]:
    """The preferred published cell of each model on each dataset ``results`` hold, as a result without
    per-query values (a table column ``MODEL (SOURCE)`` beside the model's own)."""
    published: list[StoredResult] = []
    seen: set[tuple[str, str]] = set()
    for result in results:
        if (result.model_slug, result.dataset) in seen:
            continue
        seen.add((result.model_slug, result.dataset))
        found = find_references(references, model_labels(result, model_aliases), result.dataset)
        if not found:
            continue
        reference = found[0]
        published.append(
            StoredResult(
                directory=Path(reference.location or reference.source.location),
                dataset=result.dataset,
                split=reference.split or result.split,
                model=f"{result.model} ({reference.source.id})",
                model_slug=f"{result.model_slug}@{reference.source.id}",
                metrics=dict(reference.metrics),
                per_query={},
                n_queries=0,
                settings={"published_by": reference.describe()},
            )
        )
    return published


def references_option(use: str) -> Any:
    """``--references PATH``: a references YAML file or a folder of MTEB results, for ``use``."""
    return option(
        None,
        parse=Path,
        role="input",
        metavar="PATH",
        help=f"{use}: a references YAML file, or a folder of MTEB results (cells of source mteb-results)",
    )
