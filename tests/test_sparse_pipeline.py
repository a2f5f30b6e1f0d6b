"""A ``kind: sparse`` record through ``harness eval``: exact search by default, ``--index seismic`` as
its own result with its recall against exact, and a FAISS spec refused in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_bert import build_tiny_bert_mlm, build_tiny_splade

from harness.cli import main
from harness.evaluation.trec import read_run

RECORD = "name: tiny-splade\nmodel_id: example/tiny-splade\nkind: sparse\nmax_length: 32\nparams: {}\n"


@pytest.fixture(scope="module")
def splade_folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("splade")
    return build_tiny_splade(root / "splade", build_tiny_bert_mlm(root / "mlm"))


WORDS = ["cells", "risk", "protein", "virus", "brain", "blood", "gene", "mouse", "cancer", "study"]


def _tiny_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "", "text": " ".join(WORDS[i % 10 : i % 10 + 3])} for i in range(30)]
    queries = [{"_id": f"q{i}", "text": f"{WORDS[i]} {WORDS[(i + 1) % 10]}"} for i in range(8)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(8))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels, encoding="utf-8")
    return folder


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    beir_folder = _tiny_beir(tmp_path / "tiny")
    (tmp_path / "config" / "models").mkdir(parents=True)
    (tmp_path / "config" / "models" / "tiny-splade.yaml").write_text(RECORD, encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path / "config"))
    return ["eval", "--dataset", str(beir_folder), "--results-dir", str(tmp_path / "results")]


def _folders(results: Path) -> dict[str, Path]:
    return {path.parent.name: path.parent for path in results.rglob("metrics.json")}


def test_a_sparse_record_runs_exactly_and_seismic_keeps_its_own_result(
    workspace: list[str], splade_folder: Path, tmp_path: Path, capsys
) -> None:
    common = [*workspace, "--model", "tiny-splade", "--weights", str(splade_folder), "--no-progress"]
    common += ["--cache-dir", str(tmp_path / "cache"), "--top-k", "5"]
    assert main(common) == 0, capsys.readouterr().err
    assert main([*common, "--index", "seismic,recall_sample=5"]) == 0, capsys.readouterr().err
    folders = _folders(tmp_path / "results")
    exact = next(folder for name, folder in folders.items() if "index=" not in name)
    seismic = next(folder for name, folder in folders.items() if "index=seismic" in name)
    exact_details = json.loads((exact / "provenance.json").read_text())["retrieval"]
    assert {"avg_flops", "query_active_dims", "corpus_active_dims"} <= set(json.dumps(exact_details).split('"'))
    seismic_details = json.dumps(json.loads((seismic / "provenance.json").read_text())["retrieval"])
    assert "recall" in seismic_details and "seismic" in seismic_details
    assert read_run(exact / "run.trec")  # every query ranked


def test_a_faiss_index_for_a_sparse_model_is_one_line(
    workspace: list[str], splade_folder: Path, tmp_path: Path, capsys
) -> None:
    args = [*workspace, "--model", "tiny-splade", "--weights", str(splade_folder), "--index", "HNSW32"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is sparse" in err[0] and "seismic" in err[0]
    assert not (tmp_path / "results").exists()
