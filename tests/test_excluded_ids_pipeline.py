"""BRIGHT's excluded ids through ``harness eval``: removed from each query's ranking before scoring (the
run file and the metrics both lack them, and each query still gets its top k), and an excluded id that
the qrels judge relevant stops the run with one line before anything is written."""

from __future__ import annotations

from pathlib import Path

from test_hub_layout import make_hub_copy

from harness.cli import main
from harness.evaluation.trec import read_run

WORDS = ["cat", "dog", "bird", "fish", "mouse", "horse"]
DOCS = [{"_id": f"d{i}", "title": "", "text": f"{WORDS[i % 6]} {WORDS[(i + 1) % 6]} pet"} for i in range(12)]
QUERIES = [{"_id": "q1", "text": "cat dog pet"}, {"_id": "q2", "text": "bird fish pet"}]
QRELS = [
    {"query-id": "q1", "corpus-id": "d0", "score": 1},
    {"query-id": "q2", "corpus-id": "d2", "score": 1},
]


def _eval(folder: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    args = ["eval", "--dataset", str(folder), "--model", "bm25", "--top-k", "5", "--no-progress"]
    args += ["--results-dir", str(tmp_path / "results"), "--data-dir", str(tmp_path / "data")]
    args += ["--cache-dir", str(tmp_path / "cache")]
    code = main(args)
    return code, capsys.readouterr().err


def test_excluded_ids_leave_the_ranking_before_scoring(tmp_path: Path, capsys) -> None:
    queries = [dict(QUERIES[0], excluded_ids=["d6", "d11"]), dict(QUERIES[1], excluded_ids=["N/A"])]
    folder = make_hub_copy(tmp_path / "toy", DOCS, queries, QRELS)
    code, err = _eval(folder, tmp_path, capsys)
    assert code == 0, err
    (run_file,) = (tmp_path / "results").rglob("run.trec")
    run = read_run(run_file)
    assert not {"d6", "d11"} & set(run["q1"])  # both would rank in q1's top 5 ("cat dog" documents)
    assert len(run["q1"]) == 5 and len(run["q2"]) == 5  # retrieved deeper, cut back to the top k
    assert run_file.parent.name == "bm25@top_k=5"  # the asked top k names the result, not the depth


def test_the_same_data_without_exclusions_ranks_them(tmp_path: Path, capsys) -> None:
    folder = make_hub_copy(tmp_path / "toy", DOCS, QUERIES, QRELS)
    code, err = _eval(folder, tmp_path, capsys)
    assert code == 0, err
    (run_file,) = (tmp_path / "results").rglob("run.trec")
    assert {"d6", "d11"} <= set(read_run(run_file)["q1"])  # so the first test's exclusion is real


def test_an_excluded_relevant_document_is_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    queries = [dict(QUERIES[0], excluded_ids=["d0"]), QUERIES[1]]
    folder = make_hub_copy(tmp_path / "toy", DOCS, queries, QRELS)
    code, err = _eval(folder, tmp_path, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: ") and "'q1' excludes document 'd0'" in lines[-1]
    assert "Traceback" not in err and not list((tmp_path / "results").rglob("metrics.json"))
