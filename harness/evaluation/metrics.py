"""The one place retrieval metrics are computed, with trec_eval's semantics.

Each query is ranked once, in float64, in trec_eval 10's order (score descending, then docid
descending); pytrec_eval (trec_eval 9 compiled in) is handed scores that make its own float32
sort reproduce exactly that ranking, so every metric sees one ranking whatever else is asked
for. ``score_precision="float32"`` rounds scores to float32 first: trec_eval 9's, pytrec_eval's,
beir's and mteb's numbers.

pytrec_eval computes the measures it has at relevance levels >= 1. The others follow
trec_eval's definitions directly (:func:`_direct_value`): DCG (gain = grade, log2(rank + 1)
discount), every level-dependent measure at relevance levels <= 0 (which pytrec_eval refuses;
in trec_eval a retrieved unjudged document then has level -1 and an in-pool one with a negative
grade -2), and queries whose judgments are all negative. MRR@k is recip_rank kept only when the
first relevant document is within rank k, and BEIR's capped recall R_cap@k is recall@k's
relevant-retrieved count divided by min(k, R) instead of R. Relevant means
``rel >= relevance_level``; nDCG's gain is the relevance grade itself, as in trec_eval.

Runs are held as columns (:class:`~harness.evaluation.trec.RunColumns`) and handed to
pytrec_eval a chunk of queries at a time, so memory stays near the size of the columns.

Averaging follows trec_eval: by default over the queries that are both judged and in the
run; with ``complete=True`` (trec_eval ``-c``) judged queries the run missed count as an
empty ranking. Run queries without judgments are skipped and counted.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.core.errors import HarnessError
from harness.datasets.qrels import GRADE_LIMIT, Qrels, read_qrels
from harness.evaluation.judged import judged_and_reachable, judged_cutoffs, judged_summary
from harness.evaluation.ties import tie_diagnostics
from harness.evaluation.trec import Run, RunColumns, RunView, ranking_order, read_run_columns

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
_PRETTY = {
    "ndcg": "nDCG",
    "dcg": "DCG",
    "recall": "Recall",
    "map": "MAP",
    "mrr": "MRR",
    "p": "P",
    "precision": "P",
}


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
    "dcg": _Family("optional"),  # computed directly: pytrec_eval has no dcg
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
# Other tools' spellings of the same measures (matched case-insensitively) -> the harness's family. Each
# means what the harness computes: ir_measures' R@k, P@k, nDCG@k and AP@k are pytrec_eval's recall_k,
# P_k, ndcg_cut_k and map_cut_k; its RR@k is recip_rank kept only when the first relevant document is in
# the top k, which is mrr@k here; trec_eval's recip_rank is mrr, gm_map is gmap.
SPELLINGS = {
    **ALIASES,
    "r": "recall",  # ir_measures
    "ap": "map",
    "rr": "mrr",
    "ndcg_cut": "ndcg",  # trec_eval / pytrec_eval
    "map_cut": "map",
    "recip_rank": "mrr",
    "gm_map": "gmap",
}
# trec_eval's cut-off families: bare, they mean "at these cut-offs", never the whole ranking.
_CUT_ONLY = {"ndcg_cut", "map_cut"}
VALID_NAMES = (
    "ndcg, ndcg@k, recall@k, p@k (alias precision@k), map, map@k, mrr, mrr@k, rprec (alias r-precision), "
    "bpref, gmap, success@k, r_cap@k, dcg, dcg@k; a bare name with ks expands to name@k for each k"
)
OTHER_SPELLINGS = (
    "ir_measures' (nDCG@10, R@100, P@10, AP, AP@10, RR, RR@10, Rprec, Bpref, Success@10), trec_eval's "
    "(ndcg_cut.10, recall.100, P.10, map, map_cut.10, recip_rank, gm_map, success.10) and pytrec_eval's "
    "(ndcg_cut_10, recall_100, P_10, map_cut_10) spellings are read as the same metrics, as are mteb's "
    "(ndcg_at_10, recall_at_100); outputs use the names above"
)
# A family, then its cut-off as the harness (@10), trec_eval (.10), pytrec_eval (_10) or mteb (_at_10) write it.
_NAME_PATTERN = re.compile(r"^([a-z][a-z_-]*?)(?:@(\d+)|[._](\d+)|_at_(\d+))?$")
_SEPARATORS = re.compile(r"[,\s]+")


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

    def level_independent(self) -> bool:
        """Whether the relevance level leaves the value alone (trec_eval's nDCG and DCG use grades)."""
        return self.family in ("ndcg", "dcg")

    def from_trec(self, value: float, n_relevant: int) -> float:
        """This metric's value given its pytrec_eval measure's value for one query."""
        if self.family == "mrr" and self.k is not None:
            # recip_rank is 1/rank of the first relevant document; MRR@k keeps it if rank <= k.
            return value if value and round(1 / value) <= self.k else 0.0
        if self.family == "r_cap":
            # recall@k = found / R, so found = round(recall * R) exactly; BEIR divides by min(k, R).
            return round(value * n_relevant) / min(self.k, n_relevant) if n_relevant else 0.0
        return float(value)


def split_metric_names(names: str | Iterable[str]) -> list[str]:
    """Metric names as given, separated by commas or spaces (``--metrics ndcg@10,recall@100``).

    A bare number after a name with a cut-off is another cut-off of that name, as trec_eval reads
    ``-m ndcg_cut.10,100``: ``["ndcg_cut.10", "100"]`` -> ``["ndcg_cut.10", "ndcg_cut.100"]``.
    """
    pieces = [
        piece for name in ([names] if isinstance(names, str) else names) for piece in _SEPARATORS.split(name)
    ]
    split: list[str] = []
    for piece in filter(None, pieces):
        previous = re.match(r"^(.*?(?:@|_at_|[._]))\d+$", split[-1]) if split and piece.isdigit() else None
        split.append(previous.group(1) + piece if previous else piece)
    return split


def _nearest(spelled: str) -> str:
    """``; nearest: ...``: the harness names closest to an unknown one (its cut-off kept), or ""."""
    match = _NAME_PATTERN.match(spelled)
    family = match.group(1) if match else spelled.partition("@")[0]
    cutoff = next((group for group in match.groups()[1:] if group), None) if match else None
    close = difflib.get_close_matches(family, sorted({*FAMILIES, *SPELLINGS}), n=4, cutoff=0.6)
    families = dict.fromkeys(SPELLINGS.get(found, found) for found in close)
    names = [
        _canonical(found, int(cutoff) if cutoff else None)
        for found in families
        if not (cutoff and FAMILIES[found].cutoff == "never")
    ]
    return f"; nearest: {', '.join(names)}" if names else ""


def _parse_one(name: str) -> tuple[str, int | None, bool]:
    """(family, cut-off, whether the spelling needs a cut-off) of one metric name in any known spelling."""
    spelled = name.strip().lower()
    if "(" in spelled:
        raise HarnessError(
            f"metric {name!r}: measure parameters are not read; the relevance threshold is --relevance-level "
            "and nDCG's gain is the grade (trec_eval's)"
        )
    if spelled.startswith("judged"):
        raise HarnessError(
            f"metric {name!r}: Judged@k is not a ranking metric here; every evaluation reports it beside the "
            "metrics (the 'judged' block of metrics.json) at each metric cut-off and 10"
        )
    match = _NAME_PATTERN.match(spelled)
    family = SPELLINGS.get(match.group(1), match.group(1)) if match else None
    if family not in FAMILIES:
        raise HarnessError(f"unknown metric {name!r}; valid metrics: {VALID_NAMES}{_nearest(spelled)}")
    cutoff = next((group for group in match.groups()[1:] if group is not None), None)
    k = int(cutoff) if cutoff is not None else None
    if k is not None and k < 1:
        raise HarnessError(f"metric {name!r}: the cutoff k must be at least 1")
    if k is not None and FAMILIES[family].cutoff == "never":
        raise HarnessError(f"metric {name!r}: {family} takes no cutoff; write {family}")
    return family, k, match.group(1) in _CUT_ONLY


def canonical_metric_name(name: str) -> str:
    """The harness's name of one metric written in any known spelling (``ndcg_cut.10`` -> ``ndcg@10``);
    a bare family stays bare (``AP`` -> ``map``, ``R`` -> ``recall``)."""
    family, k, _ = _parse_one(name)
    return _canonical(family, k)


def _canonical(family: str, k: int | None) -> str:
    return family if k is None else f"{family}@{k}"


def parse_metric_specs(names: Sequence[str], ks: Sequence[int] | None = None) -> list[MetricSpec]:
    """Parse metric names (case-insensitive) into specs, expanding bare names over ``ks``."""
    cutoffs = list(dict.fromkeys(int(k) for k in ks)) if ks else []
    if any(k < 1 for k in cutoffs):
        raise HarnessError(f"cutoffs must be at least 1, got {list(ks)}")
    specs: dict[str, MetricSpec] = {}
    for name in split_metric_names(names):
        family, k, cut_only = _parse_one(name)
        rule = "required" if cut_only else FAMILIES[family].cutoff
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
            if not -GRADE_LIMIT <= int(rel) < GRADE_LIMIT:
                raise HarnessError(
                    f"qrels: relevance of query {qid!r}, document {docid!r} is {rel}, beyond a 64-bit "
                    "integer (C long), the most trec_eval and pytrec_eval hold"
                )
            row[str(docid)] = int(rel)
        if row:  # a query without judgments is not judged (pytrec_eval would drop it silently)
            checked[str(qid)] = row
    return checked


def as_run(run: Run | RunColumns | str | os.PathLike) -> RunColumns:
    """A run as columns: read from a path, converted from dicts, or the columns unchanged."""
    if isinstance(run, RunColumns):
        return run
    if isinstance(run, (str, os.PathLike)):
        return read_run_columns(run)
    return RunColumns.from_run(run)


SCORE_PRECISIONS = ("float64", "float32")
DEFAULT_SCORE_PRECISION = "float64"
_RANKING = {
    "float64": "scores as read (float64), as trec_eval 10",
    "float32": "scores rounded to float32 first, as trec_eval 9 / pytrec_eval / beir / mteb",
}
_CHUNK_QUERIES = 256  # queries handed to pytrec_eval at once: bounds the dicts alive at any time
_FLOAT32_EXACT_INTS = 1 << 24  # rank-encoded scores must stay distinct in float32
NONPOOL, UNJUDGED = -1, -2  # trec_eval's levels of a retrieved doc not in the qrels / judged negative
# trec_eval allocates a counter per grade up to a query's highest (pytrec_eval: 16 GB at 2^31, a crash at
# 2^40, wrong values between): queries graded higher are computed directly, from the same definitions.
PYTREC_MAX_GRADE = 1 << 16


def check_score_precision(score_precision: str) -> str:
    if score_precision not in SCORE_PRECISIONS:
        raise HarnessError(
            f"unknown score precision {score_precision!r}; choose one of {', '.join(SCORE_PRECISIONS)}"
        )
    return score_precision


def _float32_merged_queries(sizes: np.ndarray, scores: np.ndarray) -> set[int]:
    """Positions (among the queries whose rows are ``sizes`` long) of those where rounding to float32,
    pytrec_eval's sort key, would merge two different scores: their ranking has to be handed over
    encoded. One vectorised pass for many queries."""
    with np.errstate(over="ignore"):
        narrowed = scores.astype(np.float32)
    if np.array_equal(narrowed, scores):
        return set()  # float32 holds every score exactly (as scores of float32 vectors do)
    ordered = np.sort(scores)
    with np.errstate(over="ignore"):
        narrow_ordered = ordered.astype(np.float32)
    if not np.any((ordered[1:] != ordered[:-1]) & (narrow_ordered[1:] == narrow_ordered[:-1])):
        return set()  # no two different scores anywhere in these queries share a float32
    query = np.repeat(np.arange(len(sizes)), sizes)
    order = np.lexsort((scores, query))
    query, wide, narrow = query[order], scores[order], narrowed[order]
    merged = (query[1:] == query[:-1]) & (wide[1:] != wide[:-1]) & (narrow[1:] == narrow[:-1])
    return set(query[1:][merged].tolist())


@dataclass
class _Handover:
    """One query as handed to pytrec_eval, plus its ranking when the direct measures need it."""

    scores: dict[str, float]
    ranked: list[str] | None


def _hand_over(
    docids: list[str],
    scores: np.ndarray,
    score_list: list[float],
    depth: int | None,
    need_ranking: bool,
    keeps_order: bool,
) -> _Handover:
    """The documents (top ``depth`` and ties, or all) with scores whose float32 order is the float64 one
    (``score_list`` is ``scores.tolist()``, made once for many queries)."""
    if depth is not None and depth < len(docids):
        threshold = np.partition(scores, len(scores) - depth)[len(scores) - depth]
        keep = np.flatnonzero(scores >= threshold).tolist()
        docids, scores, score_list = [docids[i] for i in keep], scores[keep], [score_list[i] for i in keep]
    order = ranking_order(docids, scores) if need_ranking or not keeps_order else None
    ranked = [docids[i] for i in order.tolist()] if order is not None else None
    if keeps_order:
        return _Handover(dict(zip(docids, score_list, strict=True)), ranked)
    if len(ranked) > _FLOAT32_EXACT_INTS:
        raise HarnessError(
            f"a query with {len(ranked)} documents and float32-equal scores is too long to rank"
        )
    # float32 would merge some scores: hand over n - rank, which float32 holds exactly.
    return _Handover({docid: float(len(ranked) - rank) for rank, docid in enumerate(ranked)}, ranked)


def _trec_measures(specs: Iterable[MetricSpec]) -> set[str]:
    cutoffs: dict[str, set[int]] = {}
    for spec in specs:
        family, k = spec.trec_measure
        cutoffs.setdefault(family, set())
        if k is not None:
            cutoffs[family].add(k)
    return {
        family if not ks else f"{family}." + ",".join(str(k) for k in sorted(ks))
        for family, ks in cutoffs.items()
    }


def _levels(ranked: list[str], judged: dict[str, int]) -> list[int]:
    """trec_eval's level of each ranked document: its grade, NONPOOL if unjudged, UNJUDGED if negative."""
    levels = []
    for docid in ranked:
        grade = judged.get(docid)
        levels.append(NONPOOL if grade is None else grade if grade >= 0 else UNJUDGED)
    return levels


def _dcg(gains: Iterable[int]) -> float:
    total = 0.0
    for rank, gain in enumerate(gains, start=1):
        if gain > 0:
            total += gain / math.log2(rank + 1)
    return total


def _average_precision(relevant: list[bool], num_rel: int) -> float:
    found, total = 0, 0.0
    for rank, is_relevant in enumerate(relevant, start=1):
        if is_relevant:
            found += 1
            total += found / rank
    if not found:
        return 0.0
    return total / num_rel if num_rel else math.inf  # C's x / 0.0


def _bpref(levels: list[int], judged: dict[str, int], level: int, num_rel: int) -> float:
    num_nonrel = sum(1 for grade in judged.values() if 0 <= grade < level)
    nonrel_so_far, total = 0, 0.0
    for value in levels:
        if value < 0:
            continue  # not in the pool, or in it but unjudged
        if value < level:
            nonrel_so_far += 1
        elif nonrel_so_far:
            total += 1.0 - min(nonrel_so_far, num_rel) / min(num_nonrel, num_rel)
        else:
            total += 1.0
    return total / num_rel if num_rel else total


def _direct_value(spec: MetricSpec, levels: list[int], judged: dict[str, int], level: int) -> float:
    """One metric of one query, straight from trec_eval's definitions (see the module docstring)."""
    k = spec.k if spec.k is not None else len(levels)
    if spec.family in ("ndcg", "dcg"):
        dcg = _dcg(levels[:k])
        if spec.family == "dcg":
            return dcg
        ideal = _dcg(sorted((grade for grade in judged.values() if grade > 0), reverse=True)[:k])
        return dcg / ideal if ideal > 0 else 0.0
    relevant = [value >= level for value in levels]
    num_rel = sum(1 for grade in judged.values() if grade >= 0 and grade >= level)
    family = spec.family
    if family == "p":
        return sum(relevant[:k]) / k
    if family in ("recall", "r_cap"):
        if not num_rel:
            return 0.0
        return sum(relevant[:k]) / (num_rel if family == "recall" else min(k, num_rel))
    if family == "success":
        return 1.0 if any(relevant[:k]) else 0.0
    if family == "mrr":
        first = relevant.index(True) + 1 if True in relevant else None
        return 1.0 / first if first is not None and first <= k else 0.0
    if family == "map":
        if spec.k is not None and not num_rel:
            return 0.0
        return _average_precision(relevant[:k], num_rel)
    if family == "gmap":
        return math.log(max(_average_precision(relevant, num_rel), MIN_GEO_MEAN))
    if family == "rprec":
        depth = min(len(levels), num_rel)
        return sum(relevant[:depth]) / num_rel if depth else 0.0
    if family == "bpref":
        return _bpref(levels, judged, level, num_rel)
    raise HarnessError(f"no direct definition of {spec.name}")


class _Engine:
    """Per-query metric values for chunks of handed-over queries."""

    def __init__(self, qrels: Qrels, specs: list[MetricSpec], relevance_level: int):
        import pytrec_eval

        self.qrels, self.specs, self.level = qrels, specs, relevance_level
        self.trec_specs = [
            spec
            for spec in specs
            if spec.family != "dcg" and (relevance_level >= 1 or spec.level_independent())
        ]
        self.direct_specs = [spec for spec in specs if spec not in self.trec_specs]
        self.trec_names = {spec.name for spec in self.trec_specs}
        # trec_eval reads out of bounds for a query whose grades are all negative, and allocates a counter
        # per grade up to the highest: those queries go direct.
        self.direct_queries = {
            qid for qid, judged in qrels.items() if not 0 <= max(judged.values()) <= PYTREC_MAX_GRADE
        }
        self.evaluator = None
        if self.trec_specs:
            self.evaluator = pytrec_eval.RelevanceEvaluator(
                {qid: judged for qid, judged in qrels.items() if qid not in self.direct_queries},
                _trec_measures(self.trec_specs),
                relevance_level=max(relevance_level, 1),  # nDCG ignores it; pytrec_eval refuses < 1
            )
        self.needs_r = any(spec.family == "r_cap" for spec in self.trec_specs)

    def needs_ranking(self, qid: str) -> bool:
        return bool(self.direct_specs) or qid in self.direct_queries

    def values(self, handed: dict[str, _Handover]) -> dict[str, dict[str, float]]:
        via_trec = {qid: query.scores for qid, query in handed.items() if qid not in self.direct_queries}
        trec_values = self.evaluator.evaluate(via_trec) if self.evaluator and via_trec else {}
        per_query = {}
        for qid, query in handed.items():
            judged = self.qrels[qid]
            levels = _levels(query.ranked, judged) if query.ranked is not None else []
            n_relevant = sum(1 for rel in judged.values() if rel >= self.level) if self.needs_r else 0
            values = {}
            for spec in self.specs:
                if qid in trec_values and spec.name in self.trec_names:
                    values[spec.name] = spec.from_trec(trec_values[qid][spec.trec_key], n_relevant)
                else:
                    values[spec.name] = _direct_value(spec, levels, judged, self.level)
            per_query[qid] = values
        return per_query


@dataclass(frozen=True)
class EvaluationSettings:
    """What the evaluation stage needs: which metrics, the relevance threshold, the averaging and
    the score precision of the ranking."""

    metrics: Sequence[str] = PIPELINE_METRICS
    ks: Sequence[int] | None = None  # cut-offs for bare family names in ``metrics``
    relevance_level: int = 1
    complete: bool = False  # average over every judged query (trec_eval -c), not only answered ones
    score_precision: str = DEFAULT_SCORE_PRECISION  # "float32": trec_eval 9 / pytrec_eval's ranking

    def metric_names(self) -> list[str]:
        """The canonical metric names, checked (an unknown metric is one error line)."""
        check_score_precision(self.score_precision)
        return parse_metrics(self.metrics, self.ks)

    def describe(self) -> dict[str, object]:
        return {
            "metrics": list(self.metrics),
            "ks": list(self.ks) if self.ks is not None else None,
            "relevance_level": self.relevance_level,
            "complete": self.complete,
            "score_precision": self.score_precision,
            # Judged@k's definition changed (trec_eval order -> ir_measures'): results from before re-score.
            "judged": "ir_measures",
        }

    def evaluate(self, qrels: Qrels, run: Run | RunColumns) -> Evaluation:
        return evaluate(
            qrels,
            run,
            self.metric_names(),
            relevance_level=self.relevance_level,
            complete=self.complete,
            score_precision=self.score_precision,
        )


def _evaluate_chunk(
    columns: RunColumns, chunk: list[int], engine: _Engine, depth: int | None, score_precision: str
) -> dict[str, dict[str, float]]:
    """Metric values of the queries at positions ``chunk`` (ascending) of ``columns``."""
    first, last = int(columns.offsets[chunk[0]]), int(columns.offsets[chunk[-1] + 1])
    docids, scores = columns.rows(first, last)
    if score_precision == "float32":
        with np.errstate(over="ignore"):
            scores = scores.astype(np.float32).astype(np.float64)
    starts = [int(columns.offsets[index]) - first for index in chunk]
    ends = [int(columns.offsets[index + 1]) - first for index in chunk]
    sizes = np.array(ends) - np.array(starts)
    picked = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends, strict=True)])
    merged = _float32_merged_queries(sizes, scores[picked])
    score_list = scores.tolist()
    handed = {}
    for position, (index, a, b) in enumerate(zip(chunk, starts, ends, strict=True)):
        qid, ids = columns.qids[index], docids[a:b]
        needs = engine.needs_ranking(qid)
        query = _hand_over(ids, scores[a:b], score_list[a:b], depth, needs, position not in merged)
        whole = depth is None or depth >= len(ids)  # then the handed dict saw every document
        if (len(query.scores) if whole else len(set(ids))) != len(ids):
            columns.raise_duplicate()  # trec_eval rejects a (qid, docid) pair listed twice
        handed[qid] = query
    return engine.values(handed)


def evaluate(
    qrels: Qrels | str | os.PathLike,
    run: Run | RunColumns | str | os.PathLike,
    metrics: Sequence[str],
    *,
    ks: Sequence[int] | None = None,
    relevance_level: int = 1,
    complete: bool = False,
    score_precision: str = DEFAULT_SCORE_PRECISION,
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
    check_score_precision(score_precision)
    qrels, columns = as_qrels(qrels), as_run(run)

    sizes = np.diff(columns.offsets)
    index_of = {qid: index for index, qid in enumerate(columns.qids) if sizes[index]}
    judged_answered = sorted(qid for qid in index_of if qid in qrels)
    missing = sorted(qid for qid in qrels if qid not in index_of)
    unjudged = sorted(qid for qid in index_of if qid not in qrels)
    if not judged_answered:
        raise HarnessError(
            f"no run query has judgments ({len(index_of)} run queries, {len(qrels)} qrels queries, none shared); "
            "check that run and qrels come from the same dataset and split"
        )

    # {qid: {docid: score}} one query at a time (memory stays bounded), at the scores' evaluated precision
    run_view = RunView(columns, float32=score_precision == "float32")
    _warn_if_no_document_is_judged(qrels, run_view, judged_answered)

    # Every metric with a cutoff depends only on the top k: when all have one, only the top max(k)
    # of each ranking (and the ties at its end) is handed over, which is far less work.
    depth = max(spec.k for spec in specs) if all(spec.k is not None for spec in specs) else None
    engine = _Engine(qrels, specs, relevance_level)
    per_query: dict[str, dict[str, float]] = {}
    positions = sorted(index_of[qid] for qid in judged_answered)  # file order: each chunk is one slice
    for start in range(0, len(positions), _CHUNK_QUERIES):
        chunk = positions[start : start + _CHUNK_QUERIES]
        per_query.update(_evaluate_chunk(columns, chunk, engine, depth, score_precision))
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
        "score_precision": score_precision,
        "ranking": _RANKING[score_precision],
        "tie_break": "score descending, then docid descending (trec_eval)",
        "gmap_per_query": "log(max(AP, 1e-5)); the aggregate is exp(mean)",
        "engine": _engine_version(),
    }
    if columns.extra_column_lines:
        settings["run_lines_with_extra_columns_ignored"] = columns.extra_column_lines
    evaluation = Evaluation(
        aggregate=aggregate,
        per_query=per_query,
        n_queries=len(per_query),
        qrels_queries_without_results=missing,
        run_queries_without_qrels=unjudged,
        settings=settings,
    )
    if diagnose:
        as_read = RunView(columns) if score_precision == "float32" else run_view  # judged@k: ir_measures'
        _add_diagnostics(evaluation, qrels, run_view, as_read, specs, relevance_level, score_precision)
    return evaluation


def _add_diagnostics(
    evaluation: Evaluation,
    qrels: Qrels,
    run: Mapping[str, dict[str, float]],
    run_as_read: Mapping[str, dict[str, float]],
    specs: list[MetricSpec],
    relevance_level: int,
    score_precision: str,
) -> None:
    """The hook for harness.evaluation.judged and .ties: judged@k and tie bounds over the same queries.

    ``run`` holds the scores the metrics ranked (float32 when asked); ``run_as_read`` the scores as read,
    which judged@k ranks as ir_measures does."""
    names = [spec.name for spec in specs]
    cutoffs = judged_cutoffs(spec.k for spec in specs)
    judged, reachable = judged_and_reachable(qrels, run_as_read, evaluation.per_query, cutoffs)
    evaluation.judged = judged_summary(judged, cutoffs, reachable)
    evaluation.ties = tie_diagnostics(
        qrels,
        run,
        evaluation.per_query,
        names,
        sorted({spec.k for spec in specs if spec.k is not None}),
        evaluate_run=lambda reordered: (
            evaluate(
                qrels,
                reordered,
                names,
                relevance_level=relevance_level,
                score_precision=score_precision,
                diagnose=False,
            ).per_query
        ),
        mean=aggregate_values,
    )


def _warn_if_no_document_is_judged(
    qrels: Qrels, run: Mapping[str, dict[str, float]], query_ids: list[str]
) -> None:
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
