"""Published numbers (``configs/references.yaml``): what a paper or a leaderboard says a model scores.

Each entry names its source and the evaluation conditions that source used, so a comparison can say
exactly what it compares against. Where two sources publish the same cell, both are kept and the one
marked ``preferred`` is used by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.core.errors import HarnessError, InputError
from harness.core.paths import config_dir


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
    """One published model x dataset cell: metric name -> value, from one source."""

    model: str
    dataset: str
    source: Source
    metrics: dict[str, float]
    preferred: bool = False
    verified: bool = True
    location: str = ""  # a more precise file / commit than the source's, when the entry has one
    note: str = ""

    def describe(self) -> str:
        where = self.location or self.source.location
        flag = "" if self.verified else " (unverified)"
        return f"{self.source.id}: {where}{flag}"


def references_path() -> Path:
    return config_dir() / "references.yaml"


def _location(record: dict[str, Any]) -> str:
    if record.get("paper"):
        return f"{record['paper']}, {record.get('table', 'table ?')}"
    parts = [str(record[key]) for key in ("repo", "file") if record.get(key)]
    text = ":".join(parts)
    if record.get("commit"):
        text += f"@{str(record['commit'])[:12]}"
    return text


def load_references(path: str | Path | None = None) -> list[Reference]:
    """Read and validate the references file; every entry must name a known source and numeric metrics."""
    path = Path(path) if path is not None else references_path()
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise HarnessError(f"references file not found: {path}") from None
    except yaml.YAMLError as error:
        line = getattr(getattr(error, "problem_mark", None), "line", None)
        raise InputError(
            path, None if line is None else line + 1, f"not valid YAML: {' '.join(str(error).split())}"
        ) from None
    if not isinstance(document, dict):
        raise InputError(path, 1, "expected a mapping with 'sources' and 'entries'")
    sources: dict[str, Source] = {}
    raw_sources = document.get("sources") or {}
    for source_id, record in raw_sources.items():
        if not isinstance(record, dict) or not (
            record.get("commit") or record.get("paper") or record.get("url")
        ):
            raise InputError(path, None, f"source {source_id!r} names no commit, paper or url")
        sources[source_id] = Source(
            id=source_id,
            title=str(record.get("title", source_id)),
            location=_location(record) or str(record.get("url", "")),
            conditions=dict(record.get("conditions") or {}),
            note=str(record.get("note", "")).strip(),
        )
    references: list[Reference] = []
    for number, record in enumerate(document.get("entries") or [], start=1):
        where = f"entry {number}"
        if not isinstance(record, dict):
            raise InputError(path, None, f"{where} is not a mapping")
        missing = [key for key in ("model", "dataset", "source", "metrics") if key not in record]
        if missing:
            raise InputError(path, None, f"{where} lacks {', '.join(missing)}")
        if record["source"] not in sources:
            raise InputError(path, None, f"{where} names unknown source {record['source']!r}")
        metrics = record["metrics"]
        if not isinstance(metrics, dict) or not all(
            isinstance(value, (int, float)) and not isinstance(value, bool) for value in metrics.values()
        ):
            raise InputError(path, None, f"{where}: 'metrics' must map metric names to numbers")
        references.append(
            Reference(
                model=str(record["model"]),
                dataset=str(record["dataset"]),
                source=sources[record["source"]],
                metrics={str(name).lower(): float(value) for name, value in metrics.items()},
                preferred=bool(record.get("preferred", False)),
                verified=bool(record.get("verified", True)),
                # An entry's own file (and commit) inside its source's repository, when it names one.
                location=_location({"repo": raw_sources[record["source"]].get("repo"), **record})
                if record.get("file")
                else "",
                note=str(record.get("note", "")).strip(),
            )
        )
    return references


def model_aliases(name: str) -> set[str]:
    """``name`` plus, for a registry model, its record name, aliases and hub id (how sources name it)."""
    names = {name}
    try:
        from harness.models.registry import find_record

        record = find_record(name)
    except (HarnessError, ImportError):
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
