"""Metrics: equal to pytrec_eval where it has the measure, and to a plain reference everywhere.

The reference below is written from the measures' definitions (trec_eval's documentation and
BEIR's capped recall), loop by loop, sharing no code with ``harness.evaluation.metrics``.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from harness.core.errors import HarnessError
from harness.datasets.qrels import read_qrels
from harness.evaluation.metrics import evaluate, parse_metrics
from harness.evaluation.trec import write_run

ALL_METRICS = [
    "ndcg",
    "ndcg@1",
    "ndcg@3",
    "ndcg@10",
    "recall@5",
    "recall@20",
    "p@1",
    "p@5",
    "p@50",
    "map",
    "map@5",
    "map@100",
    "mrr",
    "mrr@3",
    "mrr@10",
    "rprec",
    "bpref",
    "gmap",
    "success@1",
    "success@5",
    "r_cap@3",
    "r_cap@20",
]
PYTREC_NAMES = {
    "ndcg": "ndcg",
    "map": "map",
    "mrr": "recip_rank",
    "rprec": "Rprec",
    "bpref": "bpref",
    "gmap": "gm_map",
}
PYTREC_CUT = {"ndcg": "ndcg_cut", "recall": "recall", "p": "P", "map": "map_cut", "success": "success"}


# --- reference implementation -------------------------------------------------------------------------


def reference_ranking(docs: dict[str, float]) -> list[str]:
    ranked = sorted(docs, reverse=True)  # docid descending (string order) ...
    ranked.sort(key=lambda docid: docs[docid], reverse=True)  # ... kept within equal scores: sort is stable
    return ranked


def reference_metric(name: str, docs: dict[str, float], judged: dict[str, int], level: int) -> float:
    family, _, cutoff = name.partition("@")
    ranking = reference_ranking(docs)
    k = int(cutoff) if cutoff else len(ranking)
    relevant = [docid in judged and judged[docid] >= level for docid in ranking]
    n_relevant = sum(1 for rel in judged.values() if rel >= level)

    def average_precision(depth: int) -> float:
        if not n_relevant:
            return 0.0
        found, total = 0, 0.0
        for rank, is_relevant in enumerate(relevant[:depth], start=1):
            if is_relevant:
                found += 1
                total += found / rank
        return total / n_relevant

    if family == "ndcg":  # gain = grade (negative grades count as 0), log2(rank + 1) discount
        gains = [max(judged.get(docid, 0), 0) for docid in ranking[:k]]
        dcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))
        # The ideal ranking is of all judged documents, not only as many as were retrieved.
        ideal = sorted((max(rel, 0) for rel in judged.values()), reverse=True)[
            : int(cutoff) if cutoff else None
        ]
        idcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal, start=1))
        return dcg / idcg if idcg else 0.0
    if family == "p":
        return sum(relevant[:k]) / k
    if family == "recall":
        return sum(relevant[:k]) / n_relevant if n_relevant else 0.0
    if family == "map":
        return average_precision(k)
    if family == "gmap":
        return math.log(max(average_precision(k), 1e-5))
    if family == "mrr":
        for rank, is_relevant in enumerate(relevant[:k], start=1):
            if is_relevant:
                return 1.0 / rank
        return 0.0
    if family == "rprec":
        return sum(relevant[:n_relevant]) / n_relevant if n_relevant else 0.0
    if family == "success":
        return 1.0 if any(relevant[:k]) else 0.0
    if family == "r_cap":
        return sum(relevant[:k]) / min(k, n_relevant) if n_relevant else 0.0
    if family == "bpref":  # judged non-relevant above each relevant doc, both capped at R
        n_nonrelevant = sum(1 for rel in judged.values() if 0 <= rel < level)
        nonrelevant_above, total = 0, 0.0
        for docid in ranking:
            if docid not in judged:
                continue
            if judged[docid] >= level:
                if nonrelevant_above:
                    total += 1 - min(nonrelevant_above, n_relevant) / min(n_nonrelevant, n_relevant)
                else:
                    total += 1
            else:
                nonrelevant_above += 1
        return total / n_relevant if n_relevant else 0.0
    raise AssertionError(name)


def reference_aggregate(name: str, values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.exp(mean) if name == "gmap" else mean


# --- synthetic data ---------------------------------------------------------------------------------------


def tied_collection(seed: int, n_queries: int = 40) -> tuple[dict, dict]:
    """Qrels and a run with heavy score ties and numeric docids ("9" > "10" as strings).

    Includes a judged query with no relevant document, a judged query the run misses, a run
    query without judgments, judged documents the run never retrieves and a run shorter than
    some cutoffs.
    """
    rng = random.Random(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        qid = str(q)
        pool = [str(d) for d in rng.sample(range(1, 300), 60)]
        depth = rng.choice([3, 8, 30, 60])
        run[qid] = {docid: rng.choice([1.0, 0.5, 0.5, 0.25, 0.0, rng.random()]) for docid in pool[:depth]}
        judged = rng.sample(pool, 25)
        qrels[qid] = {docid: rng.choice([0, 0, 1, 2]) for docid in judged}
    qrels["0"] = {docid: 0 for docid in qrels["0"]}  # judged, nothing relevant
    qrels["missing"] = {"5": 1, "6": 2}
    run["unjudged"] = {"1": 1.0}
    return qrels, run


def pytrec_values(qrels: dict, run: dict, names: list[str], level: int = 1) -> dict[str, dict[str, float]]:
    """Per-query values straight from pytrec_eval, keyed by our metric names."""
    keys = {}
    for name in names:
        family, _, k = name.partition("@")
        if k and family in PYTREC_CUT:
            keys[name] = (f"{PYTREC_CUT[family]}.{k}", f"{PYTREC_CUT[family]}_{k}")
        elif not k and family in PYTREC_NAMES:
            keys[name] = (PYTREC_NAMES[family], PYTREC_NAMES[family])
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {request for request, _ in keys.values()}, relevance_level=level
    )
    raw = evaluator.evaluate(run)
    return {qid: {name: values[key] for name, (_, key) in keys.items()} for qid, values in raw.items()}


# --- names ---------------------------------------------------------------------------------------------


def test_metric_names_are_case_insensitive_with_aliases() -> None:
    assert parse_metrics(["NDCG@10", "Precision@5", "P@5", "R-Precision", "MRR", "Map@100", "R_CAP@3"]) == [
        "ndcg@10",
        "p@5",
        "rprec",
        "mrr",
        "map@100",
        "r_cap@3",
    ]


def test_bare_names_expand_over_ks() -> None:
    assert parse_metrics(["ndcg", "bpref", "recall"], ks=[1, 5, 10]) == [
        "ndcg@1",
        "ndcg@5",
        "ndcg@10",
        "bpref",
        "recall@1",
        "recall@5",
        "recall@10",
    ]
    assert parse_metrics(["map", "mrr", "ndcg", "gmap"]) == ["map", "mrr", "ndcg", "gmap"]


def test_seed_use_case_names() -> None:
    names = parse_metrics(["mrr", "map", "recall", "ndcg", "precision"], ks=[1, 5, 10, 20, 50, 100])
    expected = [
        f"{family}@{k}" for family in ("mrr", "map", "recall", "ndcg", "p") for k in (1, 5, 10, 20, 50, 100)
    ]
    assert names == expected


@pytest.mark.parametrize(
    ("names", "ks", "message"),
    [
        (["ndcg@10", "mAP@x"], None, "unknown metric 'mAP@x'; valid metrics: ndcg, ndcg@k, recall@k"),
        (["f1"], None, "unknown metric 'f1'; valid metrics:"),
        (["recall"], None, "'recall' needs a cutoff"),
        (["ndcg@0"], None, "at least 1"),
        (["bpref@10"], None, "takes no cutoff"),
        (["ndcg"], [0, 5], "at least 1"),
    ],
)
def test_bad_metric_names(names: list[str], ks, message: str) -> None:
    with pytest.raises(HarnessError, match=message.replace("(", r"\(")):
        parse_metrics(names, ks)


# --- values ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level", [1, 2])
def test_every_metric_matches_the_reference_and_pytrec_eval(seed: int, level: int) -> None:
    qrels, run = tied_collection(seed)
    result = evaluate(qrels, run, ALL_METRICS, relevance_level=level)
    assert sorted(result.per_query) == sorted(set(qrels) & set(run) - {"missing"})
    expected_pytrec = pytrec_values(qrels, run, ALL_METRICS, level)
    for qid, values in result.per_query.items():
        assert list(values) == ALL_METRICS
        for name, value in values.items():
            assert value == pytest.approx(reference_metric(name, run[qid], qrels[qid], level), abs=1e-12), (
                qid,
                name,
            )
            if name in expected_pytrec[qid]:
                assert value == expected_pytrec[qid][name], (qid, name)
    for name, value in result.aggregate.items():
        per_query = [values[name] for values in result.per_query.values()]
        assert value == pytest.approx(reference_aggregate(name, per_query), rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_cut_only_metrics_equal_pytrec_eval_on_the_full_run(seed: int) -> None:
    # With only cut measures requested, pytrec_eval sees just the top k: the result must not change.
    qrels, run = tied_collection(seed + 10)
    names = ["ndcg@1", "ndcg@5", "p@3", "recall@7", "map@4", "success@2", "mrr@3", "r_cap@5"]
    result = evaluate(qrels, run, names)
    direct = pytrec_values(qrels, run, names)
    for qid, values in result.per_query.items():
        for name in names:
            if name in direct[qid]:
                assert values[name] == direct[qid][name], (qid, name)


def test_default_averaging_versus_complete() -> None:
    qrels, run = tied_collection(1)
    names = ["ndcg@10", "map", "gmap", "recall@20"]
    default = evaluate(qrels, run, names)
    complete = evaluate(qrels, run, names, complete=True)
    assert default.qrels_queries_without_results == complete.qrels_queries_without_results == ["missing"]
    assert default.run_queries_without_qrels == complete.run_queries_without_qrels == ["unjudged"]
    assert default.n_queries == len(qrels) - 1 == complete.n_queries - 1
    assert "missing" not in default.per_query
    assert complete.per_query["missing"] == {
        "ndcg@10": 0.0,
        "map": 0.0,
        "gmap": math.log(1e-5),
        "recall@20": 0.0,
    }
    n = default.n_queries
    for name in ("ndcg@10", "map", "recall@20"):
        assert complete.aggregate[name] == pytest.approx(default.aggregate[name] * n / (n + 1), rel=1e-12)
    # trec_eval -c: the missing query enters gm_map's mean of logs as log(1e-5).
    assert complete.aggregate["gmap"] == pytest.approx(
        math.exp((math.log(default.aggregate["gmap"]) * n + math.log(1e-5)) / (n + 1)), rel=1e-12
    )
    payload_default, payload_complete = default.to_json(per_query=False), complete.to_json(per_query=False)
    assert payload_default["n_queries"] == n and payload_complete["n_queries"] == n + 1
    for payload in (payload_default, payload_complete):
        assert payload["qrels_queries_without_results"]["count"] == 1
        assert payload["run_queries_without_qrels"] == {"count": 1, "skipped": True, "qids": ["unjudged"]}
        assert "per_query" not in payload
    assert payload_complete["settings"]["complete"] is True


def test_empty_ranking_counts_as_no_results() -> None:
    qrels = {"a": {"1": 1}, "b": {"2": 1}}
    result = evaluate(qrels, {"a": {"1": 1.0}, "b": {}}, ["map"])
    assert result.n_queries == 1
    assert result.qrels_queries_without_results == ["b"]
    assert result.aggregate["map"] == 1.0


def test_a_query_with_no_judgments_is_not_judged() -> None:
    result = evaluate({"a": {"1": 1}, "b": {}}, {"a": {"1": 1.0}, "b": {"1": 1.0}}, ["mrr@10", "r_cap@5"])
    assert result.run_queries_without_qrels == ["b"]
    assert result.per_query == {"a": {"mrr@10": 1.0, "r_cap@5": 1.0}}


def test_mrr_at_k_counts_a_first_hit_at_exactly_rank_k() -> None:
    qrels = {"q": {"c": 1}}
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    values = evaluate(qrels, run, ["mrr@2", "mrr@3", "mrr", "r_cap@2", "r_cap@3"]).per_query["q"]
    assert values == {"mrr@2": 0.0, "mrr@3": 1 / 3, "mrr": 1 / 3, "r_cap@2": 0.0, "r_cap@3": 1.0}


def test_numpy_scores_and_file_inputs(tmp_path: Path) -> None:
    qrels, run = tied_collection(2)
    as_float32 = {
        qid: {docid: np.float32(score) for docid, score in docs.items()} for qid, docs in run.items()
    }
    widened = {
        qid: {docid: float(score) for docid, score in docs.items()} for qid, docs in as_float32.items()
    }
    assert (
        evaluate(qrels, as_float32, ALL_METRICS).per_query == evaluate(qrels, widened, ALL_METRICS).per_query
    )
    write_run(tmp_path / "run.trec", run, tag="t")
    (tmp_path / "qrels.trec").write_text(
        "".join(f"{qid} 0 {docid} {rel}\n" for qid, judged in qrels.items() for docid, rel in judged.items())
    )
    from_files = evaluate(tmp_path / "qrels.trec", str(tmp_path / "run.trec"), ALL_METRICS)
    assert from_files.per_query == evaluate(qrels, run, ALL_METRICS).per_query


def test_mismatched_inputs_are_errors() -> None:
    with pytest.raises(HarnessError, match="no run query has judgments"):
        evaluate({"a": {"1": 1}}, {"b": {"1": 1.0}}, ["map"])
    with pytest.raises(HarnessError, match="not an int"):
        evaluate({"a": {"1": 1.5}}, {"a": {"1": 1.0}}, ["map"])
    with pytest.raises(HarnessError, match="unknown metric"):
        evaluate({"a": {"1": 1}}, {"a": {"1": 1.0}}, ["ndcg@10", "hits@10"])


def test_scifact_qrels_with_a_synthetic_run(beir_mirror: Path) -> None:
    qrels = read_qrels(beir_mirror / "scifact" / "qrels" / "test.tsv").qrels
    rng = random.Random(0)
    decoys = [str(rng.randrange(10**7, 10**8)) for _ in range(300)]
    run = {}
    for i, (qid, judged) in enumerate(sorted(qrels.items())):
        if i % 10 == 9:
            continue  # some judged queries without results
        docs = {docid: rng.choice([0.9, 0.8, 0.5]) for docid in rng.sample(decoys, 40)}
        docs.update({docid: rng.choice([0.9, 0.5, 0.1]) for docid in judged})
        run[qid] = docs
    names = parse_metrics(["mrr", "map", "recall", "ndcg", "precision"], ks=[1, 5, 10, 20, 50, 100])
    result = evaluate(qrels, run, names)
    assert result.n_queries == 270 and len(result.qrels_queries_without_results) == 30
    direct = pytrec_values(qrels, run, names)
    for name in names:
        per_query = [result.per_query[qid][name] for qid in sorted(run)]
        assert per_query == pytest.approx(
            [reference_metric(name, run[qid], qrels[qid], 1) for qid in sorted(run)], abs=1e-12
        )
        if name in direct[next(iter(direct))]:
            assert result.aggregate[name] == pytest.approx(
                pytrec_eval.compute_aggregated_measure(name, [direct[qid][name] for qid in direct]), abs=1e-12
            )


def test_nfcorpus_graded_qrels(beir_mirror: Path) -> None:
    qrels = read_qrels(beir_mirror / "nfcorpus" / "qrels" / "test.tsv").qrels
    rng = random.Random(1)
    run = {}
    for qid, judged in list(qrels.items())[:60]:
        docids = list(judged) + [f"MED-{rng.randrange(1, 6000)}" for _ in range(30)]
        run[qid] = {docid: rng.choice([0.3, 0.2, 0.1]) for docid in docids}
    for level in (1, 2):
        names = ["ndcg@10", "ndcg", "map", "p@10", "bpref"]
        result = evaluate(qrels, run, names, relevance_level=level)
        direct = pytrec_values(qrels, run, names, level)
        for qid in run:
            for name in names:
                assert result.per_query[qid][name] == direct[qid][name]
                assert result.per_query[qid][name] == pytest.approx(
                    reference_metric(name, run[qid], qrels[qid], level), abs=1e-12
                )
    # Graded gains: nDCG ignores the relevance level, binary measures do not.
    ndcg = {
        level: evaluate(qrels, run, ["ndcg@10", "p@10"], relevance_level=level).aggregate for level in (1, 2)
    }
    assert ndcg[1]["ndcg@10"] == ndcg[2]["ndcg@10"]
    assert ndcg[2]["p@10"] < ndcg[1]["p@10"]
