"""BEIR datasets and MTEB tasks, one table read both ways (``records/mteb_tasks.yaml``), and metric names.

An MTEB results file (``<Task>.json``) is read into the harness's dataset and metric names, and a harness
result is written under MTEB's: ``SciFact`` is ``scifact``, ``ndcg_at_10`` (mteb 1.11 and later) or
``NDCG@10`` (older files) is ``ndcg@10``, ``precision_at_5`` is ``p@5``, ``hit_rate_at_10`` is
``success@10``. A ``mteb_tasks.yaml`` in ``HARNESS_CONFIG_DIR`` adds entries or replaces shipped ones.

Each task entry also carries what mteb's task metadata says about running it: its type, main score, hub
dataset and revision, whether it drops query-id hits, and the query instruction mteb hands instruction
models. ``benchmarks:`` names the datasets of MTEB(eng, v2) retrieval, BRIGHT and FollowIR with the metric
and k of each benchmark's own average row (:meth:`MtebTasks.benchmark_average`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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
    task_type: str = "Retrieval"  # mteb's TaskMetadata.type: the `{TaskType}` of prompt names
    main_score: str = MAIN_SCORE  # mteb's TaskMetadata.main_score (BRIGHT long: recall_at_1; FollowIR: p-MRR)
    # The hub dataset and commit mteb scores the task on (TaskMetadata.dataset path / revision).
    hub: str | None = None
    hub_revision: str | None = None
    # The query instruction mteb gives instruction models for this task: TaskMetadata.prompt["query"], or
    # the task class's `abstask_prompt` when the metadata has none (mteb AbsEncoder.get_instruction).
    instruction: str | None = None


def _two_or_more_datasets(members: list[str]) -> list[str]:
    if len(members) < 2 or len(set(members)) != len(members):
        raise ValueError("a group lists two or more different datasets")
    return members


class MtebGroupRecord(Record):
    """A ``groups:`` entry: a dataset reported as the mean of each metric over its member datasets."""

    members: list[str]

    _members = field_validator("members")(_two_or_more_datasets)


class MtebBenchmarkRecord(Record):
    """A ``benchmarks:`` entry: a benchmark papers report as one table, its tasks and its own average row."""

    title: str
    mteb_benchmark: str | None = None  # the name mteb.get_benchmark knows it by
    members: list[str]  # harness datasets, in the benchmark's order
    main_metric: str  # the metric of the average row, in harness spelling ("ndcg@10", "p-mrr")
    average: Literal["mean"] = "mean"  # the plain mean of main_metric over the members
    k_values: list[int]  # the cutoffs the benchmark reports
    source: str  # where the protocol comes from

    _members = field_validator("members")(_two_or_more_datasets)


class MtebTasksFile(Record):
    """A whole ``mteb_tasks.yaml``."""

    datasets: dict[str, MtebTaskRecord] = {}
    groups: dict[str, MtebGroupRecord] = {}
    benchmarks: dict[str, MtebBenchmarkRecord] = {}
    models: dict[str, str] = {}


@dataclass(frozen=True)
class MtebTasks:
    """The merged table: dataset -> task, task -> dataset, groups, and MTEB model names -> harness records."""

    datasets: dict[str, MtebTaskRecord]
    groups: dict[str, MtebGroupRecord] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    benchmarks: dict[str, MtebBenchmarkRecord] = field(default_factory=dict)

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

    def benchmark_average(self, benchmark: str, scores: Mapping[str, float]) -> float:
        """The benchmark's own average row: the mean of its main metric over all its members (``scores``:
        dataset -> that metric); a member without a score is one error line (no partial mean)."""
        record = self.benchmarks.get(benchmark)
        if record is None:
            known = ", ".join(sorted(self.benchmarks))
            raise HarnessError(f"unknown benchmark {benchmark!r} in {MTEB_TASKS_FILE} (known: {known})")
        missing = [member for member in record.members if member not in scores]
        if missing:
            raise HarnessError(
                f"{benchmark}: no {record.main_metric} for {len(missing)} of its {len(record.members)} "
                f"datasets ({', '.join(missing)}); its average is over all of them"
            )
        return sum(scores[member] for member in record.members) / len(record.members)


def load_mteb_tasks() -> MtebTasks:
    """The shipped table with the user's entries on top; a task claimed by two datasets is an error."""
    datasets: dict[str, MtebTaskRecord] = {}
    groups: dict[str, MtebGroupRecord] = {}
    benchmarks: dict[str, MtebBenchmarkRecord] = {}
    models: dict[str, str] = {}
    last = None
    for path in record_files(MTEB_TASKS_FILE):
        document = validate(MtebTasksFile, read_yaml(path) or {}, path)
        datasets.update(document.datasets)
        groups.update(document.groups)
        benchmarks.update(document.benchmarks)
        models.update(document.models)
        last = path
    owners: dict[str, str] = {}
    for name, record in datasets.items():
        if record.task in owners:
            raise InputError(
                last, None, f"task {record.task} is given to both {owners[record.task]} and {name}"
            )
        owners[record.task] = name
    for kind, table in (("group", groups), ("benchmark", benchmarks)):
        for name, group in table.items():
            unknown = [member for member in group.members if member not in datasets]
            if unknown:
                raise InputError(
                    last, None, f"{kind} {name} lists datasets with no task: {', '.join(unknown)}"
                )
    return MtebTasks(datasets, groups, models, benchmarks)


def harness_metric(key: str) -> str | None:
    """``ndcg_at_10`` / ``NDCG@10`` -> ``ndcg@10``, ``p-MRR`` -> ``p-mrr``; None for a key that is not a
    ranking metric at a cutoff."""
    if key.strip().lower() in ("p-mrr", "p_mrr"):  # FollowIR's pairwise score (harness.evaluation.pmrr)
        return "p-mrr"
    match = _KEY_PATTERN.match(key.strip().lower())
    family = _FAMILY_OF_KEY.get(match.group(1)) if match else None
    return f"{family}@{int(match.group(2))}" if family and match else None


def mteb_metric(metric: str) -> str | None:
    """``ndcg@10`` -> ``ndcg_at_10`` (mteb's key); None for a metric mteb does not report (``map``, ``bpref``)."""
    family, _, cutoff = metric.partition("@")
    word = _MTEB_FAMILY.get(family)
    return f"{word}_at_{cutoff}" if word and cutoff.isdigit() else None
