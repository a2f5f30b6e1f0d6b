"""BRIGHT's excluded_ids, applied before scoring, equal BRIGHT's own scoring and mteb's BRIGHT v1.1 tasks.

BRIGHT is not on PyPI: its logic is restated here from the published scripts (xlang-ai/BRIGHT
``retrievers.py`` ``get_scores``: score the whole corpus, pop every excluded id but "N/A", keep the top
1000 by score; ``run.py``: assert no excluded id is scored or is a gold id, then pytrec_eval at
k 1, 5, 10, 25, 50, 100 via ``calculate_retrieval_metrics``).
"""

from __future__ import annotations

import random

import pytest
import pytrec_eval

from harness.core.errors import HarnessError
from harness.evaluation.excluded_ids import apply_excluded_ids, check_excluded_ids
from harness.evaluation.metrics import evaluate

BRIGHT_KS = (1, 5, 10, 25, 50, 100)


def bright_get_scores(corpus_scores, excluded_ids, keep=1000):
    """BRIGHT retrievers.py get_scores, restated: per query, pop the excluded ids, keep the top `keep`."""
    emb_scores = {}
    for query_id, doc_scores in corpus_scores.items():
        cur_scores = dict(doc_scores)
        for did in set(excluded_ids[query_id]):
            if did != "N/A":
                cur_scores.pop(did)
        ranked = sorted(cur_scores.items(), key=lambda x: x[1], reverse=True)[:keep]
        emb_scores[query_id] = dict(ranked)
    return emb_scores


def bright_run_py_metrics(scores, gold_ids, excluded_ids):
    """BRIGHT run.py's checks and calculate_retrieval_metrics (nDCG@k and Recall@k, unrounded)."""
    ground_truth = {qid: dict.fromkeys(gold, 1) for qid, gold in gold_ids.items()}
    for qid, excluded in excluded_ids.items():
        for did in excluded:
            assert did not in scores[qid]
            assert did not in ground_truth[qid]
    measures = {"ndcg_cut." + ",".join(map(str, BRIGHT_KS)), "recall." + ",".join(map(str, BRIGHT_KS))}
    per_query = pytrec_eval.RelevanceEvaluator(ground_truth, measures).evaluate(scores)
    return {
        f"{name}@{k}": sum(values[f"{key}_{k}"] for values in per_query.values()) / len(per_query)
        for k in BRIGHT_KS
        for name, key in (("ndcg", "ndcg_cut"), ("recall", "recall"))
    }


def random_bright_task(seed, n_docs=300, n_queries=12):
    rng = random.Random(seed)
    docs = [f"doc{n}" for n in range(n_docs)]
    # Distinct scores (BRIGHT's score-only sort and trec_eval's order then agree on the kept set).
    corpus_scores = {
        str(q): dict(zip(docs, rng.sample(range(10 * n_docs), n_docs), strict=True)) for q in range(n_queries)
    }
    gold, excluded = {}, {}
    for qid in corpus_scores:
        picked = rng.sample(docs, 8)
        gold[qid] = picked[:3]
        excluded[qid] = ["N/A"] if rng.random() < 0.3 else picked[3 : 3 + rng.randint(1, 5)]
        # An excluded document is one the query matches trivially: it scores at the top. Gold documents
        # score high too, between integer scores (no ties), so the exclusion moves them into the top 10.
        for rank, doc in enumerate(picked[3:8]):
            corpus_scores[qid][doc] = 10 * n_docs + rank
        for doc, below in zip(picked[:3], rng.sample(range(1, 40), 3), strict=True):
            corpus_scores[qid][doc] = 10 * n_docs - below + 0.5
    return corpus_scores, gold, excluded


def test_hand_worked_exclusion():
    run = {"q1": {"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0}, "q2": {"a": 1.0, "x": 2.0}}
    qrels = {"q1": {"c": 1}, "q2": {"a": 1}}
    kept = apply_excluded_ids(run, {"q1": ["a", "b", "zz"], "q2": ["N/A"]}, qrels)
    # q1: the two documents above c are excluded, so c is first: nDCG@10 = 1, where it was 0.5 before.
    assert kept == {"q1": {"c": 3.0, "d": 2.0}, "q2": {"a": 1.0, "x": 2.0}}
    before = evaluate(qrels, run, ["ndcg@10"]).per_query["q1"]["ndcg@10"]
    after = evaluate(qrels, kept, ["ndcg@10"]).per_query["q1"]["ndcg@10"]
    assert (before, after) == (pytest.approx(0.5), 1.0)


def test_depth_keeps_the_best_remaining_hits_in_trec_eval_order():
    run = {"q": {"a": 3.0, "b": 2.0, "c": 2.0, "d": 1.0}}
    # Tie between b and c at the cut: trec_eval order (doc id descending) keeps c.
    assert apply_excluded_ids(run, {"q": ["a"]}, {}, depth=1) == {"q": {"c": 2.0}}


@pytest.mark.parametrize("seed", range(8))
def test_random_runs_score_as_bright_scores_them(seed):
    corpus_scores, gold, excluded = random_bright_task(seed)
    reference = bright_run_py_metrics(bright_get_scores(corpus_scores, excluded, keep=100), gold, excluded)
    qrels = {qid: dict.fromkeys(ids, 1) for qid, ids in gold.items()}
    kept = apply_excluded_ids(corpus_scores, excluded, qrels, depth=100)
    ours = evaluate(qrels, kept, ["ndcg", "recall"], ks=BRIGHT_KS).aggregate
    assert ours == pytest.approx(reference, abs=1e-12)
    # Without the exclusion the numbers differ: the rule matters on these cases.
    unexcluded = evaluate(qrels, apply_excluded_ids(corpus_scores, {}, qrels, depth=100), ["ndcg@10"])
    assert unexcluded.aggregate["ndcg@10"] < reference["ndcg@10"]


def test_mteb_bright_v1_1_ranks_only_the_non_excluded_documents(monkeypatch):
    """mteb's BRIGHT v1.1 loader (load_bright_data, run here on an in-memory copy of the hub's rows) turns
    excluded_ids into top_ranked, the documents each query is ranked over; ranking only those equals
    ranking the whole corpus and then excluding."""
    bright = pytest.importorskip("mteb.tasks.retrieval.eng.bright_v1_1_retrieval")
    corpus_scores, gold, excluded = random_bright_task(3, n_docs=50, n_queries=6)
    rows = {
        "documents": [{"id": doc, "content": doc} for doc in corpus_scores["0"]],
        "examples": [
            {
                "id": qid,
                "query": qid,
                "gold_ids": gold[qid],
                "gold_ids_long": [],
                "excluded_ids": excluded[qid],
            }
            for qid in corpus_scores
        ],
    }
    monkeypatch.setattr(bright.datasets, "load_dataset", lambda path, config, **kwargs: rows[config])
    _, _, relevant, top_ranked = bright.load_bright_data("mteb/BRIGHT", "biology", ["standard"])
    qrels = {qid: dict(docs) for qid, docs in relevant["standard"].items()}
    assert qrels == {qid: dict.fromkeys(ids, 1) for qid, ids in gold.items()}
    mteb_ranked = {
        qid: {doc: corpus_scores[qid][doc] for doc in docs} for qid, docs in top_ranked["standard"].items()
    }
    assert apply_excluded_ids(corpus_scores, excluded, qrels) == mteb_ranked


def test_an_excluded_gold_document_is_one_error_line():
    qrels = {"q7": {"d1": 0, "d2": 2}}
    check_excluded_ids({"q7": ["d1"]}, qrels)  # judged but not relevant: allowed
    with pytest.raises(HarnessError) as raised:
        apply_excluded_ids({"q7": {"d2": 1.0}}, {"q7": ["d1", "d2"]}, qrels)
    message = str(raised.value)
    assert "\n" not in message
    assert "query 'q7' excludes document 'd2'" in message and "relevant" in message
