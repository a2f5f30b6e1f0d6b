"""BEIR datasets and MTEB tasks, one table read both ways (``records/mteb_tasks.yaml``), and metric names.

An MTEB results file (``<Task>.json``) is read into the harness's dataset and metric names, and a harness
result is written under MTEB's: ``SciFact`` is ``scifact``, ``ndcg_at_10`` (mteb 1.11 and later) or
``NDCG@10`` (older files) is ``ndcg@10``, ``precision_at_5`` is ``p@5``, ``hit_rate_at_10`` is
``success@10``. A ``mteb_tasks.yaml`` in ``HARNESS_CONFIG_DIR`` adds entries or replaces shipped ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import field_validator

from harness.core.config import Record, read_yaml, record_files, validate
from harness.core.errors import HarnessError, InputError

MTEB_TASKS_FILE = "mteb_tasks.yaml"
# mteb's main score for every BEIR retrieval task (mteb.get_task(name).metadata.main_score).
MAIN_SCORE = "ndcg_at_10"

# harness metric family <-> the family word in mteb's score keys (mteb _evaluators/retrieval_metrics.py).
_MTEB_FAMILY = {
    "ndcg": "ndcg",
    "map": "map",
    "recall": "recall",
    "p": "precision",
    "mrr": "mrr",
    "success": "hit_rate",
    "r_cap": "r_cap",
}
# Spellings of a family in results files: mteb 2 keys and the older NDCG@10 / MAP@10 / Recall@10 / P@10 keys.
_FAMILY_OF_KEY = {
    **{word: family for family, word in _MTEB_FAMILY.items()},
    "p": "p",
    "hitrate": "success",
}
_KEY_PATTERN = re.compile(r"^([a-z_]+?)(?:_at_|@)(\d+)$")


class MtebTaskRecord(Record):
    """A ``datasets:`` entry: the MTEB task scoring this dataset, on which split, in which languages."""

    task: str
    split: str = "test"
    languages: list[str] = ["eng-Latn"]
    ignore_identical_ids: bool = False  # the task drops hits whose doc id is the query's


class MtebGroupRecord(Record):
    """A ``groups:`` entry: a dataset reported as the mean of each metric over its member datasets."""

    members: list[str]

    @field_validator("members")
    @classmethod
    def _two_or_more(cls, members: list[str]) -> list[str]:
        if len(members) < 2 or len(set(members)) != len(members):
            raise ValueError("a group lists two or more different datasets")
        return members


class MtebTasksFile(Record):
    """A whole ``mteb_tasks.yaml``."""

    datasets: dict[str, MtebTaskRecord] = {}
    groups: dict[str, MtebGroupRecord] = {}
    models: dict[str, str] = {}


@dataclass(frozen=True)
class MtebTasks:
    """The merged table: dataset -> task, task -> dataset, groups, and MTEB model names -> harness records."""

    datasets: dict[str, MtebTaskRecord]
    groups: dict[str, MtebGroupRecord] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)

    def task_of(self, dataset: str) -> MtebTaskRecord:
        """The MTEB task for a harness dataset; one error line naming the known ones when there is none."""
        if dataset in self.datasets:
            return self.datasets[dataset]
        known = ", ".join(sorted(self.datasets))
        raise HarnessError(
            f"dataset {dataset!r} has no MTEB task in {MTEB_TASKS_FILE} (known: {known}); add it to "
            f"HARNESS_CONFIG_DIR/{MTEB_TASKS_FILE}"
        )

    def dataset_of(self, task: str) -> str | None:
        """The harness dataset an MTEB task scores, or None when it has no BEIR equivalent."""
        return next((name for name, record in self.datasets.items() if record.task == task), None)

    def harness_model(self, mteb_name: str) -> str:
        """The harness record an MTEB model name stands for (the name itself when the table has none)."""
        return self.models.get(mteb_name, mteb_name)


def load_mteb_tasks() -> MtebTasks:
    """The shipped table with the user's entries on top; a task claimed by two datasets is an error."""
    datasets: dict[str, MtebTaskRecord] = {}
    groups: dict[str, MtebGroupRecord] = {}
    models: dict[str, str] = {}
    last = None
    for path in record_files(MTEB_TASKS_FILE):
        document = validate(MtebTasksFile, read_yaml(path) or {}, path)
        datasets.update(document.datasets)
        groups.update(document.groups)
        models.update(document.models)
        last = path
    owners: dict[str, str] = {}
    for name, record in datasets.items():
        if record.task in owners:
            raise InputError(
                last, None, f"task {record.task} is given to both {owners[record.task]} and {name}"
            )
        owners[record.task] = name
    for name, group in groups.items():
        unknown = [member for member in group.members if member not in datasets]
        if unknown:
            raise InputError(last, None, f"group {name} lists datasets with no task: {', '.join(unknown)}")
    return MtebTasks(datasets, groups, models)


def harness_metric(key: str) -> str | None:
    """``ndcg_at_10`` / ``NDCG@10`` -> ``ndcg@10``; None for a key that is not a ranking metric at a cutoff."""
    match = _KEY_PATTERN.match(key.strip().lower())
    family = _FAMILY_OF_KEY.get(match.group(1)) if match else None
    return f"{family}@{int(match.group(2))}" if family and match else None


def mteb_metric(metric: str) -> str | None:
    """``ndcg@10`` -> ``ndcg_at_10`` (mteb's key); None for a metric mteb does not report (``map``, ``bpref``)."""
    family, _, cutoff = metric.partition("@")
    word = _MTEB_FAMILY.get(family)
    return f"{word}_at_{cutoff}" if word and cutoff.isdigit() else None
