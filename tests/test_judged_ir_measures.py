"""Judged@k against ir_measures itself, on random runs full of ties and rankings shorter than k.

ir_measures (its JudgedProvider) orders a ranking by score descending and ties by docid ascending, and
divides by the ranking's length when it holds fewer than k documents. The harness's judged@k must give
the same value for every query ir_measures scores (judged queries present in the run), at every k, in
both score precisions (judged@k ranks the scores as read, as ir_measures does).
"""

from __future__ import annotations

import random

import ir_measures
import pytest

from harness.evaluation.judged import judged_name
from harness.evaluation.metrics import evaluate

N_RUNS = 300
KS = (1, 2, 3, 5, 10, 20)
TIED_SCORES = (1.0, 0.5, 0.25, 0.0, -0.0, 3.0)
NEAR_SCORES = (0.3, 0.30000000000000004, 1.0, 1.0 + 2**-40)  # equal in float32, not in float64
DOCIDS = ["d1", "d2", "d10", "D1", "1", "01", "9", "10", "z", "é", "e\u0301", "文", "a-b", "~"]


def random_case(seed: int) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    rng = random.Random(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for qid in (f"q{n}" for n in range(rng.randint(1, 6))):
        pool = rng.sample(DOCIDS, rng.randint(1, len(DOCIDS)))
        judged = rng.sample(pool, rng.randint(1, len(pool)))
        qrels[qid] = {docid: rng.choice([-1, 0, 0, 1, 2]) for docid in judged}
        length = rng.choice([1, 1, 2, 3, rng.randint(1, len(pool))])  # often shorter than k
        palette = rng.choice([TIED_SCORES, NEAR_SCORES, TIED_SCORES + NEAR_SCORES])
        retrieved = rng.sample(DOCIDS, min(length, len(DOCIDS)))
        run[qid] = {
            docid: rng.choice(palette) if rng.random() < 0.8 else rng.uniform(-1, 1) for docid in retrieved
        }
    return qrels, run


def ir_measures_judged(qrels: dict, run: dict, ks: tuple[int, ...]) -> dict[str, dict[str, float]]:
    measures = [ir_measures.Judged @ k for k in ks]
    values: dict[str, dict[str, float]] = {}
    for metric in ir_measures.iter_calc(measures, qrels, run):
        values.setdefault(metric.query_id, {})[judged_name(metric.measure["cutoff"])] = metric.value
    return values


def test_one_document_ranking_with_a_judged_document_is_fully_judged() -> None:
    qrels, run = {"q": {"a": 0}}, {"q": {"a": 1.0}}
    ours = evaluate(qrels, run, ["p@10"]).judged["per_query"]["q"]
    assert ours["judged@10"] == 1.0 == ir_measures_judged(qrels, run, (10,))["q"]["judged@10"]


def test_tied_scores_go_docid_ascending() -> None:
    qrels, run = {"q": {"a": 1}}, {"q": {"b": 2.0, "a": 2.0, "c": 1.0}}
    ours = evaluate(qrels, run, ["p@1"]).judged["per_query"]["q"]
    assert ours["judged@1"] == 1.0 == ir_measures_judged(qrels, run, (1,))["q"]["judged@1"]  # a before b


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_judged_at_k_equals_ir_measures_on_random_runs(precision: str) -> None:
    compared = short = tied = 0
    for seed in range(N_RUNS):
        qrels, run = random_case(seed)
        theirs = ir_measures_judged(qrels, run, KS)
        ours = evaluate(qrels, run, [f"p@{k}" for k in KS], score_precision=precision).judged["per_query"]
        assert set(ours) == set(theirs), seed
        for qid, values in theirs.items():
            assert ours[qid] == values, (seed, qid, run[qid], qrels[qid])
            compared += len(values)
            short += len(run[qid]) < max(KS)
            tied += len(set(run[qid].values())) < len(run[qid])
    # The cases must keep exercising what the definition is about.
    assert compared >= N_RUNS * len(KS) and short > N_RUNS and tied > N_RUNS / 2
