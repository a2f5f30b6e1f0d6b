"""The ``beir-paper`` suite: every cell of BEIR's Table 2 (nDCG@10) and Recall@100 table, each row mapped
to the harness record or system that reproduces it or skipped with the reason, run offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.datasets.dataset_registry import dataset_registry
from harness.models.model_registry import find_record
from harness.pipeline import EvalOptions
from harness.reproduction.references import load_references
from harness.reproduction.suites import MISS, OK, SKIPPED, load_suite, run_suite, select_conditions
from harness.results.result_store import StoredResult
from harness.retrieval.systems import find_system

PAPER_DATASETS = {
    "msmarco", "trec-covid", "bioasq", "nfcorpus", "nq", "hotpotqa", "fiqa", "signal1m", "trec-news",
    "robust04", "arguana", "webis-touche2020", "cqadupstack", "quora", "dbpedia-entity", "scidocs",
    "fever", "climate-fever", "scifact",
}  # fmt: skip
ROWS_WITHOUT_RECORD = {"DeepCT", "SPARTA", "docT5query", "GenQ", "ColBERT"}
RUNNABLE_ROWS = {
    "bm25",
    "sentence-transformers/msmarco-roberta-base-ance-firstp",
    "sentence-transformers/msmarco-distilbert-base-tas-b",
    "facebook/dpr-multiset",
    "bm25+ce",
}


@pytest.fixture(scope="module")
def suite():
    return load_suite("beir-paper")


def test_every_cell_of_both_tables_is_a_condition(suite) -> None:
    cells = {(condition.model, condition.dataset): condition for condition in suite.conditions}
    assert len(cells) == len(suite.conditions) == 10 * 19
    assert {dataset for _, dataset in cells} == PAPER_DATASETS
    assert {model for model, _ in cells} == ROWS_WITHOUT_RECORD | RUNNABLE_ROWS
    for (model, dataset), condition in cells.items():
        assert "ndcg@10" in condition.expected, (model, dataset)
        recall = {"recall@100", "r_cap@100"} & set(condition.expected)
        # BM25+CE re-ranks BM25's top 100: its Recall@100 is BM25's, and the paper prints no column for it.
        assert len(recall) == (0 if model == "bm25+ce" else 1), (model, dataset)
        assert all(0 < value < 1 for value in condition.expected.values())
        assert condition.tolerance == 0.0005  # three printed decimals
        assert not condition.verified and "arXiv 2104.08663v4" in condition.source


def test_rows_map_to_a_record_or_say_why_not(suite) -> None:
    datasets = dataset_registry()
    for condition in suite.conditions:
        if condition.model in ROWS_WITHOUT_RECORD:
            assert condition.skip, condition.model
        elif condition.skip:
            # A runnable row is skipped only for a dataset the harness cannot obtain.
            assert condition.dataset not in datasets, (condition.model, condition.dataset)
        else:
            assert find_record(condition.model) or find_system(condition.model), condition.model
            assert condition.dataset in datasets, condition.dataset


def test_bm25_column_agrees_with_pyserini_multifield_to_the_printed_decimals(suite) -> None:
    """The paper's BM25 was Elasticsearch multifield; pyserini 2CR's bm25-multifield reproduces it."""
    multifield = {
        ref.dataset: ref.metrics
        for ref in load_references()
        if ref.model == "bm25-multifield" and ref.source.id == "pyserini-2cr"
    }
    compared = 0
    for condition in suite.conditions:
        published = multifield.get(condition.dataset)
        if condition.model != "bm25" or published is None or condition.dataset == "arguana":
            continue  # ArguAna: the paper's identical-id handling differs (see the suite's header)
        assert round(published["ndcg@10"], 3) == condition.expected["ndcg@10"], condition.dataset
        compared += 1
    assert compared >= 5


def _stand_in(calls: list[tuple[str, str]]):
    def run_eval(dataset: str, model: str, options: EvalOptions) -> StoredResult:
        calls.append((model, dataset))
        raise HarnessError(f"no weights or data for {model} on {dataset} here")

    return run_eval


def test_skipped_cells_carry_their_reason_and_never_run(suite, tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    report = run_suite(suite, EvalOptions(results_dir=tmp_path), _stand_in(calls))
    assert report.count(OK) == report.count(MISS) == 0
    assert report.count(SKIPPED) == sum(len(condition.expected) for condition in suite.conditions)
    assert {model for model, _ in calls} == RUNNABLE_ROWS
    assert not {model for model, _ in calls} & ROWS_WITHOUT_RECORD
    reasons = {(check.condition.model, check.condition.dataset): check.reason for check in report.checks}
    assert "no weights or data" in reasons[("facebook/dpr-multiset", "scifact")]
    assert "not published" in reasons[("GenQ", "nfcorpus")]
    assert "licen" in reasons[("bm25", "robust04")]
    assert "12 forums" in reasons[("bm25", "cqadupstack")]
    assert "no weights or data" in reasons[("bm25", "scifact")]


@pytest.mark.slow
def test_offline_run_compares_what_runs_and_skips_the_rest(
    suite, beir_mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scifact is complete here, so BM25 is compared (OK or MISS: bm25s is not Elasticsearch); nfcorpus
    has no corpus and the dense rows no weights offline, so they are SKIPPED with the reason."""
    monkeypatch.setenv("HARNESS_BEIR_MIRROR", str(beir_mirror))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    chosen = select_conditions(suite, datasets=["scifact", "nfcorpus"])
    options = EvalOptions(
        results_dir=tmp_path / "results", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"
    )
    report = run_suite(chosen, options.replace(no_progress=True))
    by_cell = {(c.condition.model, c.condition.dataset, c.metric): c for c in report.checks}
    for metric in ("ndcg@10", "recall@100"):
        bm25 = by_cell[("bm25", "scifact", metric)]
        assert bm25.status in (OK, MISS) and bm25.ours is not None
        assert bm25.status == (OK if abs(bm25.diff) <= bm25.condition.tolerance + 1e-9 else MISS)
    assert by_cell[("bm25", "nfcorpus", "ndcg@10")].status == SKIPPED
    assert "corpus" in by_cell[("bm25", "nfcorpus", "ndcg@10")].reason
    tas_b = by_cell[("sentence-transformers/msmarco-distilbert-base-tas-b", "scifact", "ndcg@10")]
    assert tas_b.status == SKIPPED and "msmarco-distilbert-base-tas-b" in tas_b.reason
    dpr = by_cell[("facebook/dpr-multiset", "scifact", "ndcg@10")]
    assert dpr.status == SKIPPED and "facebook-dpr-ctx_encoder-multiset-base" in dpr.reason
    compared = [check for check in report.checks if check.status != SKIPPED]
    assert {check.condition.model for check in compared} == {"bm25"}
