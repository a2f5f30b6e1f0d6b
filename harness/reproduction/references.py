"""Published numbers (``records/references.yaml``): what a paper or a leaderboard says a model scores.

Each entry names its source and the evaluation conditions that source used, so a comparison can say
exactly what it compares against. Where two sources publish the same cell, both are kept and the one
marked ``preferred`` is used by default. A ``references.yaml`` in ``HARNESS_CONFIG_DIR`` adds sources and
entries; a source with a shipped id, or an entry for a shipped (model, dataset, source) cell, replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import StrictFloat, field_validator, model_validator

from harness.core.config import Record, read_yaml, record_files, validate
from harness.core.errors import HarnessError, InputError
from harness.models.model_registry import find_record

REFERENCES_FILE = "references.yaml"


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

    def describe(self) -> str:
        where = self.location or self.source.location
        flag = "" if self.verified else " (unverified)"
        return f"{self.source.id}: {where}{flag}"


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


def load_references(path: str | Path | None = None) -> list[Reference]:
    """The references: ``path`` alone, else the shipped file with the user's on top.

    Every entry must name a source defined in one of the files read.
    """
    paths = [Path(path)] if path is not None else record_files(REFERENCES_FILE)
    if path is not None and not paths[0].is_file():
        raise HarnessError(f"references file not found: {path}")
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
