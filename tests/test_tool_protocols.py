"""Each emulated tool against the real one, on random runs with ties and graded judgments.

sentence-transformers' ``InformationRetrievalEvaluator.compute_metrics``, mteb's ``RetrievalEvaluator.evaluate``
and ranx's ``evaluate`` are called as installed; BRIGHT's scoring (``retrievers.get_scores`` and
``calculate_retrieval_metrics``) and pyserini 2CR's (``--remove-query``, ``TrecWriter``'s ``{score:.6f}``,
``trec_eval -c`` 9) are transcribed from their sources below and run on pytrec_eval and on the independent
trec_eval of ``tests/trec_eval_reference.py``. Every value must agree to 1e-9. The random runs carry the
things that separate the tools: tied scores, scores float32 merges, doc ids of different lengths and
cases, self-hits, unjudged run queries, judged queries the run lacks, grades 0 to 3.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Callable

import numpy as np
import pytest
import trec_eval_reference as reference

from harness.datasets.mteb_tasks import load_mteb_tasks
from harness.evaluation.metrics import parse_metric_specs
from harness.evaluation.tool_orders import numba_quicksort_argsort
from harness.evaluation.tool_protocols import (
    SETTINGS,
    TREC_EVAL,
    Protocol,
    mteb_drops_identical_ids,
    score_under,
    tool_protocol,
    waterfall,
)
from harness.evaluation.trec import RunColumns

TOLERANCE = 1e-9
# Tied scores, and pairs only float32 merges (0.1 vs 0.1 + 1e-12, the two thirds).
SCORES = [1.0, 0.5, 0.25, 2.0, 0.1, 0.1 + 1e-12, 0.3333333333, 0.33333333333]
FAST_CASES = 40
SLOW_CASES = 500

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


@pytest.fixture(autouse=True)
def _quiet_engine() -> None:
    # Random runs often judge none of a query's documents; the engine's warning about it is expected here.
    logging.getLogger("harness.evaluation.metrics").setLevel(logging.ERROR)


def random_case(
    rng: random.Random, *, exact_queries: bool = False, with_gold: bool = False
) -> tuple[Qrels, Run]:
    """Judgments and a run: ``exact_queries`` makes the run answer exactly the judged queries; ``with_gold``
    gives every query a document of grade >= 1 (as BRIGHT's data has)."""
    qids = [f"q{i}" for i in range(rng.randint(2, 9))]
    pool = [f"d{i}" for i in range(rng.randint(10, 40))] + ["D1", "a", "d1x", "z"]
    qrels: Qrels = {}
    for qid in qids:
        docs = rng.sample([*pool, qid], rng.randint(1, 6))
        qrels[qid] = {doc: rng.choice([0, 1, 1, 2, 3]) for doc in docs}
        if with_gold and max(qrels[qid].values()) < 1:
            qrels[qid][docs[0]] = 1
    run: Run = {}
    for qid in [*qids, "u1", "u2"]:
        if exact_queries and qid.startswith("u"):
            continue
        if not exact_queries and rng.random() < 0.15:
            continue
        docs = rng.sample(pool, rng.randint(5, min(30, len(pool))))
        if rng.random() < 0.5:
            docs.insert(rng.randrange(len(docs)), qid)  # a self-hit
        tied = rng.random() < 0.8
        run[qid] = {doc: rng.choice(SCORES) if tied else rng.random() for doc in docs}
    if not any(qid in qrels for qid in run):
        return random_case(rng, exact_queries=exact_queries, with_gold=with_gold)
    return qrels, run


def emulated(tool_name: str, qrels: Qrels, run: Run, metric: str, **context) -> float:
    excluded = context.pop("excluded", None)
    tool = tool_protocol(tool_name, **context)
    spec = parse_metric_specs([metric])[0]
    return score_under(tool.protocol, qrels, RunColumns.from_run(run), spec, excluded).mean


def compare_cases(
    cases: int, seed: int, check: Callable[[random.Random], list[tuple[str, float, float]]]
) -> None:
    """Run ``check`` on ``cases`` random cases; every (what, emulated, real) must agree."""
    rng = random.Random(seed)
    differing, values = [], 0
    for case in range(cases):
        for what, ours, theirs in check(rng):
            values += 1
            if not math.isclose(ours, theirs, rel_tol=0.0, abs_tol=TOLERANCE):
                differing.append((case, what, ours, theirs))
    assert values > cases
    assert differing == []


# ------------------------------------------------------------------------------ sentence-transformers

ST_KS = [1, 3, 5, 10]
ST_METRICS = {
    "accuracy@k": "success",
    "precision@k": "p",
    "recall@k": "recall",
    "ndcg@k": "ndcg",
    "mrr@k": "mrr",
    "map@k": "map",
}


def st_check(rng: random.Random) -> list[tuple[str, float, float]]:
    from sentence_transformers.sentence_transformer.evaluation.information_retrieval import (
        InformationRetrievalEvaluator,
    )

    qrels, run = random_case(rng)
    # What a user loading BEIR qrels the usual way hands it: every judged row is a relevant document.
    relevant = {qid: set(judged) for qid, judged in qrels.items()}
    evaluator = InformationRetrievalEvaluator(
        dict.fromkeys(qrels, "query"),
        {},
        relevant,
        mrr_at_k=ST_KS,
        ndcg_at_k=ST_KS,
        accuracy_at_k=ST_KS,
        precision_recall_at_k=ST_KS,
        map_at_k=ST_KS,
    )
    # Its hits carry torch float32 similarities; a query the run lacks has none.
    hits = [
        [{"corpus_id": doc, "score": float(np.float32(score))} for doc, score in run.get(qid, {}).items()]
        for qid in evaluator.queries_ids
    ]
    real = evaluator.compute_metrics(hits)
    return [
        (f"{family}@{k}", emulated("st-ir", qrels, run, f"{family}@{k}"), real[name][k])
        for name, family in ST_METRICS.items()
        for k in ST_KS
    ]


def test_st_ir_equals_sentence_transformers() -> None:
    compare_cases(FAST_CASES, 1, st_check)


@pytest.mark.slow
def test_st_ir_equals_sentence_transformers_on_many_cases() -> None:
    compare_cases(SLOW_CASES, 101, st_check)


# ------------------------------------------------------------------------------------------- mteb

MTEB_CHECKED_KS = [1, 3, 5, 10, 20]


def mteb_check(rng: random.Random) -> list[tuple[str, float, float]]:
    from mteb._evaluators.retrieval_evaluator import RetrievalEvaluator

    qrels, run = random_case(rng)
    dataset = rng.choice(["arguana", "scifact"])  # a task that drops identical ids, and one that keeps them
    # mteb searches only the judged queries, so its results hold no other.
    results = {qid: dict(docs) for qid, docs in run.items() if qid in qrels}
    real = RetrievalEvaluator.evaluate(
        None, qrels, results, MTEB_CHECKED_KS, ignore_identical_ids=mteb_drops_identical_ids(dataset)
    )
    tables = [
        (real.ndcg, "NDCG", "ndcg"),
        (real.map, "MAP", "map"),
        (real.recall, "Recall", "recall"),
        (real.precision, "P", "p"),
        (real.hit_rate, "HitRate", "success"),
        (real.mrr, "MRR", "mrr"),
    ]
    return [
        (
            f"{dataset} {family}@{k}",
            emulated("mteb", qrels, run, f"{family}@{k}", dataset=dataset),
            table[f"{key}@{k}"],
        )
        for table, key, family in tables
        for k in MTEB_CHECKED_KS
    ]


def test_mteb_equals_mteb() -> None:
    compare_cases(FAST_CASES, 2, mteb_check)


@pytest.mark.slow
def test_mteb_equals_mteb_on_many_cases() -> None:
    compare_cases(SLOW_CASES, 102, mteb_check)


def test_the_identical_id_rule_is_each_mteb_tasks() -> None:
    import mteb

    for dataset, record in load_mteb_tasks().datasets.items():
        drops = mteb.get_task(record.task).ignore_identical_ids
        assert record.ignore_identical_ids == drops, record.task
        assert tool_protocol("mteb", dataset=dataset).protocol.drop_self_hits == drops


# ------------------------------------------------------------------------------------------- ranx

RANX_METRICS = {
    "ndcg@5": "ndcg@5",
    "ndcg@10": "ndcg@10",
    "ndcg": "ndcg",
    "map@10": "map@10",
    "map": "map",
    "mrr@3": "mrr@3",
    "mrr": "mrr",
    "recall@5": "recall@5",
    "precision@3": "p@3",
    "hit_rate@1": "success@1",
    "hit_rate@5": "success@5",
}


def ranx_check(rng: random.Random) -> list[tuple[str, float, float]]:
    from ranx import Qrels as RanxQrels
    from ranx import Run as RanxRun
    from ranx import evaluate as ranx_evaluate

    qrels, run = random_case(rng, exact_queries=rng.random() < 0.5)
    matches = set(run) == set(qrels)
    # The call a user makes: make_comparable only when ranx refuses the run without it.
    real = ranx_evaluate(RanxQrels(qrels), RanxRun(run), list(RANX_METRICS), make_comparable=not matches)
    return [
        (name, emulated("ranx", qrels, run, ours, run_matches_qrels=matches), real[name])
        for name, ours in RANX_METRICS.items()
    ]


def test_ranx_equals_ranx() -> None:
    compare_cases(FAST_CASES, 3, ranx_check)


@pytest.mark.slow
def test_ranx_equals_ranx_on_many_cases() -> None:
    compare_cases(SLOW_CASES, 103, ranx_check)


def test_the_quicksort_port_is_numbas_argsort() -> None:
    import numba

    @numba.njit
    def numba_argsort(values):
        return np.argsort(values)

    rng = random.Random(4)
    for _ in range(400):
        size = rng.randint(0, 200)
        distinct = rng.randint(1, 6)
        values = np.array([float(rng.randrange(distinct)) for _ in range(size)])
        expected = numba_argsort(values).tolist() if size else []
        assert numba_quicksort_argsort(values.tolist()) == expected


# ------------------------------------------------------------------------------------------ BRIGHT


def bright_get_scores(run: Run, excluded: dict[str, list[str]]) -> Run:
    """BRIGHT's ``retrievers.get_scores`` from a query's scores in corpus (here: file) order."""
    scores = {}
    for qid, docs in run.items():
        current = dict(docs)
        for docid in set(excluded.get(qid, [])):
            if docid != "N/A":
                current.pop(docid)
        kept = sorted(current.items(), key=lambda item: item[1], reverse=True)[:1000]
        scores[qid] = dict(kept)
    return scores


def bright_metrics(results: Run, qrels: Qrels, k_values=(1, 5, 10, 25, 50, 100)) -> dict[str, float]:
    """BRIGHT's ``calculate_retrieval_metrics`` (pytrec_eval, means rounded to 5 decimals)."""
    import pytrec_eval

    cut = ",".join(map(str, k_values))
    measures = {f"map_cut.{cut}", f"ndcg_cut.{cut}", f"recall.{cut}", f"P.{cut}", "recip_rank"}
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(results)
    out = {}
    for k in k_values:
        for name, key in (("ndcg", "ndcg_cut_"), ("map", "map_cut_"), ("recall", "recall_"), ("p", "P_")):
            out[f"{name}@{k}"] = round(sum(s[f"{key}{k}"] for s in scores.values()) / len(scores), 5)
    out["mrr"] = round(sum(s["recip_rank"] for s in scores.values()) / len(scores), 5)
    return out


def bright_check(rng: random.Random) -> list[tuple[str, float, float]]:
    qrels, run = random_case(rng, with_gold=True)
    if rng.random() < 0.1:  # queries deeper than BRIGHT's 1000, tied across the cut
        qid = next(iter(run))
        run[qid] = {f"x{i}": rng.choice([1.0, 0.5, 0.25]) for i in range(1100)}
        qrels.setdefault(qid, {})[f"x{rng.randrange(1100)}"] = 1
    excluded = {}
    for qid, docs in run.items():
        gold = {doc for doc, grade in qrels.get(qid, {}).items() if grade >= 1}
        candidates = [doc for doc in docs if doc not in gold]  # BRIGHT asserts no excluded id is gold
        excluded[qid] = rng.sample(candidates, min(len(candidates), rng.randint(0, 3))) or ["N/A"]
    truth = {qid: {doc: 1 for doc, grade in judged.items() if grade >= 1} for qid, judged in qrels.items()}
    real = bright_metrics(bright_get_scores(run, excluded), truth)
    return [
        (name, emulated("bright", qrels, run, name, excluded=excluded), value) for name, value in real.items()
    ]


def test_bright_equals_brights_scoring() -> None:
    compare_cases(FAST_CASES, 5, bright_check)


@pytest.mark.slow
def test_bright_equals_brights_scoring_on_many_cases() -> None:
    compare_cases(SLOW_CASES, 105, bright_check)


# ---------------------------------------------------------------------------------------- pyserini

PYSERINI_METRICS = ["ndcg@10", "recall@100", "recall@5", "map", "mrr", "p@5"]


def pyserini_check(rng: random.Random) -> list[tuple[str, float, float]]:
    qrels, run = random_case(rng)
    lines = []
    for qid, docs in run.items():
        hits = [(doc, score) for doc, score in docs.items() if doc != qid]  # --remove-query
        for rank, (doc, score) in enumerate(hits, start=1):
            lines.append(f"{qid} Q0 {doc} {rank} {score:.6f} Anserini")  # TrecWriter
    written = reference.read_run_text("\n".join(lines))
    real, _ = reference.evaluate(
        qrels, written, PYSERINI_METRICS, complete=True, float32=True
    )  # trec_eval -c
    return [(name, emulated("pyserini", qrels, run, name), real[name]) for name in PYSERINI_METRICS]


def test_pyserini_equals_its_2cr_pipeline() -> None:
    compare_cases(FAST_CASES, 6, pyserini_check)


@pytest.mark.slow
def test_pyserini_equals_its_2cr_pipeline_on_many_cases() -> None:
    compare_cases(SLOW_CASES, 106, pyserini_check)


# --------------------------------------------------------------------------------------- the settings


def test_every_setting_a_tool_changes_can_move_a_number() -> None:
    """No setting is dead weight: each, switched alone from trec_eval's protocol, moves some random case."""
    rng = random.Random(7)
    cases = [random_case(rng, with_gold=True) for _ in range(60)]
    deep = {f"x{i}": 2.0 - i / 1000 for i in range(1100)}  # a relevant document below BRIGHT's depth
    cases.append(({"q": {"x0": 1, "x1050": 1}}, {"q": deep}))
    excluded = {qid: list(docs)[:2] for _, run in cases for qid, docs in run.items()}
    for tool_name in ("st-ir", "mteb", "pyserini", "ranx", "bright"):
        tool = tool_protocol(tool_name, dataset="arguana", run_matches_qrels=False)
        for setting in SETTINGS:
            value = getattr(tool.protocol, setting.field)
            if value == getattr(TREC_EVAL, setting.field):
                continue
            alone = dataclasses.replace(TREC_EVAL, **{setting.field: value})
            metric = {"map_divisor": "map@3", "depth": "map"}.get(setting.field, "ndcg@3")
            spec = parse_metric_specs([metric])[0]
            moved = any(
                score_under(alone, qrels, RunColumns.from_run(run), spec, excluded).mean
                != score_under(TREC_EVAL, qrels, RunColumns.from_run(run), spec, excluded).mean
                for qrels, run in cases
            )
            assert moved, (tool_name, setting.field)


def test_the_steps_add_up_and_the_queries_explain_each_step() -> None:
    rng = random.Random(8)
    for _ in range(20):
        qrels, run = random_case(rng, with_gold=True)
        columns = RunColumns.from_run(run)
        excluded = {qid: list(docs)[:1] for qid, docs in run.items()}
        for tool_name in ("st-ir", "mteb", "pyserini", "ranx", "bright"):
            spec = parse_metric_specs(["map@5" if tool_name == "st-ir" else "ndcg@5"])[0]
            tool = tool_protocol(tool_name, dataset="quora", run_matches_qrels=set(run) == set(qrels))
            fall = waterfall(tool, qrels, columns, spec, excluded=excluded, top_queries=1000)
            assert fall.start == score_under(TREC_EVAL, qrels, columns, spec).mean
            assert fall.value == score_under(tool.protocol, qrels, columns, spec, excluded).mean
            assert math.isclose(
                fall.start + sum(step.change for step in fall.steps), fall.value, abs_tol=1e-12
            )
            for step in fall.steps:
                if step.setting == "mean":  # rounding moves the mean, no query
                    assert step.queries == []
                else:
                    total = sum(share for _, share in step.queries)
                    assert math.isclose(total, step.change, abs_tol=1e-12), (tool_name, step.setting)


def test_a_tie_order_decides_a_tied_ranking() -> None:
    """Two documents tied at the top, the relevant one's id smaller: trec_eval ranks it second (docid
    descending), sentence-transformers first (ascending); ranx keeps the file order of so short a list."""
    qrels = {"q": {"a": 1}}
    run = RunColumns.from_run({"q": {"b": 1.0, "a": 1.0}})
    spec = parse_metric_specs(["mrr@1"])[0]
    assert score_under(TREC_EVAL, qrels, run, spec).mean == 0.0
    assert score_under(Protocol(tie_order="docid-ascending"), qrels, run, spec).mean == 1.0
    assert score_under(Protocol(tie_order="ranx"), qrels, run, spec).mean == 0.0
    flipped = RunColumns.from_run({"q": {"a": 1.0, "b": 1.0}})
    assert score_under(Protocol(tie_order="ranx"), qrels, flipped, spec).mean == 1.0


def test_a_metric_a_tool_does_not_compute_is_one_line() -> None:
    from harness.core.errors import HarnessError

    spec = parse_metric_specs(["bpref"])[0]
    with pytest.raises(HarnessError, match=r"st-ir does not compute it; it computes .*ndcg@k"):
        tool_protocol("st-ir").check(spec)
    with pytest.raises(HarnessError, match="unknown tool 'trec-tools'; emulated tools: st-ir, mteb"):
        tool_protocol("trec-tools")
