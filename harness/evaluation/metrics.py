"""The one place retrieval metrics are computed, with trec_eval's semantics.

pytrec_eval (trec_eval compiled in) computes every measure. The two it lacks are exact
functions of ones it has, so they share its ranking and tie rule: MRR@k is recip_rank kept
only when the first relevant document is within rank k, and BEIR's capped recall R_cap@k is
recall@k's relevant-retrieved count divided by min(k, R) instead of R. Relevant means
``rel >= relevance_level``; nDCG's gain is the relevance grade itself, as in trec_eval.

Averaging follows trec_eval: by default over the queries that are both judged and in the
run; with ``complete=True`` (trec_eval ``-c``) judged queries the run missed count as an
empty ranking. Run queries without judgments are skipped and counted.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.core.errors import HarnessError
from harness.datasets.qrels import Qrels, read_qrels
from harness.evaluation.judged import judged_at_k, judged_cutoffs, judged_summary
from harness.evaluation.ties import tie_diagnostics
from harness.evaluation.trec import Run, read_run, top_k_ranking

log = logging.getLogger(__name__)

# trec_eval clamps AP at this floor before taking the log for gm_map.
MIN_GEO_MEAN = 0.00001

# The two numbers every console table and report leads with (BEIR's headline metrics).
HEADLINE_METRICS = ("ndcg@10", "recall@100")
# What ``harness eval`` reports by default: beir's families at its cut-offs, plus whole-ranking MAP and MRR.
PIPELINE_KS = (1, 3, 5, 10, 100, 1000)
PIPELINE_METRICS = (
    *(f"{family}@{k}" for family in ("ndcg", "recall", "p", "map", "mrr") for k in PIPELINE_KS),
    "map",
    "mrr",
)
# What ``harness evaluate`` reports by default: bare families, expanded at ``--ks`` (or each family's cut-offs).
EVALUATE_FAMILIES = ("ndcg", "map", "recall", "p", "mrr")
_PRETTY = {"ndcg": "nDCG", "recall": "Recall", "map": "MAP", "mrr": "MRR", "p": "P", "precision": "P"}


def pretty_metric(name: str) -> str:
    """``ndcg@10`` -> ``nDCG@10`` (the spelling papers use)."""
    family, _, cutoff = name.partition("@")
    label = _PRETTY.get(family.lower(), family)
    return f"{label}@{cutoff}" if cutoff else label


@dataclass(frozen=True)
class _Family:
    cutoff: str  # "required", "optional" or "never"
    trec_full: str | None = None  # pytrec_eval measure over the whole ranking
    trec_cut: str | None = None  # pytrec_eval measure family taking cutoffs


FAMILIES: dict[str, _Family] = {
    "ndcg": _Family("optional", trec_full="ndcg", trec_cut="ndcg_cut"),
    "recall": _Family("required", trec_cut="recall"),
    "p": _Family("required", trec_cut="P"),
    "map": _Family("optional", trec_full="map", trec_cut="map_cut"),
    "mrr": _Family("optional", trec_full="recip_rank"),  # mrr@k: derived from recip_rank
    "rprec": _Family("never", trec_full="Rprec"),
    "bpref": _Family("never", trec_full="bpref"),
    "gmap": _Family("never", trec_full="gm_map"),
    "success": _Family("required", trec_cut="success"),
    "r_cap": _Family("required"),  # derived from recall@k
}
ALIASES = {"precision": "p", "r-precision": "rprec", "r_precision": "rprec"}
VALID_NAMES = (
    "ndcg, ndcg@k, recall@k, p@k (alias precision@k), map, map@k, mrr, mrr@k, rprec (alias r-precision), "
    "bpref, gmap, success@k, r_cap@k; a bare name with ks expands to name@k for each k"
)
_NAME_PATTERN = re.compile(r"^([a-z_-]+)(?:@(\d+))?$")


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric: canonical name, family and cutoff (None = whole ranking)."""

    name: str
    family: str
    k: int | None

    @property
    def trec_measure(self) -> tuple[str, int | None]:
        """The pytrec_eval measure (name, cutoff) this metric is read or derived from."""
        if self.family == "mrr":
            return "recip_rank", None
        if self.family == "r_cap":
            return "recall", self.k
        family = FAMILIES[self.family]
        return (family.trec_full, None) if self.k is None else (family.trec_cut, self.k)

    @property
    def trec_key(self) -> str:
        """The key of that measure in pytrec_eval's per-query output."""
        measure, k = self.trec_measure
        return measure if k is None else f"{measure}_{k}"

    def from_trec(self, value: float, n_relevant: int) -> float:
        """This metric's value given its pytrec_eval measure's value for one query."""
        if self.family == "mrr" and self.k is not None:
            # recip_rank is 1/rank of the first relevant document; MRR@k keeps it if rank <= k.
            return value if value and round(1 / value) <= self.k else 0.0
        if self.family == "r_cap":
            # recall@k = found / R, so found = round(recall * R) exactly; BEIR divides by min(k, R).
            return round(value * n_relevant) / min(self.k, n_relevant) if n_relevant else 0.0
        return float(value)


def _parse_one(name: str) -> tuple[str, int | None]:
    match = _NAME_PATTERN.match(name.strip().lower())
    family = ALIASES.get(match.group(1), match.group(1)) if match else None
    if family not in FAMILIES:
        raise HarnessError(f"unknown metric {name!r}; valid metrics: {VALID_NAMES}")
    k = int(match.group(2)) if match.group(2) is not None else None
    if k is not None and k < 1:
        raise HarnessError(f"metric {name!r}: the cutoff k must be at least 1")
    if k is not None and FAMILIES[family].cutoff == "never":
        raise HarnessError(f"metric {name!r}: {family} takes no cutoff; write {family}")
    return family, k


def _canonical(family: str, k: int | None) -> str:
    return family if k is None else f"{family}@{k}"


def parse_metric_specs(names: Sequence[str], ks: Sequence[int] | None = None) -> list[MetricSpec]:
    """Parse metric names (case-insensitive) into specs, expanding bare names over ``ks``."""
    if isinstance(names, str):
        names = [names]
    cutoffs = list(dict.fromkeys(int(k) for k in ks)) if ks else []
    if any(k < 1 for k in cutoffs):
        raise HarnessError(f"cutoffs must be at least 1, got {list(ks)}")
    specs: dict[str, MetricSpec] = {}
    for name in names:
        family, k = _parse_one(name)
        rule = FAMILIES[family].cutoff
        if k is not None or rule == "never" or (rule == "optional" and not cutoffs):
            expanded = [k]
        elif cutoffs:
            expanded = cutoffs
        else:
            raise HarnessError(f"metric {name!r} needs a cutoff: write {family}@k or give ks (--ks)")
        for cutoff in expanded:
            spec = MetricSpec(_canonical(family, cutoff), family, cutoff)
            specs.setdefault(spec.name, spec)
    if not specs:
        raise HarnessError(f"no metrics given; valid metrics: {VALID_NAMES}")
    return list(specs.values())


def parse_metrics(names: Sequence[str], ks: Sequence[int] | None = None) -> list[str]:
    """Canonical lower-case names, e.g. ``["NDCG", "map"]`` + ks ``[1, 10]`` ->
    ``["ndcg@1", "ndcg@10", "map@1", "map@10"]``; unknown names raise HarnessError."""
    return [spec.name for spec in parse_metric_specs(names, ks)]


def empty_ranking_value(metric: str) -> float:
    """A metric's value for a query with no results (trec_eval ``-c``): 0, and for gmap
    the log of AP's floor, which is what trec_eval patches in."""
    return math.log(MIN_GEO_MEAN) if metric == "gmap" else 0.0


def aggregate_values(metric: str, values: Sequence[float]) -> float:
    """Mean over queries; gmap's per-query values are logs, so its mean is exp(mean)."""
    mean = math.fsum(values) / len(values)
    return math.exp(mean) if metric == "gmap" else mean


@dataclass
class Evaluation:
    """Aggregate and per-query metric values plus the bookkeeping that makes them comparable."""

    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]]  # qid -> metric -> value, for the averaged queries
    n_queries: int  # how many queries were averaged
    qrels_queries_without_results: list[str]
    run_queries_without_qrels: list[str]
    settings: dict = field(default_factory=dict)
    judged: dict = field(
        default_factory=dict
    )  # harness.evaluation.judged: judged@k means, per query, warning
    ties: dict = field(default_factory=dict)  # harness.evaluation.ties: straddling queries, metric bounds

    def to_json(self, per_query: bool = True) -> dict:
        payload = {
            "metrics": dict(self.aggregate),
            "n_queries": self.n_queries,
            "qrels_queries_without_results": {
                "count": len(self.qrels_queries_without_results),
                "averaged_as_zero": bool(self.settings.get("complete")),
                "qids": list(self.qrels_queries_without_results),
            },
            "run_queries_without_qrels": {
                "count": len(self.run_queries_without_qrels),
                "skipped": True,
                "qids": list(self.run_queries_without_qrels),
            },
            "settings": dict(self.settings),
        }
        if self.judged:
            payload["judged"] = dict(self.judged) if per_query else {**self.judged, "per_query": None}
        if self.ties:
            payload["ties"] = dict(self.ties)
        if per_query:
            payload["per_query"] = {qid: dict(values) for qid, values in self.per_query.items()}
        return payload


def as_qrels(qrels: Qrels | str | os.PathLike) -> Qrels:
    """Qrels from a path, or in-memory qrels checked to hold integer grades (pytrec_eval needs ints)."""
    if isinstance(qrels, (str, os.PathLike)):
        return read_qrels(qrels).qrels
    checked: Qrels = {}
    for qid, judged in qrels.items():
        row = {}
        for docid, rel in judged.items():
            if isinstance(rel, (bool, float)) or not isinstance(rel, (int, np.integer)):
                raise HarnessError(
                    f"qrels: relevance of query {qid!r}, document {docid!r} is {rel!r}, not an int"
                )
            row[str(docid)] = int(rel)
        if row:  # a query without judgments is not judged (pytrec_eval would drop it silently)
            checked[str(qid)] = row
    return checked


def as_run(run: Run | str | os.PathLike) -> Run:
    """A run from a path, or the in-memory run unchanged."""
    return read_run(run) if isinstance(run, (str, os.PathLike)) else run


def _pytrec_eval(qrels: Qrels, run: Run, specs: list[MetricSpec], relevance_level: int) -> dict:
    import pytrec_eval

    cutoffs: dict[str, set[int]] = {}
    for spec in specs:
        family, k = spec.trec_measure
        cutoffs.setdefault(family, set())
        if k is not None:
            cutoffs[family].add(k)
    measures = {
        family if not ks else f"{family}." + ",".join(str(k) for k in sorted(ks))
        for family, ks in cutoffs.items()
    }
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=relevance_level)
    try:
        return evaluator.evaluate(run)
    except TypeError:
        # pytrec_eval accepts only Python int/float scores (not e.g. numpy.float32): convert once.
        try:
            converted = {
                qid: {docid: float(score) for docid, score in docs.items()} for qid, docs in run.items()
            }
        except (TypeError, ValueError) as error:
            raise HarnessError(f"run scores must be numbers: {error}") from None
        return evaluator.evaluate(converted)


@dataclass(frozen=True)
class EvaluationSettings:
    """What the evaluation stage needs: which metrics, the relevance threshold, and the averaging."""

    metrics: Sequence[str] = PIPELINE_METRICS
    ks: Sequence[int] | None = None  # cut-offs for bare family names in ``metrics``
    relevance_level: int = 1
    complete: bool = False  # average over every judged query (trec_eval -c), not only answered ones

    def metric_names(self) -> list[str]:
        """The canonical metric names, checked (an unknown metric is one error line)."""
        return parse_metrics(self.metrics, self.ks)

    def describe(self) -> dict[str, object]:
        return {
            "metrics": list(self.metrics),
            "ks": list(self.ks) if self.ks is not None else None,
            "relevance_level": self.relevance_level,
            "complete": self.complete,
        }

    def evaluate(self, qrels: Qrels, run: Run) -> Evaluation:
        return evaluate(
            qrels, run, self.metric_names(), relevance_level=self.relevance_level, complete=self.complete
        )


def evaluate(
    qrels: Qrels | str | os.PathLike,
    run: Run | str | os.PathLike,
    metrics: Sequence[str],
    *,
    ks: Sequence[int] | None = None,
    relevance_level: int = 1,
    complete: bool = False,
    diagnose: bool = True,
) -> Evaluation:
    """Evaluate ``run`` against ``qrels`` (in memory, or paths to TREC/BEIR files).

    A query whose ranking is empty counts as having no results. Raises HarnessError for an
    unknown metric or when no run query is judged (almost always mismatched files). With
    ``diagnose`` the evaluation also carries judged@k and the tie diagnostics.
    """
    specs = parse_metric_specs(metrics, ks)
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, int):
        raise HarnessError(f"relevance_level must be an integer, got {relevance_level!r}")
    qrels, run = as_qrels(qrels), as_run(run)

    answered = {qid for qid, docs in run.items() if docs}
    judged_answered = sorted(qid for qid in answered if qid in qrels)
    missing = sorted(qid for qid in qrels if qid not in answered)
    unjudged = sorted(qid for qid in answered if qid not in qrels)
    if not judged_answered:
        raise HarnessError(
            f"no run query has judgments ({len(answered)} run queries, {len(qrels)} qrels queries, none shared); "
            "check that run and qrels come from the same dataset and split"
        )

    _warn_if_no_document_is_judged(qrels, run, judged_answered)

    # Every metric with a cutoff depends only on the top k: when all have one, pytrec_eval is
    # handed just the top max(k) of each ranking (cut by the same tie rule), which is far less work.
    if all(spec.k is not None for spec in specs):
        depth = max(spec.k for spec in specs)
        scored = {qid: dict(top_k_ranking(run[qid], depth)) for qid in judged_answered}
    else:
        scored = {qid: run[qid] for qid in judged_answered}
    trec_values = _pytrec_eval(qrels, scored, specs, relevance_level)

    needs_r = any(spec.family == "r_cap" for spec in specs)
    per_query: dict[str, dict[str, float]] = {}
    for qid in judged_answered:
        measured = trec_values[qid]
        n_relevant = sum(1 for rel in qrels[qid].values() if rel >= relevance_level) if needs_r else 0
        per_query[qid] = {spec.name: spec.from_trec(measured[spec.trec_key], n_relevant) for spec in specs}
    if complete:
        for qid in missing:
            per_query[qid] = {spec.name: empty_ranking_value(spec.name) for spec in specs}
        per_query = dict(sorted(per_query.items()))

    aggregate = {
        spec.name: aggregate_values(spec.name, [values[spec.name] for values in per_query.values()])
        for spec in specs
    }
    settings = {
        "relevance_level": relevance_level,
        "complete": complete,
        "averaged_over": "all judged queries (missing ones as empty rankings)"
        if complete
        else "judged queries present in the run",
        "tie_break": "score descending, then docid descending (trec_eval)",
        "gmap_per_query": "log(max(AP, 1e-5)); the aggregate is exp(mean)",
        "engine": _engine_version(),
    }
    evaluation = Evaluation(
        aggregate=aggregate,
        per_query=per_query,
        n_queries=len(per_query),
        qrels_queries_without_results=missing,
        run_queries_without_qrels=unjudged,
        settings=settings,
    )
    if diagnose:
        _add_diagnostics(evaluation, qrels, run, specs, relevance_level)
    return evaluation


def _add_diagnostics(
    evaluation: Evaluation, qrels: Qrels, run: Run, specs: list[MetricSpec], relevance_level: int
) -> None:
    """The hook for harness.evaluation.judged and .ties: judged@k and tie bounds over the same queries."""
    names = [spec.name for spec in specs]
    cutoffs = judged_cutoffs(spec.k for spec in specs)
    evaluation.judged = judged_summary(judged_at_k(qrels, run, evaluation.per_query, cutoffs), cutoffs)
    evaluation.ties = tie_diagnostics(
        qrels,
        run,
        evaluation.per_query,
        names,
        sorted({spec.k for spec in specs if spec.k is not None}),
        evaluate_run=lambda reordered: (
            evaluate(qrels, reordered, names, relevance_level=relevance_level, diagnose=False).per_query
        ),
        mean=aggregate_values,
    )


def _warn_if_no_document_is_judged(qrels: Qrels, run: Run, query_ids: list[str]) -> None:
    """Queries match but documents never do: every score is 0, almost surely mismatched document ids."""
    judged_docs = {doc_id for qid in query_ids for doc_id in qrels[qid]}
    if any(doc_id in judged_docs for qid in query_ids for doc_id in run[qid]):
        return
    example = next(iter(run[query_ids[0]]))
    log.warning(
        "none of the run's documents is judged in the qrels (e.g. run document %r); every score is 0: "
        "check that the run and the qrels use the same document ids",
        example,
    )


def _engine_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"pytrec_eval-terrier {version('pytrec-eval-terrier')}"
    except PackageNotFoundError:
        return "pytrec_eval"
