"""Judged@k warns only when a system is far below what the qrels allow, or far below its row in a table."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels

from harness.api.view_commands import table
from harness.evaluation.judged import judged_warning, reachable_share
from harness.evaluation.metrics import evaluate


def test_reachable_share_is_what_the_judged_count_allows() -> None:
    assert reachable_share(1, 1000, 10) == pytest.approx(0.1)  # one judged document: 1 of the top 10
    assert reachable_share(25, 1000, 10) == 1.0
    assert reachable_share(3, 4, 10) == 0.75  # a ranking of 4 divides by 4, as Judged@k does
    assert reachable_share(3, 0, 10) == pytest.approx(0.3)  # an empty ranking could have held 10


def _pooled(n_queries: int, judged_per_query: int) -> dict[str, dict[str, int]]:
    return {f"q{q}": {f"j{q}-{i}": int(i == 0) for i in range(judged_per_query)} for q in range(n_queries)}


def _run(qrels: dict[str, dict[str, int]], judged_in_top10: int) -> dict[str, dict[str, float]]:
    """Per query: ``judged_in_top10`` judged documents, then unjudged ones, 20 documents in all."""
    run = {}
    for qid, judged in qrels.items():
        docs = sorted(judged)[:judged_in_top10] + [f"{qid}-x{i}" for i in range(20)]
        run[qid] = {doc: 100.0 - rank for rank, doc in enumerate(docs[:20])}
    return run


def test_sparse_qrels_do_not_warn_where_every_system_is_at_its_ceiling() -> None:
    # BEIR-style: one judged document per query; a system finding it has Judged@10 = 0.1, all it can have.
    qrels = _pooled(30, 1)
    evaluation = evaluate(qrels, _run(qrels, 1), ["ndcg@10"])
    assert evaluation.judged["mean"]["judged@10"] == pytest.approx(0.1)
    assert evaluation.judged["ceiling"]["judged@10"] == pytest.approx(0.1)
    assert evaluation.judged["warning"] is None
    # Missing it everywhere is 0.1 below the ceiling: a bad system, not a judging gap worth a warning.
    assert evaluate(qrels, _run(qrels, 0), ["ndcg@10"]).judged["warning"] is None


def test_pooled_qrels_warn_when_far_below_the_ceiling() -> None:
    qrels = _pooled(30, 50)  # judged deep enough that every top 10 could be judged
    assert evaluate(qrels, _run(qrels, 9), ["ndcg@10"]).judged["warning"] is None
    warning = evaluate(qrels, _run(qrels, 7), ["ndcg@10"]).judged["warning"]
    assert warning.startswith("only 70% of the top-10 documents are judged (Judged@10 < 0.8)")
    half = _pooled(30, 5)  # the qrels allow half of the top 10
    warning = evaluate(half, _run(half, 2), ["ndcg@10"]).judged["warning"]
    assert warning.startswith("only 20% of the top-10 documents are judged where the qrels allow 50%")
    assert evaluate(half, _run(half, 4), ["ndcg@10"]).judged["warning"] is None


def test_warning_from_means_alone_keeps_the_pooled_rule() -> None:
    assert judged_warning({"judged@10": 0.79}).startswith("only 79% of the top-10 documents are judged")
    assert judged_warning({"judged@10": 0.8}) is None
    assert judged_warning({"judged@10": 0.09}, {"judged@10": 0.11}) is None


def _retrieved(qrels: dict[str, dict[str, int]], buried: set[str]) -> dict[str, dict[str, float]]:
    """Rankings of 100 like a retriever's: the judged documents first, or (``buried``) after ten others."""
    run = {}
    for qid, judged in qrels.items():
        others = [f"other-{i}" for i in range(100)]
        docs = (others[:10] if qid in buried else []) + sorted(judged) + others
        run[qid] = {doc: 1000.0 - rank for rank, doc in enumerate(dict.fromkeys(docs[:100]))}
    return run


def test_scifact_runs_never_warn(beir_mirror: Path) -> None:
    # scifact judges 1.1 documents per query: Judged@10 can reach 0.113, far under the old 0.8 threshold.
    qrels = real_qrels(beir_mirror, "scifact")
    ceiling = sum(min(10, len(judged)) / 10 for judged in qrels.values()) / len(qrels)
    assert ceiling == pytest.approx(0.113, abs=0.001)
    for buried in (set(), every_other(qrels, 0), set(qrels)):
        judged = evaluate(qrels, _retrieved(qrels, buried), ["ndcg@10"]).judged
        assert judged["ceiling"]["judged@10"] == pytest.approx(ceiling)
        assert judged["mean"]["judged@10"] < 0.8 and judged["warning"] is None


def test_table_warns_only_for_the_system_far_below_its_row(tmp_path: Path, beir_mirror: Path) -> None:
    scifact = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    make_result(tmp_path, "scifact", "ideal", _retrieved(scifact, set()), scifact, fingerprint)
    make_result(tmp_path, "scifact", "buried", _retrieved(scifact, set(scifact)), scifact, fingerprint)
    notes = table(results_dir=tmp_path, metrics=["ndcg@10"]).tableset.tables[0].notes
    assert not any("Judged@" in note or "judged@" in note for note in notes), notes

    pooled = _pooled(40, 50)
    make_result(tmp_path, "pooled", "ideal", _run(pooled, 10), pooled, {"qrels": "x"})
    make_result(tmp_path, "pooled", "buried", _run(pooled, 5), pooled, {"qrels": "x"})
    notes = table(results_dir=tmp_path, metrics=["ndcg@10"], datasets=["pooled"]).tableset.tables[0].notes
    (warning,) = [note for note in notes if note.startswith("Warning: judged@10")]
    assert "buried on pooled 0.50 of a reachable 1.00" in warning and "ideal on" not in warning
