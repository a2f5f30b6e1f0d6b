"""``harness export --format model-index``: the YAML a Hugging Face model card carries, read back by
huggingface_hub's own parser (``model_index_to_eval_results``, ``ModelCard``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fault_snapshot import refused_by_cli
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.api import export
from harness.results.export_formats import model_index
from harness.results.result_store import load_result

MODEL = "acme/retriever-7"


@pytest.fixture
def results(tmp_path: Path, beir_mirror: Path) -> Path:
    root = tmp_path / "results"
    for dataset in ("scifact", "nfcorpus"):
        qrels = real_qrels(beir_mirror, dataset)
        run = synthetic_run(qrels, every_other(qrels, 0), 10)
        make_result(root, dataset, MODEL, run, qrels, real_fingerprint(beir_mirror, dataset))
    qrels = real_qrels(beir_mirror, "scifact")
    make_result(
        root, "scifact", "other-model", synthetic_run(qrels), qrels, real_fingerprint(beir_mirror, "scifact")
    )
    return root


def _loaded(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())["model-index"]


def test_the_model_index_is_read_by_huggingface_hub_with_every_metric(results, tmp_path):
    url = "https://example.org/acme/retriever-7/beir"
    written = export(results=results, format="model-index", output=tmp_path / "cards", source_url=url).paths
    path = tmp_path / "cards" / "acme__retriever-7" / "model-index.yaml"
    assert sorted(written) == sorted([path, tmp_path / "cards" / "other-model" / "model-index.yaml"])
    name, evaluations = model_index_to_eval_results(_loaded(path))
    assert name == MODEL
    ours = {
        load_result(folder).dataset: load_result(folder)
        for folder in (results / "scifact" / MODEL, results / "nfcorpus" / MODEL)
    }
    by_dataset = {}
    for evaluation in evaluations:
        by_dataset.setdefault(evaluation.dataset_type, {})[evaluation.metric_type] = evaluation
    assert set(by_dataset) == {"BeIR/scifact", "BeIR/nfcorpus"}
    for dataset, metrics in by_dataset.items():
        result = ours[dataset.removeprefix("BeIR/")]
        assert set(metrics) == {"ndcg_at_10", "recall_at_100"}
        assert metrics["ndcg_at_10"].metric_value == result.metrics["ndcg@10"]
        assert metrics["recall_at_100"].metric_value == result.metrics["recall@100"]
        first = metrics["ndcg_at_10"]
        assert (first.task_type, first.dataset_split, first.metric_name) == ("retrieval", "test", "nDCG@10")
        assert first.dataset_name == f"BEIR {'SciFact' if dataset == 'BeIR/scifact' else 'NFCorpus'}"
        assert first.dataset_revision.startswith("sha256:") and len(first.dataset_revision) == 7 + 64
        assert first.source_name == "beir-harness test"  # the harness version the result recorded
        assert first.source_url == url
    assert (
        by_dataset["BeIR/scifact"]["ndcg_at_10"].dataset_revision
        != by_dataset["BeIR/nfcorpus"]["ndcg_at_10"].dataset_revision
    )


def test_a_model_card_with_the_exported_front_matter_parses(results, tmp_path):
    export(results=results / "scifact" / MODEL, format="model-index", output=tmp_path / "cards")
    front = (tmp_path / "cards" / "acme__retriever-7" / "model-index.yaml").read_text()
    card = ModelCard(f"---\nlicense: apache-2.0\n{front}---\n\n# {MODEL}\n")
    assert card.data.model_name == MODEL
    assert [(e.dataset_type, e.metric_type, e.source_name) for e in card.data.eval_results] == [
        ("BeIR/scifact", "ndcg_at_10", None),
        ("BeIR/scifact", "recall_at_100", None),
    ]


def test_every_key_the_spec_requires_is_there(results):
    document = model_index([load_result(results / "scifact" / MODEL)])
    (entry,) = document["model-index"]
    assert entry["name"] == MODEL
    (result,) = entry["results"]
    assert result["task"]["type"] == "retrieval"
    assert {"name", "type"} <= set(result["dataset"])
    assert all({"type", "value"} <= set(metric) for metric in result["metrics"])
    # Dropping a required key is what huggingface_hub refuses: the check above is the one that matters.
    del result["dataset"]["type"]
    with pytest.raises(KeyError):
        model_index_to_eval_results(document["model-index"])


def test_the_revision_is_the_data_the_numbers_were_computed_on(results, tmp_path):
    folder = results / "scifact" / MODEL
    before = model_index([load_result(folder)])["model-index"][0]["results"][0]["dataset"]["revision"]
    result = load_result(folder)
    result.provenance["dataset"]["fingerprint"]["qrels/test.tsv"] = "0" * 64
    after = model_index([result])["model-index"][0]["results"][0]["dataset"]["revision"]
    assert before != after


def test_an_output_inside_a_result_folder_is_refused(results, capsys):
    inside = results / "scifact" / MODEL / "card"
    refused_by_cli(
        capsys,
        ["export", results / "scifact" / MODEL, "--format", "model-index", "--output", inside],
        "lies inside the harness result",
        folders=[results],
    )
    refused_by_cli(
        capsys,
        ["export", results, "--format", "html", "--output", results.parent / "x"],
        "--format",
        "html",
        folders=[results],
    )
