"""The MTEB(eng, v2) retrieval, BRIGHT and FollowIR records against the installed mteb's own task metadata."""

from __future__ import annotations

import inspect
import re

import pytest

from harness.core.errors import HarnessError
from harness.datasets.dataset_registry import dataset_registry, expand_dataset_names, get_dataset_record
from harness.datasets.mteb_tasks import load_mteb_tasks

mteb = pytest.importorskip("mteb")
abstask = pytest.importorskip("mteb.abstasks.abstask")

TASKS = load_mteb_tasks()
RETRIEVAL_TYPES = {"Retrieval", "InstructionReranking"}


def mteb_instruction(metadata) -> str:
    """What mteb's AbsEncoder.get_instruction hands a model with no prompts of its own, for queries."""
    prompt = metadata.prompt.get("query") if isinstance(metadata.prompt, dict) else metadata.prompt
    return prompt or abstask.get_abstask_prompt(metadata.name)


@pytest.mark.parametrize("dataset", sorted(TASKS.datasets))
def test_every_task_entry_matches_mteb(dataset):
    record = TASKS.datasets[dataset]
    task = mteb.get_task(record.task)
    metadata = task.metadata
    assert record.split == metadata.eval_splits[0]
    assert record.ignore_identical_ids == task.ignore_identical_ids
    assert record.task_type == metadata.type
    assert record.main_score == metadata.main_score
    assert (record.hub, record.hub_revision) == (metadata.dataset["path"], metadata.dataset["revision"])
    assert record.instruction == mteb_instruction(metadata)


def test_scifact_instruction_is_mtebs():
    assert TASKS.task_of("scifact").instruction == (
        "Given a scientific claim, retrieve documents that support or refute the claim"
    )


def benchmark_tasks(name: str, long: bool | None = None) -> list[str]:
    tasks = [t for t in mteb.get_benchmark(name).tasks if t.metadata.type in RETRIEVAL_TYPES]
    if long is not None:
        tasks = [t for t in tasks if (t.metadata.eval_splits == ["long"]) == long]
    return [t.metadata.name for t in tasks]


@pytest.mark.parametrize(
    ("benchmark", "mteb_tasks"),
    [
        ("mteb-eng-v2-retrieval", benchmark_tasks("MTEB(eng, v2)")),
        ("bright", benchmark_tasks("BRIGHT(v1.1)", long=False)),
        ("bright-long", benchmark_tasks("BRIGHT(v1.1)", long=True)),
        ("followir", benchmark_tasks("FollowIR")),
    ],
)
def test_benchmark_members_are_mtebs_tasks_and_expand_from_the_registry(benchmark, mteb_tasks):
    record = TASKS.benchmarks[benchmark]
    assert record.mteb_benchmark is not None
    assert sorted(TASKS.task_of(member).task for member in record.members) == sorted(mteb_tasks)
    assert (
        len(mteb_tasks)
        == {"mteb-eng-v2-retrieval": 10, "bright": 12, "bright-long": 8, "followir": 3}[benchmark]
    )
    # The name on the command line expands to the same datasets, through the registry's `group:`.
    assert sorted(expand_dataset_names([benchmark])) == sorted(record.members)


def test_mteb_eng_v2_protocol():
    record = TASKS.benchmarks["mteb-eng-v2-retrieval"]
    assert [TASKS.task_of(m).task for m in record.members] == benchmark_tasks("MTEB(eng, v2)")
    for member in record.members:
        assert tuple(record.k_values) == tuple(mteb.get_task(TASKS.task_of(member).task).k_values)
    assert record.main_metric == "ndcg@10" and record.average == "mean"
    # mteb drops query-id hits for ArguAna, FiQA2018 and FEVERHardNegatives and keeps them for the rest.
    dropped = {m for m in record.members if TASKS.task_of(m).ignore_identical_ids}
    assert dropped == {"arguana", "fiqa", "fever-hn"}
    assert TASKS.benchmarks["bright"].k_values == [1, 5, 10, 25, 50, 100]
    assert TASKS.benchmarks["followir"].main_metric == "p-mrr"


def bright_domain(task_name: str) -> str:
    """The BRIGHT split (domain) mteb's task class reads, from its load_data source."""
    source = inspect.getsource(type(mteb.get_task(task_name)).load_data)
    (domain,) = re.findall(r'domain="([^"]+)"', source)
    return domain


def test_hub_records_match_mteb_task_data():
    registry = dataset_registry()
    hub_only = [name for name, record in registry.items() if record.hub and not record.url]
    assert len(hub_only) >= 4 + 12 + 8 + 3
    for name in hub_only:
        record = registry[name]
        if name.startswith("bright-gpt4-reason/"):
            # BRIGHT's own repo: same domains, reasoning-rewritten queries; mteb has no task for it.
            assert (record.hub, record.hub_configs["queries"]) == ("xlangai/BRIGHT", "gpt4_reason")
            assert record.hub_split == registry[name.replace("-gpt4-reason", "")].hub_split
            continue
        task = TASKS.task_of(name)
        metadata = mteb.get_task(task.task).metadata
        assert (record.hub, record.hub_revision) == (metadata.dataset["path"], metadata.dataset["revision"])
        assert record.eval_split == task.split
        assert record.drop_identical_ids == task.ignore_identical_ids
        if record.hub_layout == "bright":
            assert record.hub_split == bright_domain(task.task)
            long = task.split == "long"
            assert record.hub_configs["corpus"] == ("long_documents" if long else "documents")
            assert record.hub_configs["qrels"] == ("gold_ids_long" if long else "gold_ids")


def test_benchmark_average_is_the_plain_mean_over_all_members():
    members = TASKS.benchmarks["followir"].members
    scores = dict(zip(members, (0.1, -0.02, 0.04), strict=True))
    assert TASKS.benchmark_average("followir", scores) == pytest.approx(0.04)
    with pytest.raises(HarnessError, match=r"followir: no p-mrr for 1 of its 3 datasets \(followir/core17\)"):
        TASKS.benchmark_average("followir", {m: 0.1 for m in members if m != "followir/core17"})
    with pytest.raises(HarnessError, match="unknown benchmark 'brigt'.*known: bright, bright-long"):
        TASKS.benchmark_average("brigt", {})


def test_an_unknown_benchmark_name_is_one_line_with_the_nearest_names():
    with pytest.raises(HarnessError) as raised:
        get_dataset_record(expand_dataset_names(["brigth"])[0])
    assert "\n" not in str(raised.value)
    assert "did you mean bright" in str(raised.value)

def test_nanobeir_records_are_mtebs_nanobeir_tasks():
    tasks = {t.metadata.dataset["path"]: t for t in mteb.get_benchmark("NanoBEIR").tasks}
    records = [get_dataset_record(name) for name in expand_dataset_names(["nanobeir"])]
    assert len(records) == 13 and sorted(record.hub for record in records) == sorted(tasks)
    for record in records:
        task = tasks[record.hub]
        assert record.hub_revision == task.metadata.dataset["revision"]
        assert record.splits == task.metadata.eval_splits == [record.eval_split]
        assert record.drop_identical_ids == task.ignore_identical_ids
