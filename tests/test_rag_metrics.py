"""RAG metrics that need no model, on hand-worked examples; reading RAG rows; rag-compare's paired test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_qa_cli import assert_one_line_error, run_cli, write_jsonl

from harness.evaluation.significance import paired_test
from harness.qa.rag.judge_client import parse_reply
from harness.qa.rag.rows import (
    RAGKeys,
    check_fields,
    id_context_precision,
    id_context_recall,
    id_scores,
    ranked_context_precision,
    read_rag_file,
)

REFERENCE = frozenset({"d1", "d2"})


def test_none_relevant() -> None:
    retrieved = ["x", "y", "z"]
    assert id_context_precision(retrieved, REFERENCE) == 0.0
    assert ranked_context_precision(retrieved, REFERENCE) == 0.0
    assert id_context_recall(retrieved, REFERENCE) == 0.0


def test_all_relevant() -> None:
    retrieved = ["d2", "d1"]
    assert id_context_precision(retrieved, REFERENCE) == 1.0
    assert ranked_context_precision(retrieved, REFERENCE) == 1.0
    assert id_context_recall(retrieved, REFERENCE) == 1.0


def test_mixed_ranks_by_hand() -> None:
    # Ranks: x(0) d1(1) y(0) d2(1): precision@2 = 1/2, precision@4 = 2/4; (1/2 + 2/4) / 2 relevant = 0.5.
    retrieved = ["x", "d1", "y", "d2"]
    assert ranked_context_precision(retrieved, REFERENCE) == pytest.approx(0.5)
    # Relevant first: d1(1) x(0) d2(1): (1/1 + 2/3) / 2 = 5/6; order matters, ID precision does not.
    assert ranked_context_precision(["d1", "x", "d2"], REFERENCE) == pytest.approx(5 / 6)
    assert id_context_precision(["d1", "x", "d2"], REFERENCE) == pytest.approx(2 / 3)
    assert id_context_recall(["d1", "x"], REFERENCE | {"d3"}) == pytest.approx(1 / 3)


def test_duplicates_count_once_at_their_first_rank() -> None:
    # d1 d1 x d1 -> distinct d1 x: precision 1/2, ranked (1/1) / 1 = 1, recall 1/2.
    retrieved = ["d1", "d1", "x", "d1"]
    assert id_context_precision(retrieved, REFERENCE) == pytest.approx(0.5)
    assert ranked_context_precision(retrieved, REFERENCE) == pytest.approx(1.0)
    assert id_context_recall(retrieved, REFERENCE) == pytest.approx(0.5)
    # x d2 d2 -> distinct x d2: ranked precision@2 x 1 / 1 = 1/2, not inflated by the repeat.
    assert ranked_context_precision(["x", "d2", "d2"], REFERENCE) == pytest.approx(0.5)


def test_empty_contexts_and_empty_reference() -> None:
    assert id_context_precision([], REFERENCE) == 0.0
    assert ranked_context_precision([], REFERENCE) == 0.0
    assert id_context_recall([], REFERENCE) == 0.0
    assert id_context_precision(["d1"], frozenset()) == 0.0
    assert id_context_recall(["d1"], frozenset()) is None  # nothing to recall: undefined, not 0 or 1


ROWS = [
    {"id": "a", "context_ids": ["d1", "x"], "reference_context_ids": ["d1"]},
    {"id": "b", "context_ids": [], "reference_context_ids": ["d2"]},
    {"id": "c", "context_ids": ["d3"], "reference_context_ids": []},
]


def test_read_rows_and_score_from_the_file(tmp_path: Path) -> None:
    rag_file = read_rag_file(write_jsonl(tmp_path / "rag.jsonl", ROWS))
    scores = {row.qid: id_scores(row, ("context_precision_id", "context_recall_id")) for row in rag_file.rows}
    assert scores == {
        "a": {"context_precision_id": 0.5, "context_recall_id": 1.0},
        "b": {"context_precision_id": 0.0, "context_recall_id": 0.0},
        "c": {"context_precision_id": 0.0, "context_recall_id": None},
    }


def test_qrels_give_relevance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\na\tx\t1\na\td1\t0\nb\td2\t2\n", encoding="utf-8")
    data = write_jsonl(
        tmp_path / "rag.jsonl", [{"id": r["id"], "context_ids": r["context_ids"]} for r in ROWS]
    )
    out = tmp_path / "out.json"
    argv = ["rag-eval", str(data), "--qrels", str(qrels), "--per-question", "--output", str(out)]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    report = json.loads(out.read_text())
    per_question = {row["id"]: row for row in report["per_question"]}
    assert per_question["a"]["context_precision_id"] == 0.5  # x relevant, d1 graded 0
    assert per_question["b"]["context_recall_id"] == 0.0
    assert per_question["c"]["context_precision_id"] is None  # c is unjudged in the qrels
    assert report["aggregate"]["context_precision_id"]["undefined"] == 1
    assert report["data"]["relevance"].startswith("qrels")
    assert report["metrics"] == ["context_precision_id", "context_precision_ranked", "context_recall_id"]


def test_default_metrics_note_fields_some_lines_lack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [dict(ROWS[0], answer="x", ground_truth="y"), ROWS[1]]  # only line 1 could use embeddings
    code, out, err = run_cli(["rag-eval", str(write_jsonl(tmp_path / "rag.jsonl", rows))], capsys)
    assert code == 0, err
    assert "note:" in err and "semantic_similarity" in err and "answer_correctness_embed" in err
    assert "context_recall_id" in out and "semantic_similarity" not in out


def test_missing_field_names_line_and_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(
        tmp_path / "rag.jsonl",
        [{"id": 1, "answer": "a", "context_ids": ["d"], "reference_context_ids": ["d"]}],
    )
    code, _, err = run_cli(["rag-eval", str(data), "--metrics", "semantic_similarity"], capsys)
    assert_one_line_error(code, err, f"{data}:1", "'ground_truth'", "--ground-truth-key")
    rag_file = read_rag_file(data)
    check_fields(rag_file, ["context_precision_id"], RAGKeys())  # has what it needs: no error


def test_judged_metric_without_judge_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "rag.jsonl", [{"id": 1, "question": "q", "answer": "a", "contexts": ["c"]}])
    code, _, err = run_cli(["rag-eval", str(data), "--metrics", "faithfulness"], capsys)
    assert_one_line_error(code, err, "faithfulness", "--judge")


def test_parse_reply_tolerates_fences_and_rejects_junk() -> None:
    assert parse_reply('```json\n{"statements": ["a"]}\n```') == {"statements": ["a"]}
    assert parse_reply('Sure! {"verdicts": []} Hope it helps.') == {"verdicts": []}
    assert parse_reply("no json here") is None
    assert parse_reply("[1, 2]") is None


def test_rag_compare_gives_the_engines_paired_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = ["d1"]
    rows_a = [
        {"id": f"q{i}", "context_ids": ["x", "d1"], "reference_context_ids": reference} for i in range(6)
    ]
    rows_b = [
        {"id": f"q{i}", "context_ids": ["d1", "x"], "reference_context_ids": reference} for i in range(6)
    ]
    rows_b[0]["context_ids"] = ["x", "y"]
    file_a, file_b = write_jsonl(tmp_path / "a.jsonl", rows_a), write_jsonl(tmp_path / "b.jsonl", rows_b)
    out = tmp_path / "cmp.json"
    code, stdout, err = run_cli(
        [
            "rag-compare",
            str(file_a),
            str(file_b),
            "--metrics",
            "context_precision_ranked",
            "--output",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    result = json.loads(out.read_text())["results"]["context_precision_ranked"]
    a = np.full(6, 0.5)
    b = np.array([0.0, 1, 1, 1, 1, 1])
    expected = paired_test(b, a, test="permutation", n_resamples=10_000, seed=42, confidence=0.95)
    assert result["n_queries"] == 6
    assert result["mean_baseline"] == pytest.approx(0.5) and result["mean_system"] == pytest.approx(5 / 6)
    assert result["difference"] == pytest.approx(1 / 3)
    assert result["p_value"] == pytest.approx(expected.p_value)
    assert "context_precision_ranked" in stdout and "paired permutation" in stdout
