"""The mteb-eng-v2-retrieval, bright and followir suites: they load, name known models and datasets, and every
cell names the published file it was read from (checked against the copies in ../shared where they exist)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from harness.core.fileio import read_json
from harness.datasets.dataset_registry import dataset_registry
from harness.datasets.mteb_tasks import load_mteb_tasks
from harness.models.model_registry import find_record
from harness.reproduction.suites import load_suite

SHARED_MTEB = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "mteb-results"
TASKS = load_mteb_tasks()
SUITES = ("mteb-eng-v2-retrieval", "bright", "followir")
# Model folders of embeddings-benchmark/results the inline cells come from, per harness model.
RESULT_FOLDERS = {
    "bm25": "results/mteb__baseline-bm25s/0_1_10",
    "sentence-transformers/all-MiniLM-L6-v2": "results/sentence-transformers__all-MiniLM-L6-v2/"
    "8b3219a92973c328a8e22fadcfa821b5dc75636a",
    "BAAI/bge-small-en-v1.5": "results/BAAI__bge-small-en-v1.5/5c38ec7c405ec4b44b94cc5a9bb96e735b38267a",
    "sentence-transformers/all-mpnet-base-v2": "results/sentence-transformers__all-mpnet-base-v2/"
    "9a3225965996d404b775526de6dbfe85d3368642",
    "BAAI/bge-large-en-v1.5": "results/BAAI__bge-large-en-v1.5/d4aa6901d3a41ba39fb536a557fa166f842b0e09",
}
INLINE_SOURCE = re.compile(
    r"^embeddings-benchmark/results (results/\S+)/(\S+)\.json @ ([0-9a-f]{40})(, mteb [\d.]+)?$"
)
# Cells the published sources lack (the suites' headers say so); everything else, BRIGHT included (issue 30),
# has bm25 and 2 dense models.
NO_BM25 = {"cqadupstack/gaming"}


@pytest.fixture(scope="module", params=SUITES)
def suite(request):
    return load_suite(request.param)


def test_suite_loads_with_known_models_and_its_benchmarks_datasets(suite):
    registry = dataset_registry()
    members = set(TASKS.benchmarks[suite.name].members)
    assert suite.conditions and not suite.notes
    for condition in suite.conditions:
        assert find_record(condition.model) is not None, condition.model
        assert condition.dataset in registry and condition.dataset in members, condition.dataset
        assert condition.expected and condition.source
        # Where the task drops query-id hits, the condition does too (mteb's per-task rule).
        assert (
            condition.options.get("drop_identical_ids", False)
            == TASKS.task_of(condition.dataset).ignore_identical_ids
        )


def test_every_inline_cell_names_its_results_file_and_commit(suite):
    for condition in suite.conditions:
        if not condition.source.startswith("embeddings-benchmark/results "):
            continue
        match = INLINE_SOURCE.match(condition.source)
        assert match, condition.source
        folder, task, _commit, _version = match.groups()
        assert folder == RESULT_FOLDERS[condition.model], condition.source
        assert task == TASKS.task_of(condition.dataset).task, condition.source
        main_metric = TASKS.benchmarks[suite.name].main_metric
        assert main_metric in condition.expected


def test_every_benchmark_dataset_has_bm25_and_dense_cells(suite):
    models = defaultdict(set)
    for condition in suite.conditions:
        models[condition.dataset].add(condition.model)
    assert set(models) | NO_BM25 >= set(TASKS.benchmarks[suite.name].members)
    for dataset in TASKS.benchmarks[suite.name].members:
        dense = models[dataset] - {"bm25"}
        assert ("bm25" in models[dataset]) != (dataset in NO_BM25), dataset
        assert len(dense) >= 2, (dataset, dense)


@pytest.mark.skipif(
    not SHARED_MTEB.is_dir(), reason="../shared/reference/mteb-results is not beside the checkout"
)
def test_folder_cells_equal_the_shared_result_files():
    suite = load_suite("mteb-eng-v2-retrieval")
    prefixes = {
        "bm25": "mteb__baseline-bm25s_0_1_",
        "sentence-transformers/all-MiniLM-L6-v2": "sentence-transformers__all-MiniLM-L6-v2_"
        "8b3219a92973c328a8e22fadcfa821b5dc75636a_",
    }
    checked = 0
    for condition in suite.conditions:
        if not condition.source.startswith("mteb-results"):
            continue
        task = TASKS.task_of(condition.dataset).task
        payload = read_json(SHARED_MTEB / f"{prefixes[condition.model]}{task}.json")
        scores = payload["scores"]["test"][0]
        assert condition.expected == {"ndcg@10": scores["ndcg_at_10"], "recall@100": scores["recall_at_100"]}
        checked += 1
    assert checked == 8
