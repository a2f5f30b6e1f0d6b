"""A pyserini two-click reproduction (2CR) YAML read as a reproduction suite.

The file below has the shape of pyserini's ``pyserini/2cr/beir.yaml`` (conditions with ``name`` and
``command``, ``datasets`` of ``{dataset, scores: [{nDCG@10, R@100, R@1000}]}``) and of its MS MARCO files
(``display``, ``topics`` of ``{topic_key, eval_key, scores}``); the scifact numbers are the bm25-flat
ones of references.yaml's pyserini-2cr source.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fault_snapshot import refused_by_cli
from report_fixtures import make_result, real_fingerprint, real_qrels, synthetic_run
from test_reproduce import StoredRuns

from harness.cli import main
from harness.pipeline import EvalOptions
from harness.reproduction.suites import DEFAULT_TOLERANCE, MISS, OK, SKIPPED, load_suite, run_suite

COMMAND = "python -m pyserini.search.lucene --index beir-v1.0.0-${dataset}.flat --bm25 --remove-query"
TWO_CR = {
    "conditions": [
        {
            "name": "bm25-flat",
            "command": COMMAND,
            "datasets": [
                {"dataset": "scifact", "scores": [{"nDCG@10": 0.6789, "R@100": 0.9253, "R@1000": 0.9767}]},
                {"dataset": "bioasq", "scores": [{"nDCG@10": 0.5225, "R@100": 0.7687}]},
                {"dataset": "cqadupstack-android", "scores": [{"nDCG@10": 0.3801, "R@100": 0.6829}]},
            ],
        },
        {
            "name": "bm25-multifield",
            "command": COMMAND + " --fields contents=1.0 title=1.0",
            "datasets": [{"dataset": "scifact", "scores": [{"nDCG@10": 0.6647, "R@100": 0.9076}]}],
        },
        {
            "name": "contriever-msmarco",
            "display": "Contriever (MS MARCO)",
            "display-row": "[3]",
            "command": "python -m pyserini.search.faiss --encoder facebook/contriever-msmarco",
            "datasets": [{"dataset": "scifact", "scores": [{"nDCG@10": 0.6768, "R@100": 0.947}]}],
        },
        {
            "name": "unheard-of-model",
            "command": "python -m pyserini.search.faiss --encoder nobody/nothing",
            "topics": [
                {"topic_key": "msmarco-passage-dev-subset", "eval_key": "x", "scores": [{"MRR@10": 0.3}]},
            ],
        },
        {
            "name": "bm25",  # a harness model of the same name: runs without a mapping entry
            "display": "BM25 (bm25s)",
            "topics": [
                {
                    "topic_key": "dl19-passage",
                    "eval_key": "dl19-passage",
                    "scores": [{"MAP": 0.3, "nDCG@10": 0.5}],
                },
                {
                    "topic_key": "scifact",
                    "eval_key": "scifact",
                    "scores": [{"nDCG@10": 1.0, "Success@5": 1.0}],
                },
            ],
        },
    ]
}


@pytest.fixture
def two_cr(tmp_path: Path) -> Path:
    path = tmp_path / "beir.yaml"
    path.write_text(yaml.safe_dump(TWO_CR, sort_keys=False))
    return path


def _by_key(suite) -> dict[tuple[str, str], object]:
    return {
        (condition.source.split(": ", 1)[1].split(" (")[0], condition.dataset): condition
        for condition in suite.conditions
    }


def test_a_2cr_file_is_a_suite_each_condition_mapped_to_a_harness_model_or_skipped(two_cr):
    suite = load_suite(str(two_cr))
    assert suite.name == "beir" and len(suite.conditions) == 8
    found = _by_key(suite)
    flat = found[("bm25-flat", "scifact")]
    assert (flat.model, flat.skip) == ("bm25-lucene", "")
    assert flat.expected == {"ndcg@10": 0.6789, "recall@100": 0.9253, "recall@1000": 0.9767}
    assert flat.tolerance == DEFAULT_TOLERANCE
    # 2CR's BEIR protocol: trec_eval -c, --remove-query, --hits 1000.
    assert flat.options == {"complete": True, "drop_identical_ids": True, "top_k": 1000}
    assert found[("bm25-flat", "cqadupstack/android")].skip == ""
    assert "bioasq is not a dataset of the harness's registry" in found[("bm25-flat", "bioasq")].skip
    assert "multifield BM25" in found[("bm25-multifield", "scifact")].skip
    msmarco = found[("contriever-msmarco", "scifact")]
    assert msmarco.model == "facebook/contriever-msmarco" and "Contriever (MS MARCO)" in msmarco.source
    unheard = found[("unheard-of-model", "msmarco-passage-dev-subset")]
    assert "pyserini condition unheard-of-model has no harness model or system" in unheard.skip
    assert found[("bm25", "scifact")].model == "bm25" and found[("bm25", "scifact")].skip == ""
    assert "dl19-passage is not a dataset" in found[("bm25", "dl19-passage")].skip
    assert suite.notes == [f"{two_cr}: 2CR score(s) with no harness metric left out: Success@5"]


@pytest.fixture
def stored(tmp_path: Path, beir_mirror: Path) -> StoredRuns:
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    for model in ("bm25-lucene", "bm25"):
        make_result(tmp_path / "results", "scifact", model, synthetic_run(qrels), qrels, fingerprint)
    return StoredRuns(tmp_path / "results")


def test_only_mapped_conditions_run_under_2crs_options_and_the_rest_are_skipped_with_the_reason(
    two_cr, stored, tmp_path
):
    report = run_suite(load_suite(str(two_cr)), EvalOptions(results_dir=tmp_path / "out"), run_eval=stored)
    ran = [(dataset, model) for dataset, model, _ in stored.calls]
    assert ran == [
        ("scifact", "bm25-lucene"),
        ("cqadupstack/android", "bm25-lucene"),
        ("scifact", "facebook/contriever-msmarco"),
        ("scifact", "bm25"),
    ]
    options = stored.calls[0][2]
    assert (options.complete, options.drop_identical_ids, options.top_k) == (True, True, 1000)
    assert {"ndcg@10", "recall@100", "recall@1000"} <= set(options.metrics)
    statuses = {
        (check.condition.model, check.condition.dataset, check.metric): check for check in report.checks
    }
    # The synthetic run ranks every judged document first: nDCG@10 = recall = 1, far from 2CR's numbers.
    assert statuses[("bm25-lucene", "scifact", "ndcg@10")].status == MISS
    assert statuses[("bm25", "scifact", "ndcg@10")].status == OK
    skipped = {check.reason for check in report.checks if check.status == SKIPPED}
    assert any("multifield BM25" in reason for reason in skipped)
    assert any("cannot fetch model facebook/contriever-msmarco" in reason for reason in skipped)
    assert report.count(OK) == 1 and report.exit_code == 1


def test_the_cli_reproduces_a_2cr_file_and_prints_why_each_skip(
    two_cr, stored, tmp_path, monkeypatch, capsys
):
    import harness.pipeline

    monkeypatch.setattr(harness.pipeline, "run_eval", stored)
    code = main(["reproduce", str(two_cr), "--results-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 1
    assert "skipped: bm25-multifield on scifact: pyserini's multifield BM25" in captured.out
    assert (
        "skipped: unheard-of-model on msmarco-passage-dev-subset: pyserini condition unheard-of-model"
        in captured.out
    )
    assert "pyserini 2CR beir.yaml: bm25-flat" in captured.out
    assert "suite beir: FAILED (" in captured.out
    assert f"note: {two_cr}: 2CR score(s) with no harness metric left out: Success@5" in captured.err


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ({"conditions": [{"name": "x", "datasets": [{"dataset": "scifact", "scores": []}]}]}, ["scores"]),
        ({"conditions": [{"name": "x", "datasets": [{"scores": [{"nDCG@10": 0.1}]}]}]}, ["dataset"]),
        (
            {
                "conditions": [
                    {"name": "x", "datasets": [{"dataset": "scifact", "scores": [{"nDCG@10": "n/a"}]}]}
                ]
            },
            ["nDCG@10"],
        ),
    ],
)
def test_a_malformed_2cr_file_is_one_line_naming_it(tmp_path, capsys, content, needles):
    path = tmp_path / "bad-2cr.yaml"
    path.write_text(yaml.safe_dump(content))
    refused_by_cli(
        capsys,
        ["reproduce", path, "--results-dir", tmp_path / "out"],
        "bad-2cr.yaml",
        *needles,
        folders=[tmp_path],
    )


def test_the_users_mapping_adds_conditions_and_a_bad_key_names_the_file(
    two_cr, tmp_path, monkeypatch, capsys
):
    config = tmp_path / "config"
    config.mkdir()
    (config / "pyserini_2cr.yaml").write_text("conditions:\n  unheard-of-model: {model: bm25}\n")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))
    found = _by_key(load_suite(str(two_cr)))
    assert found[("unheard-of-model", "msmarco-passage-dev-subset")].model == "bm25"
    assert found[("bm25-flat", "scifact")].model == "bm25-lucene"  # shipped entries stay
    (config / "pyserini_2cr.yaml").write_text("conditions:\n  x: {model: bm25, skip: both}\n")
    refused_by_cli(
        capsys,
        ["reproduce", two_cr, "--results-dir", tmp_path / "out"],
        "pyserini_2cr.yaml",
        "either 'model'",
    )
