"""Judged@k on a hand-made run, and tie bounds checked against every order of the tied documents."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.evaluation.judged import judged_warning
from harness.evaluation.metrics import aggregate_values, evaluate
from harness.evaluation.trec import write_run

QRELS = {
    "q1": {"d1": 1, "d2": 0, "d3": 2},
    "q2": {"d9": 1},
    "q3": {"a": 0},
    "q4": {"z": 1},  # judged, never retrieved
}
RUN = {
    "q1": {"d1": 0.9, "x1": 0.8, "d2": 0.7, "x2": 0.6},
    "q2": {"d8": 3.0, "d9": 2.0},
    "q3": {"a": 1.0, "b": 1.0},  # a tie: ir_measures puts a (the smaller id) first, trec_eval b
}


def test_judged_at_k_is_ir_measures_judged_counting_every_grade():
    evaluation = evaluate(QRELS, RUN, ["p@1", "p@2", "ndcg@3"])
    per_query = evaluation.judged["per_query"]
    # q1: d1 judged, x1 not, d2 judged (grade 0 counts), x2 not; k beyond the 4 documents divides by 4.
    assert per_query["q1"] == {"judged@1": 1.0, "judged@2": 0.5, "judged@3": 2 / 3, "judged@10": 0.5}
    assert per_query["q2"] == {"judged@1": 0.0, "judged@2": 0.5, "judged@3": 0.5, "judged@10": 0.5}
    # q3: the tie goes docid ascending (a, judged with grade 0, first), as ir_measures sorts it.
    assert per_query["q3"] == {"judged@1": 1.0, "judged@2": 0.5, "judged@3": 0.5, "judged@10": 0.5}
    assert evaluation.judged["mean"]["judged@10"] == pytest.approx(0.5)
    assert evaluation.judged["definition"].startswith("ir_measures' Judged@k")
    assert "q4" not in per_query  # averaged over the same queries as the metrics
    # Scores as read, not rounded: under float32 the metrics tie 0.3 and 0.30000000000000004, judged does not.
    near = {"q2": {"d9": 0.30000000000000004, "d8": 0.3}}
    assert (
        evaluate(QRELS, near, ["p@1"], score_precision="float32").judged["per_query"]["q2"]["judged@1"] == 1.0
    )
    complete = evaluate(QRELS, RUN, ["p@1"], complete=True)
    assert complete.judged["per_query"]["q4"] == {"judged@1": 0.0, "judged@10": 0.0}  # empty ranking


def test_judged_warning_below_the_threshold_only():
    assert judged_warning({"judged@10": 0.79}).startswith("only 79% of the top-10 documents are judged")
    assert judged_warning({"judged@10": 0.8}) is None and judged_warning({}) is None


def test_evaluate_command_writes_judged_beside_the_metrics_and_warns(tmp_path: Path, capsys):
    qrels_path, run_path, output = tmp_path / "qrels.tsv", tmp_path / "run.trec", tmp_path / "out.json"
    qrels_path.write_text(
        "".join(f"{qid} 0 {docid} {rel}\n" for qid, docs in QRELS.items() for docid, rel in docs.items())
    )
    write_run(run_path, RUN, "hand")
    code = main(["evaluate", str(qrels_path), str(run_path), "--metrics", "ndcg@10", "-o", str(output)])
    captured = capsys.readouterr()
    assert code == 0
    payload = json.loads(output.read_text())
    assert payload["judged"]["mean"]["judged@10"] == pytest.approx(0.5)
    assert list(payload["metrics"]) == ["ndcg@10"]  # the requested metrics stay as they were
    assert "judged@10 0.5000" in captured.out
    assert "warning:" not in captured.err  # 50% judged where the qrels allow 58%: nothing to act on


# ------------------------------------------------------------------------------------------- ties

TIE_QRELS = {
    "A": {"a1": 2, "a3": 1, "a4": 0, "a5": 2, "a7": 1, "a8": 1, "a9": 1},  # a9 never retrieved
    "B": {"b1": 0, "b2": 1, "b4": 2, "b5": 1},
    "C": {"c2": 1},
}
TIE_RUN = {
    # ranks 2-4 tied (straddle @3), ranks 5-7 tied (straddle @5); a2 and a6 are not judged
    "A": {"a1": 5.0, "a2": 4.0, "a3": 4.0, "a4": 4.0, "a5": 3.0, "a6": 3.0, "a7": 3.0, "a8": 1.0},
    # ranks 1-4 tied (straddle @1 and @3)
    "B": {"b1": 2.0, "b2": 2.0, "b3": 2.0, "b4": 2.0, "b5": 1.0},
    "C": {"c1": 3.0, "c2": 2.0, "c3": 1.0},  # no tie
}
TIE_METRICS = [
    "p@1", "ndcg@3", "ndcg@5", "p@3", "recall@5", "r_cap@5", "success@3", "map", "map@5", "mrr", "mrr@3",
    "rprec", "bpref", "ndcg", "gmap",
]  # fmt: skip


def every_order(docs: dict[str, float]) -> list[dict[str, float]]:
    """Every ranking the tie groups allow, each re-scored n..1 so the evaluator sees exactly that order."""
    groups: dict[float, list[str]] = {}
    for docid, score in docs.items():
        groups.setdefault(score, []).append(docid)
    ordered_groups = [groups[score] for score in sorted(groups, reverse=True)]
    orders = []
    for choice in itertools.product(*(itertools.permutations(group) for group in ordered_groups)):
        ranking = [docid for group in choice for docid in group]
        orders.append({docid: float(len(ranking) - rank) for rank, docid in enumerate(ranking)})
    return orders


def test_tie_bounds_equal_the_extremes_over_every_order_of_tied_documents():
    evaluation = evaluate(TIE_QRELS, TIE_RUN, TIE_METRICS)
    ties = evaluation.ties
    # Brute force: each query's every order as its own query (a copy of its judgments), scored at once.
    copies_run, copies_qrels, owner = {}, {}, {}
    for qid, docs in TIE_RUN.items():
        for index, order in enumerate(every_order(docs)):
            copy = f"{qid}#{index}"
            copies_run[copy], copies_qrels[copy], owner[copy] = order, TIE_QRELS[qid], qid
    assert len(copies_run) == 3 * 2 * 3 * 2 + 4 * 3 * 2 + 1  # 36 + 24 + 1 orders
    every = evaluate(copies_qrels, copies_run, TIE_METRICS, diagnose=False).per_query
    for metric in TIE_METRICS:
        per_query = {
            qid: [values[metric] for copy, values in every.items() if owner[copy] == qid] for qid in TIE_RUN
        }
        # Queries are independent, so the lowest / highest mean takes each query's lowest / highest value.
        lowest = aggregate_values(metric, [min(values) for values in per_query.values()])
        highest = aggregate_values(metric, [max(values) for values in per_query.values()])
        bound = ties["bounds"][metric]
        assert bound["lowest"] == pytest.approx(lowest, abs=1e-12), metric
        assert bound["highest"] == pytest.approx(highest, abs=1e-12), metric
        assert bound["lowest"] <= evaluation.aggregate[metric] <= bound["highest"]
        assert bound["reported"] == evaluation.aggregate[metric]
        assert bound["method"].startswith("exact")
        assert bound["queries_that_can_move"] == sum(min(v) != max(v) for v in per_query.values())
    # The ties matter here: P@1 is 1 on A (untied top), 0 on C, and 0 or 1 on B by the order of its tie.
    assert (ties["bounds"]["p@1"]["lowest"], ties["bounds"]["p@1"]["highest"]) == pytest.approx(
        (1 / 3, 2 / 3)
    )
    assert ties["queries_with_ties"] == 2
    straddling = ties["straddling_cutoff"]
    assert {cut: entry["queries"] for cut, entry in straddling.items()} == {"@1": 1, "@3": 2, "@5": 1}
    assert straddling["@3"]["qids"] == ["A", "B"] and straddling["@1"]["qids"] == ["B"]


def test_a_run_without_ties_has_point_bounds():
    run = {"A": {doc: 10.0 - i for i, doc in enumerate(TIE_RUN["A"])}}
    evaluation = evaluate(TIE_QRELS, run, ["ndcg@5", "map"])
    assert evaluation.ties["queries_with_ties"] == 0
    for metric, bound in evaluation.ties["bounds"].items():
        assert bound["lowest"] == bound["highest"] == evaluation.aggregate[metric]


def test_ties_among_equal_grades_are_counted_but_cannot_move_a_metric():
    # a2 and a6 (both unjudged) share a score: a tie, at ranks 2-3, whose order changes nothing.
    run = {"A": {"a1": 5.0, "a2": 4.0, "a6": 4.0, "a3": 3.0}}
    evaluation = evaluate(TIE_QRELS, run, ["ndcg@2", "p@2", "map"])
    ties = evaluation.ties
    assert ties["queries_with_ties"] == 1 and ties["queries_whose_tie_order_matters"] == 0
    assert ties["straddling_cutoff"]["@2"]["queries"] == 1
    assert all(bound["lowest"] == bound["highest"] for bound in ties["bounds"].values())
