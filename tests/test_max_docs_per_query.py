"""``harness evaluate --max-docs-per-query N``: trec_eval's -M, checked against trec_eval's own output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_trec_eval_fixtures import DATA, QRELS, TRUNC, expected_values

from harness.api import evaluate
from harness.cli import main


def test_cut_at_100_equals_trec_eval_minus_m(tmp_path: Path) -> None:
    """out.test.aqcM is `trec_eval -a -q -c -M100` on results.trunc: every printed value matches."""
    output = tmp_path / "m100.json"
    code = main(
        [
            "evaluate",
            str(QRELS),
            str(TRUNC),
            "--complete",
            "--max-docs-per-query",
            "100",
            "--metrics",
            "map",
            "ndcg",
            "p@5",
            "p@10",
            "ndcg@10",
            "recall@100",
            "--per-query",
            "--output",
            str(output),
        ]
    )
    assert code == 0
    result = json.loads(output.read_text())
    expected = expected_values(DATA / "out.test.aqcM")
    checked = 0
    for qid, values in expected.items():
        ours = result["metrics"] if qid == "all" else result["per_query"][qid]
        for name, printed in values.items():
            if name in ours:
                assert f"{ours[name]:.4f}" == printed, (qid, name)
                checked += 1
    assert checked == 18  # six metrics for queries 301, 303 and all
    uncut = evaluate(qrels=QRELS, run=TRUNC, complete=True, metrics=["map"])
    assert uncut.evaluation.aggregate["map"] != pytest.approx(result["metrics"]["map"])  # the cut matters


@pytest.mark.parametrize(("precision", "kept_relevant"), [("float64", 1), ("float32", 0)])
def test_the_cut_ranks_as_trec_eval_with_that_precision(
    tmp_path: Path, precision: str, kept_relevant: int
) -> None:
    """a scores above b in float64 but ties with it in float32, where the larger docid (b) ranks first:
    cut at 2, float64 keeps c and a (relevant), float32 (trec_eval 9 -M 2) keeps c and b."""
    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 a 1\nq1 0 b 0\nq1 0 c 0\n")
    run = tmp_path / "run"
    run.write_text("q1 Q0 c 1 0.5 t\nq1 Q0 a 2 0.30000000000000004 t\nq1 Q0 b 3 0.3 t\n")
    result = evaluate(qrels=qrels, run=run, metrics=["p@2"], max_docs_per_query=2, score_precision=precision)
    assert result.evaluation.aggregate["p@2"] == kept_relevant / 2


def test_an_out_of_range_depth_is_one_error_line(capsys: pytest.CaptureFixture) -> None:
    code = main(["evaluate", str(QRELS), str(TRUNC), "--max-docs-per-query", "0"])
    assert code == 2
    assert (
        "--max-docs-per-query: must be a whole number from 1 to 2,147,483,647, got 0"
        in capsys.readouterr().err
    )
