"""p-MRR equals mteb's calculate_pmrr (after its tie fix) on hand-made and random FollowIR runs."""

from __future__ import annotations

import random

import pytest

from harness.core.errors import HarnessError
from harness.evaluation.pmrr import p_mrr, rank_change_score, ranks, split_instruction_run

retrieval_metrics = pytest.importorskip("mteb._evaluators.retrieval_metrics")


def mteb_pmrr(original, changed, changed_qrels):
    """The installed mteb's own function, fed the run layout its FollowIR tasks build."""
    return retrieval_metrics.calculate_pmrr(
        {f"{qid}-og": docs for qid, docs in original.items()},
        {f"{qid}-changed": docs for qid, docs in changed.items()},
        changed_qrels,
    )


def test_hand_worked_case():
    # q1: d1 goes from rank 1 to rank 3 (followed: 1 - (1/3)/(1/1) = 2/3); d2 from 2 to 1 (-1/2).
    # q2: d9 is not retrieved under the altered instruction: rank 3 (= 2 + 1), from 2: 1 - (1/3)/(1/2) = 1/3.
    original = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d8": 2.0, "d9": 1.0}}
    changed = {"q1": {"d2": 3.0, "d3": 2.0, "d1": 1.0}, "q2": {"d8": 5.0, "d7": 4.0}}
    qrels = {"q1": ["d1", "d2"], "q2": ["d9"]}
    result = p_mrr(original, changed, qrels)
    assert result.per_query == pytest.approx({"q1": (2 / 3 - 1 / 2) / 2, "q2": 1 / 3})
    assert result.score == pytest.approx(((2 / 3 - 1 / 2) / 2 + 1 / 3) / 2)
    assert result.score == mteb_pmrr(original, changed, qrels)


def test_ties_follow_trec_eval_order_as_mteb_does_after_its_fix():
    # All scores tied: trec_eval (and mteb after #5092) ranks by doc id descending, whatever the dict order.
    original = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}
    changed = {"q": {"c": 1.0, "a": 1.0, "b": 1.0}}
    assert ranks(original["q"], ["c", "b", "a", "zz"]) == [1, 2, 3, 4]
    result = p_mrr(original, changed, {"q": ["a", "c"]})
    assert result.score == 0.0 == mteb_pmrr(original, changed, {"q": ["a", "c"]})


def test_rank_change_score_signs():
    assert rank_change_score(1, 1) == 0.0
    assert rank_change_score(1, 4) == pytest.approx(0.75)  # pushed down: followed the instruction
    assert rank_change_score(4, 1) == pytest.approx(-0.75)  # pulled up: ignored it
    assert -1 <= rank_change_score(1000, 1) < 0 < rank_change_score(1, 1000) < 1


def test_a_query_missing_from_a_run_is_left_out_as_mteb_does():
    original = {"q1": {"d1": 2.0, "d2": 1.0}}
    changed = {"q1": {"d2": 2.0, "d1": 1.0}, "q2": {"d5": 1.0}}
    qrels = {"q1": ["d1"], "q2": ["d5"]}
    result = p_mrr(original, changed, qrels)
    assert result.missing == ("q2",)
    assert result.score == mteb_pmrr(original, changed, qrels) == pytest.approx(0.5)


def test_no_scorable_query_is_one_error_line():
    with pytest.raises(HarnessError, match="none of the 1 queries") as raised:
        p_mrr({"q1-og": {"d": 1.0}}, {"q1-changed": {"d": 1.0}}, {"q1": ["d"]})
    assert "\n" not in str(raised.value)


def test_split_instruction_run():
    original, changed = split_instruction_run({"7-og": {"d": 1.0}, "7-changed": {"e": 2.0}})
    assert original == {"7": {"d": 1.0}} and changed == {"7": {"e": 2.0}}
    with pytest.raises(HarnessError, match="'7' ends in neither"):
        split_instruction_run({"7": {"d": 1.0}})


@pytest.mark.parametrize("seed", range(30))
def test_random_runs_equal_mteb(seed):
    rng = random.Random(seed)
    docs = [f"d{n}" for n in range(rng.randint(3, 40))]
    queries = [str(n) for n in range(rng.randint(1, 25))]

    def ranking():
        picked = rng.sample(docs, rng.randint(1, len(docs)))
        # Coarse scores: many ties, which is where the tie order matters.
        return {doc: float(rng.randint(0, 5)) / 4 for doc in picked}

    original = {qid: ranking() for qid in queries}
    changed = {qid: ranking() for qid in queries}
    qrels = {qid: rng.sample(docs, rng.randint(1, min(6, len(docs)))) for qid in queries}
    ours = p_mrr(original, changed, qrels)
    assert ours.score == pytest.approx(mteb_pmrr(original, changed, qrels), abs=1e-12)


def test_a_combined_followir_run_scores_as_mtebs_task_scoring():
    """mteb's FollowIR tasks score one run holding <qid>-og and <qid>-changed rows (evaluate_p_mrr_change)."""
    rng = random.Random(7)
    docs = [f"d{n}" for n in range(30)]
    run = {
        f"{qid}-{suffix}": {doc: float(rng.randint(0, 9)) for doc in rng.sample(docs, 20)}
        for qid in ("1", "2", "3")
        for suffix in ("og", "changed")
    }
    qrels = {qid: {doc: 1 for doc in rng.sample(docs, 5)} for qid in run}
    changed_qrels = {qid: rng.sample(docs, 3) for qid in ("1", "2", "3")}
    mteb_scores = retrieval_metrics.evaluate_p_mrr_change(
        qrels, run, changed_qrels, [1, 3, 5, 10, 20, 100, 1000]
    )
    assert p_mrr(*split_instruction_run(run), changed_qrels).score == pytest.approx(
        mteb_scores["p-MRR"], abs=1e-12
    )
