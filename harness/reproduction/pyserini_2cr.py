"""A pyserini two-click reproduction (2CR) file, read as a reproduction suite's conditions.

pyserini's 2CR files (``pyserini/2cr/beir.yaml`` and its siblings) list ``conditions``; each has a ``name``
(with ``display`` and the ``command`` pyserini runs) and ``datasets`` (``{dataset, scores}``) or ``topics``
(``{topic_key, eval_key, scores}``), ``scores`` being a list holding one ``{metric: value}`` mapping, e.g.
``{nDCG@10: 0.6789, R@100: 0.9253}``. ``records/pyserini_2cr.yaml`` says which harness model or system
runs a condition, which harness dataset a 2CR dataset or topic is, what each score name is and under
which evaluation options pyserini scored them. A condition, dataset or metric with no harness equivalent
becomes a condition to skip, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictFloat, model_validator

from harness.core.config import Record, read_yaml, record_files, validate
from harness.core.errors import HarnessError
from harness.datasets.dataset_registry import dataset_registry
from harness.models.model_registry import find_record
from harness.retrieval.systems import find_system

TWO_CR_FILE = "pyserini_2cr.yaml"


# ------------------------------------------------------------------------------- the mapping record


class ConditionMapRecord(Record):
    """A ``conditions:`` entry of the mapping: the harness model or system, or why there is none."""

    model: str | None = None
    skip: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ConditionMapRecord:
        if (self.model is None) == (self.skip is None):
            raise ValueError("give either 'model' (a harness model or system) or 'skip' (why there is none)")
        return self


class TwoCRMapFile(Record):
    """The whole ``pyserini_2cr.yaml`` record."""

    conditions: dict[str, ConditionMapRecord] = {}
    datasets: dict[str, str] = {}
    metrics: dict[str, str] = {}
    options: dict[str, Any] = {}


def load_2cr_map() -> TwoCRMapFile:
    """The shipped mapping with the user's entries on top."""
    merged: dict[str, dict[str, Any]] = {"conditions": {}, "datasets": {}, "metrics": {}, "options": {}}
    for path in record_files(TWO_CR_FILE):
        document = validate(TwoCRMapFile, read_yaml(path) or {}, path)
        for key in merged:
            merged[key].update(getattr(document, key))
    return TwoCRMapFile(**merged)


# ------------------------------------------------------------------------------- pyserini's own file


class _Foreign(BaseModel):
    # pyserini's files carry keys the harness has no use for (display-html, display-row, eval_key ...).
    model_config = ConfigDict(extra="ignore", frozen=True)


class TwoCRScoresRecord(_Foreign):
    """A ``datasets:`` or ``topics:`` item of a 2CR condition."""

    dataset: str | None = None
    topic_key: str | None = None
    scores: list[dict[str, StrictFloat]]

    @model_validator(mode="after")
    def _names_its_data(self) -> TwoCRScoresRecord:
        if not (self.dataset or self.topic_key):
            raise ValueError("an item needs 'dataset' (or 'topic_key')")
        if not self.scores or not self.scores[0]:
            raise ValueError(
                f"{self.dataset or self.topic_key}: 'scores' must hold one {{metric: value}} mapping"
            )
        return self


class TwoCRConditionRecord(_Foreign):
    """A ``conditions:`` item of a 2CR file."""

    name: str
    display: str | None = None
    datasets: list[TwoCRScoresRecord] = []
    topics: list[TwoCRScoresRecord] = []


class TwoCRFile(_Foreign):
    """A whole 2CR file."""

    conditions: list[TwoCRConditionRecord]


def is_2cr(document: Any) -> bool:
    """Whether a suite file's content is in pyserini's 2CR shape (conditions with datasets or topics)."""
    conditions = document.get("conditions") if isinstance(document, dict) else None
    return (
        isinstance(conditions, list)
        and bool(conditions)
        and all(isinstance(item, dict) and "model" not in item for item in conditions)
        and any(isinstance(item, dict) and ("datasets" in item or "topics" in item) for item in conditions)
    )


# ------------------------------------------------------------------------------------ conditions


@dataclass
class PublishedCondition:
    """One 2CR condition x dataset: what runs, on what, what it must reproduce, or why it is skipped."""

    condition: str  # the 2CR condition's name
    dataset: str  # the harness dataset (the 2CR name when there is none)
    model: str  # the harness model or system (the 2CR condition when there is none)
    expected: dict[str, float]
    source: str
    skip: str = ""
    options: dict[str, Any] = field(default_factory=dict)


def _harness_model(name: str, mapping: TwoCRMapFile) -> tuple[str | None, str]:
    """``(model, reason)``: the harness model or system running a 2CR condition, or why there is none."""
    entry = mapping.conditions.get(name)
    if entry is not None:
        return entry.model, entry.skip or ""
    if find_record(name) is not None or find_system(name) is not None:
        return name, ""
    return None, (
        f"pyserini condition {name} has no harness model or system (map it in HARNESS_CONFIG_DIR/{TWO_CR_FILE})"
    )


def _harness_dataset(name: str, mapping: TwoCRMapFile, known: set[str]) -> tuple[str, str]:
    dataset = mapping.datasets.get(name, name)
    if dataset in known:
        return dataset, ""
    return name, f"2CR dataset or topic {name} is not a dataset of the harness's registry"


def _expected(scores: dict[str, float], mapping: TwoCRMapFile) -> tuple[dict[str, float], list[str]]:
    expected = {mapping.metrics[key]: value for key, value in scores.items() if key in mapping.metrics}
    return expected, sorted(key for key in scores if key not in mapping.metrics)


def read_2cr(path: Path, document: Any) -> tuple[list[PublishedCondition], list[str]]:
    """The conditions of a 2CR file (one per condition x dataset) and one note per score name left out."""
    parsed = validate(TwoCRFile, document, path)
    mapping = load_2cr_map()
    known = set(dataset_registry())
    published: list[PublishedCondition] = []
    unknown_metrics: set[str] = set()
    for condition in parsed.conditions:
        model, model_skip = _harness_model(condition.name, mapping)
        label = f"pyserini 2CR {path.name}: {condition.name}" + (
            f" ({condition.display})" if condition.display else ""
        )
        for item in [*condition.datasets, *condition.topics]:
            dataset, dataset_skip = _harness_dataset(str(item.dataset or item.topic_key), mapping, known)
            expected, left_out = _expected(item.scores[0], mapping)
            unknown_metrics.update(left_out)
            skip = model_skip or dataset_skip or ("" if expected else "no score the harness computes")
            published.append(
                PublishedCondition(
                    condition=condition.name,
                    dataset=dataset,
                    model=model or condition.name,
                    expected=expected or dict(item.scores[0]),
                    source=label,
                    skip=skip,
                    options=dict(mapping.options),
                )
            )
    if not published:
        raise HarnessError(f"{path}: the 2CR file lists no datasets or topics under its conditions")
    notes = (
        [f"{path}: 2CR score(s) with no harness metric left out: {', '.join(sorted(unknown_metrics))}"]
        if unknown_metrics
        else []
    )
    return published, notes
