"""Every distinct setting keeps its own result folder; tables label each by the model and its settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tiny_bert import build_tiny_bert

from harness.cli import main
from harness.results.collect import collect_results, display_labels
from harness.results.result_store import StoredResult, load_result, result_key, settings_label


def _eval_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--results-dir",
        str(tmp_path / "results"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--data-dir",
        str(tmp_path / "data"),
        "--no-progress",
        *extra,
    ]


def _run_lines(folder: Path) -> int:
    return sum(1 for line in (folder / "run.trec").read_text().splitlines() if not line.startswith("#"))


def _table_header(out: str) -> list[str]:
    header = next(line for line in out.splitlines() if line.startswith("| dataset"))
    return [cell.strip() for cell in header.strip("|").split("|")]


# ------------------------------------------------------------------------------------------- naming


def test_result_key_is_the_slug_for_defaults_and_spells_out_other_settings() -> None:
    assert result_key("bm25", {}) == "bm25"
    assert result_key("bm25", {"top_k": 100}) == "bm25@top_k=100"
    # Sorted, so the same settings in another order name the same folder.
    assert result_key("m", {"top_k": 10, "precision": "int8"}) == result_key(
        "m", {"precision": "int8", "top_k": 10}
    )
    assert result_key("m", {"top_k": 10, "precision": "int8"}) == "m@precision=int8+top_k=10"


def test_result_key_hashes_values_a_folder_name_should_not_hold() -> None:
    # "a,b" and "a-b" would read the same once made folder-safe: the hash keeps them apart.
    first, second = (
        result_key("m", {"index": "HNSW32,efSearch=64"}),
        result_key("m", {"index": "HNSW32-efSearch=64"}),
    )
    assert first != second
    assert first.startswith("m@index=HNSW32-efSearch=64-") and "," not in first
    prompts = {"query_prefix": "Represent this sentence for searching relevant passages: ", "doc_prefix": ""}
    long_key = result_key("m", prompts)
    assert len(long_key) < 70 and " " not in long_key and long_key == result_key("m", dict(prompts))
    assert long_key != result_key("m", {**prompts, "query_prefix": "query: "})


def test_settings_label_names_the_model_and_its_settings() -> None:
    assert settings_label("bm25", {}) == "bm25"
    assert settings_label("bm25", {"top_k": 100, "split": "dev"}) == "bm25 (split=dev, top_k=100)"


# ------------------------------------------------------------------------------- the top-k sequence


def test_top_k_sequence_keeps_both_results_and_the_table_shows_both(
    tmp_path: Path, capsys, beir_mirror: Path
) -> None:
    """The issue's sequence: bm25 at the default top-k 1000, then --top-k 100; neither replaces the other."""
    args = _eval_args(tmp_path, "--dataset", "scifact", "--model", "bm25", "--mirror", str(beir_mirror))
    assert main(args) == 0
    assert main([*args, "--top-k", "100"]) == 0
    capsys.readouterr()
    scifact = tmp_path / "results" / "scifact"
    default, top100 = scifact / "bm25", scifact / "bm25@top_k=100"
    # 300 queries: up to 1000 and up to 100 documents each.
    assert 100 * 300 < _run_lines(default) <= 1000 * 300
    assert 0 < _run_lines(top100) <= 100 * 300
    stored = load_result(top100)
    assert (stored.model, stored.model_slug, stored.label) == ("bm25", "bm25@top_k=100", "bm25 (top_k=100)")
    assert stored.identity_settings == {"top_k": 100}
    assert stored.provenance["result"]["label"] == "bm25 (top_k=100)"
    assert load_result(default).label == "bm25" and load_result(default).identity_settings == {}

    # An identical run reuses its own folder, for either setting.
    stamps = {folder: (folder / "metrics.json").stat().st_mtime_ns for folder in (default, top100)}
    assert main([*args, "--top-k", "100"]) == 0
    assert main([*args, "--top-k", "1000"]) == 0  # the default, spelled out: the default folder
    assert capsys.readouterr().out.count("(reused)") == 2
    assert {folder: (folder / "metrics.json").stat().st_mtime_ns for folder in stamps} == stamps

    assert main(["table", str(tmp_path / "results"), "--metrics", "recall@1000"]) == 0
    out = capsys.readouterr().out
    assert _table_header(out)[1:] == ["bm25", "bm25 (top_k=100)"]
    row = next(line for line in out.splitlines() if line.startswith("| scifact"))
    cells = [cell.strip().strip("*") for cell in row.strip("|").split("|")][1:]
    assert float(cells[0]) > float(cells[1])  # recall@1000 of a top-100 run is its recall@100

    # A model's name selects its default result (one baseline); a key or a label selects that result.
    assert main(["table", str(tmp_path / "results"), "--metrics", "ndcg@10", "--baseline", "bm25"]) == 0
    assert _table_header(capsys.readouterr().out)[1:] == ["bm25", "bm25 (top_k=100)"]
    for spec in ("bm25@top_k=100", "bm25 (top_k=100)"):
        assert main(["table", str(tmp_path / "results"), "--metrics", "ndcg@10", "--models", spec]) == 0
        assert _table_header(capsys.readouterr().out)[1:] == ["bm25 (top_k=100)"]


def test_label_option_names_the_column_and_a_rerun_renames_without_recomputing(
    tmp_path: Path, capsys, beir_mirror: Path
) -> None:
    args = _eval_args(tmp_path, "--dataset", "scifact", "--model", "bm25", "--mirror", str(beir_mirror))
    assert main([*args, "--top-k", "10", "--label", "BM25 top 10"]) == 0
    folder = tmp_path / "results" / "scifact" / "bm25@top_k=10"
    assert load_result(folder).label == "BM25 top 10"
    run_stamp = (folder / "run.trec").stat().st_mtime_ns
    assert main([*args, "--top-k", "10", "--label", "shallow BM25"]) == 0
    assert "(reused)" in capsys.readouterr().out
    assert (folder / "run.trec").stat().st_mtime_ns == run_stamp
    assert load_result(folder).label == "shallow BM25"
    assert load_result(folder).provenance["result"]["label"] == "shallow BM25"
    assert main([*args, "--top-k", "10"]) == 0  # no --label: the result keeps the one it has
    assert load_result(folder).label == "shallow BM25"
    assert main(["table", str(tmp_path / "results"), "--metrics", "ndcg@10"]) == 0
    assert _table_header(capsys.readouterr().out)[1:] == ["shallow BM25"]


def test_other_metrics_score_the_stored_run_again_in_the_same_folder(
    tmp_path: Path, capsys, beir_mirror: Path
) -> None:
    """Metrics move no retrieval: the folder is not forked, and the run is scored again, not retrieved."""
    args = _eval_args(tmp_path, "--dataset", "scifact", "--model", "bm25", "--mirror", str(beir_mirror))
    assert main([*args, "--top-k", "100"]) == 0
    folder = tmp_path / "results" / "scifact" / "bm25@top_k=100"
    first = load_result(folder)
    assert "bm25_retrieve" in first.provenance["timings"] or "retrieve" in first.provenance["timings"]
    assert main([*args, "--top-k", "100", "--metrics", "ndcg@10", "map"]) == 0
    assert "(reused)" not in capsys.readouterr().out
    assert [path.name for path in folder.parent.iterdir()] == ["bm25@top_k=100"]
    again = load_result(folder)
    assert set(again.metrics) == {"ndcg@10", "map"}
    assert again.metrics["ndcg@10"] == first.metrics["ndcg@10"]
    assert "retrieve" not in again.provenance["timings"] and "evaluate" in again.provenance["timings"]
    assert again.provenance["retrieval"]["bm25_settings"] == first.provenance["retrieval"]["bm25_settings"]


def test_a_folder_written_before_identities_is_read_labelled_and_reused(
    tmp_path: Path, capsys, beir_mirror: Path
) -> None:
    args = _eval_args(tmp_path, "--dataset", "scifact", "--model", "bm25", "--mirror", str(beir_mirror))
    assert main(args) == 0
    capsys.readouterr()
    folder = tmp_path / "results" / "scifact" / "bm25"
    # Rewrite it as the harness wrote results before: no label, no identity settings, no "result" block.
    metrics = json.loads((folder / "metrics.json").read_text())
    for key in ("label", "identity_settings"):
        del metrics[key]
    (folder / "metrics.json").write_text(json.dumps(metrics))
    provenance = json.loads((folder / "provenance.json").read_text())
    del provenance["result"]
    (folder / "provenance.json").write_text(json.dumps(provenance))
    old = load_result(folder)
    assert (old.label, old.identity_settings, old.stored_label) == ("bm25", {}, None)
    assert [result.label for result in collect_results(tmp_path / "results").results] == ["bm25"]
    stamp = (folder / "run.trec").stat().st_mtime_ns
    assert main(args) == 0
    assert "(reused)" in capsys.readouterr().out
    assert (folder / "run.trec").stat().st_mtime_ns == stamp


# --------------------------------------------------------------------------- a dense runtime sequence


def _tiny_beir(root: Path) -> Path:
    folder = root / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    texts = ["immune cells attack the virus", "gene expression in tumor cells", "blood pressure study"]
    docs = [{"_id": f"d{i}", "title": "", "text": text} for i, text in enumerate(texts)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    queries = [{"_id": "q1", "text": "immune cells"}, {"_id": "q2", "text": "tumor gene"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(query) + "\n" for query in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td1\t1\n")
    return folder


@pytest.fixture()
def tiny_record_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A model record (in a user config folder) for a tiny random BERT: cls pooling, dot product."""
    weights = build_tiny_bert(tmp_path / "tiny-weights")
    models = tmp_path / "config" / "models"
    models.mkdir(parents=True)
    (models / "tinyrec.yaml").write_text(
        f"name: tinyrec\nmodel_id: {weights}\nkind: transformers\npooling: cls\nnormalize: false\n"
        "similarity: dot\nmax_length: 16\n"
    )
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path / "config"))
    return "tinyrec"


def test_runtime_sequence_keeps_both_results(tmp_path: Path, capsys, tiny_record_name: str) -> None:
    """A dense model at the default runtime (exact), then --runtime torch: two folders, two columns."""
    args = _eval_args(tmp_path, "--dataset", str(_tiny_beir(tmp_path)), "--model", tiny_record_name)
    assert main(args) == 0
    assert main([*args, "--runtime", "torch"]) == 0
    assert main([*args, "--runtime", "exact"]) == 0  # the default spelled out: reuses the default folder
    assert capsys.readouterr().out.count("(reused)") == 1
    (results,) = (tmp_path / "results").iterdir()  # a folder dataset is named by its folder and a hash
    assert sorted(path.name for path in results.iterdir()) == ["tinyrec", "tinyrec@runtime=torch"]
    torch_result = load_result(results / "tinyrec@runtime=torch")
    assert torch_result.label == "tinyrec (runtime=torch)"
    assert torch_result.provenance["config"]["encoder_options"] == {"runtime": "torch"}
    assert torch_result.metrics == pytest.approx(load_result(results / "tinyrec").metrics, abs=1e-6)
    assert main(["table", str(tmp_path / "results"), "--metrics", "ndcg@10"]) == 0
    assert _table_header(capsys.readouterr().out)[1:] == ["tinyrec", "tinyrec (runtime=torch)"]


# ---------------------------------------------------------------------------------- unique labels


def _stored(slug: str, model: str, source: str | None = None, label: str | None = None) -> StoredResult:
    model_info: dict = {"identity": {"folder_name": Path(source).name} if source else {}}
    if source:
        model_info["source"] = source
    return StoredResult(
        directory=Path("/results/scifact") / slug,
        dataset="scifact",
        split="test",
        model=model,
        model_slug=slug,
        metrics={},
        per_query={},
        n_queries=0,
        settings={},
        provenance={"model": model_info},
        stored_label=label,
    )


def test_checkpoints_are_labelled_by_folder_name_made_unique_by_their_parent() -> None:
    first = _stored(
        "local__checkpoint-500-aaaa1111", "/abs/run-a/checkpoint-500", "/abs/run-a/checkpoint-500"
    )
    second = _stored(
        "local__checkpoint-500-bbbb2222", "/abs/run-b/checkpoint-500", "/abs/run-b/checkpoint-500"
    )
    third = _stored(
        "local__checkpoint-900-cccc3333", "/abs/run-a/checkpoint-900", "/abs/run-a/checkpoint-900"
    )
    assert first.label == "checkpoint-500"  # an older result, no stored label: the folder's name, no path
    results = [first, second, third]
    labels = display_labels(results, [r.model_slug for r in results])
    assert list(labels.values()) == ["run-a/checkpoint-500", "run-b/checkpoint-500", "checkpoint-900"]


def test_a_label_given_twice_is_told_apart_by_a_short_hash() -> None:
    results = [_stored("bm25@top_k=10", "bm25", label="mine"), _stored("bm25@top_k=20", "bm25", label="mine")]
    labels = display_labels(results, [r.model_slug for r in results])
    assert len(set(labels.values())) == 2
    assert all(label.startswith("mine [") for label in labels.values())


def test_copied_result_folders_keep_one_column_per_identity(tmp_path: Path) -> None:
    """Collection keys results by dataset, split and result key: both settings of one model survive."""
    source = tmp_path / "src"
    for key, settings in (("bm25", {}), ("bm25@top_k=100", {"top_k": 100})):
        folder = source / "mydata" / key
        folder.mkdir(parents=True)
        metrics = {
            "dataset": "mydata",  # outside the registry: no pinned fingerprint to compare
            "split": "test",
            "model": "bm25",
            "model_slug": key,
            "identity_settings": settings,
            "metrics": {"ndcg@10": 0.5},
            "per_query": {"q1": {"ndcg@10": 0.5}},
        }
        (folder / "metrics.json").write_text(json.dumps(metrics))
        (folder / "provenance.json").write_text(
            json.dumps({"dataset": {"fingerprint": {"corpus.jsonl": "x"}}})
        )
    shutil.copytree(source, tmp_path / "results")
    collection = collect_results(tmp_path / "results")
    assert sorted(result.label for result in collection.results) == ["bm25", "bm25 (top_k=100)"]
    assert collection.skipped == []


def test_an_experiment_step_names_its_result_with_label(tmp_path: Path, capsys, beir_mirror: Path) -> None:
    import yaml

    step = {"kind": "eval", "dataset": "scifact", "model": ["bm25"], "top_k": 10, "no_progress": True}
    step |= {"mirror": str(beir_mirror), "label": "BM25 at 10", "data_dir": str(tmp_path / "data")}
    step |= {"results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache")}
    experiment = tmp_path / "x.yaml"
    experiment.write_text(yaml.safe_dump({"name": "x", "output": str(tmp_path / "out"), "steps": [step]}))
    assert main(["run", str(experiment)]) == 0, capsys.readouterr().err
    assert load_result(tmp_path / "results" / "scifact" / "bm25@top_k=10").label == "BM25 at 10"


@pytest.mark.slow
def test_precision_sequence_keeps_both_results(tmp_path: Path, capsys, tiny_record_name: str) -> None:
    """The issue's sequence: fp32 (the default), then --precision int8: the int8 result replaces nothing."""
    pytest.importorskip("onnxruntime", reason="--precision int8 needs the [onnx] extra")
    args = _eval_args(tmp_path, "--dataset", str(_tiny_beir(tmp_path)), "--model", tiny_record_name)
    assert main(args) == 0
    assert main([*args, "--precision", "int8"]) == 0, capsys.readouterr().err
    (results,) = (tmp_path / "results").iterdir()
    assert sorted(path.name for path in results.iterdir()) == ["tinyrec", "tinyrec@precision=int8"]
    int8 = load_result(results / "tinyrec@precision=int8")
    assert int8.label == "tinyrec (precision=int8)" and "int8" in int8.runtime_label
    assert "int8" not in load_result(results / "tinyrec").runtime_label
    capsys.readouterr()
    assert main(["table", str(tmp_path / "results"), "--metrics", "ndcg@10"]) == 0
    assert _table_header(capsys.readouterr().out)[1:] == ["tinyrec", "tinyrec (precision=int8)"]
