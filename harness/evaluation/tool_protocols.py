"""How other tools score a run: each tool a declarative protocol over the one metric engine.

A :class:`Protocol` holds the settings in which a tool's scoring of a ranking can differ from trec_eval's;
its defaults are trec_eval's (the harness's ``evaluate``). Each tool of :data:`TOOLS` is such a protocol,
read from its source:

* ``st-ir``: sentence-transformers' ``InformationRetrievalEvaluator`` (``compute_metrics``). Relevance is
  binary and every judged row is relevant, grade 0 included: its ``relevant_docs`` is ``{qid: set(doc
  ids)}`` built from every qrels row, as its documentation's example and BEIR's loader give it. Scores are
  torch float32; hits sort by ``(-score, corpus_id)`` (ties docid ascending); MAP@k divides by
  ``min(k, R)``; every query with judgments is averaged (it searches each one: a query the run lacks
  counts 0); self-hits are kept.
* ``mteb``: mteb v2's ``RetrievalEvaluator.evaluate`` and ``calculate_retrieval_scores``. A task's
  ``ignore_identical_ids`` drops hits whose id is the query's (:func:`mteb_drops_identical_ids`, from ``records/mteb_tasks.yaml``);
  pytrec_eval computes nDCG, MAP, recall, P and hit rate on float32 scores, their means (summed in the
  order pytrec_eval returns the queries: the run's) rounded to 5 decimals; MRR is mteb's own sort of the
  float64 scores (docid descending on ties), not rounded.
* ``pyserini``: the 2CR BEIR matrix (``pyserini/2cr/beir.yaml``): every condition searches with
  ``--remove-query`` (self-hits removed), writes scores with ``{score:.6f}`` (``TrecWriter``) and evaluates
  with ``trec_eval -c`` (trec_eval 9 via jtreceval: float32 scores, every judged query averaged).
* ``ranx``: ``evaluate(Qrels(qrels), Run(run), metric)``: float64 scores ordered by numba's unstable
  quicksort (:func:`harness.evaluation.tool_orders.ranx_order`; a second pass when the run's queries differ
  from the judged ones, which needs ``make_comparable=True``, whose empty results average every judged
  query). Its ``ndcg`` is Järvelin's, gain = grade, as trec_eval's (``ndcg_burges`` is 2^grade - 1: another
  metric).
* ``bright``: BRIGHT's ``run.py``/``retrievers.py``: each query's ``excluded_ids`` are popped, the top 1000
  kept by a stable sort of the scores (ties in file order), relevance binary (gold ids score 1), pytrec_eval
  on float32 scores, every mean (summed in the run's query order) rounded to 5 decimals.

:func:`score_under` computes a metric under any protocol with :func:`harness.evaluation.metrics.evaluate`:
the settings change the judgments and the run handed to it (binary relevance, removed documents, printed
or float32 scores, a tie order re-encoded as distinct scores) or the per-query values and mean it returns
(MAP@k over ``min(k, R)``, the rounding of the mean); nothing else is computed here.
:func:`waterfall` switches a tool's settings on one at a time, in the fixed order of :data:`SETTINGS`, and
attributes each step's change of the mean to the queries whose weighted value moved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.datasets.mteb_tasks import load_mteb_tasks
from harness.datasets.qrels import Qrels
from harness.evaluation.metrics import MetricSpec, aggregate_values, evaluate
from harness.evaluation.tool_orders import docid_ascending_order, ranx_order
from harness.evaluation.trec import Run, RunColumns

# Each setting's values, as the waterfall names them (the module docstring says where each comes from).
RELEVANCE = {
    "graded": "graded",  # relevant: grade >= 1; nDCG's gain is the grade
    "binary-every-row": "binary, every judged row",  # grade 0 rows relevant too, gain 1
    "binary": "binary, grade >= 1 only",  # rows of grade <= 0 dropped, the others gain 1
}
SCORE_PRECISIONS = {
    "float64": "float64",
    "float32": "float32",
    "float32-mrr-float64": "float32 (MRR float64)",  # pytrec_eval's measures vs mteb's own MRR sort
}
TIE_ORDERS = {
    "docid-descending": "docid desc",
    "docid-ascending": "docid asc",
    "ranx": "ranx quicksort",  # numba's unstable quicksort of the file order, one pass
    "ranx-twice": "ranx quicksort x2",  # a second pass by Run.make_comparable
}
MAP_DIVISORS = {"relevant": "AP@k / R", "min-k-relevant": "AP@k / min(k, R)"}
MEAN_ROUNDINGS = {
    "unrounded": "unrounded",
    "5-decimals": "5 decimals",
    "5-decimals-but-mrr": "5 decimals (MRR not)",
}
TRUNCATION_DEPTH = 1000  # BRIGHT keeps each query's top 1000 after popping the excluded ids
TOP_QUERIES = 5  # queries named per waterfall step


@dataclass(frozen=True)
class Protocol:
    """How a tool turns judgments and a run into a metric; every default is trec_eval's."""

    relevance: str = "graded"
    drop_self_hits: bool = False  # documents whose id equals the query's removed
    excluded_ids: bool = False  # each query's excluded ids (an input) removed
    depth: int | None = None  # only the top ``depth`` by score kept (ties in file order)
    printed_decimals: int | None = None  # scores written with this many decimals before scoring
    score_precision: str = "float64"
    tie_order: str = "docid-descending"
    map_divisor: str = "relevant"
    complete: bool = False  # every judged query averaged, those the run lacks as 0
    mean_rounding: str = "unrounded"

    def precision_for(self, family: str) -> str:
        """The score precision the metric family is ranked at (the engine's ``score_precision``)."""
        if self.score_precision == "float32-mrr-float64":
            return "float64" if family == "mrr" else "float32"
        return self.score_precision

    def decimals_for(self, family: str) -> int | None:
        """The decimals the mean of the metric family is rounded to (None: unrounded)."""
        if self.mean_rounding == "unrounded" or (
            self.mean_rounding == "5-decimals-but-mrr" and family == "mrr"
        ):
            return None
        return 5


TREC_EVAL = Protocol()


def _on_off(removed: str, kept: str = "kept") -> Callable[[Any], str]:
    return lambda value: removed if value else kept


@dataclass(frozen=True)
class Setting:
    """One setting of a protocol: its field, its name in the waterfall, and how a value reads."""

    field: str
    label: str
    describe: Callable[[Any], str]


# The waterfall's fixed order: what a tool does to the judgments, then to the documents of a ranking (in the
# order its pipeline does it), then how it ranks them, then its metric's definition, its averaging, its mean.
SETTINGS = (
    Setting("relevance", "relevance", RELEVANCE.__getitem__),
    Setting("drop_self_hits", "self-hits", _on_off("removed")),
    Setting("excluded_ids", "excluded ids", _on_off("removed")),
    Setting("depth", "depth", lambda depth: "all" if depth is None else f"top {depth}"),
    Setting(
        "printed_decimals",
        "scores written",
        lambda places: "as read" if places is None else f"{places} decimals",
    ),
    Setting("score_precision", "score precision", SCORE_PRECISIONS.__getitem__),
    Setting("tie_order", "tie order", TIE_ORDERS.__getitem__),
    Setting("map_divisor", "MAP@k", MAP_DIVISORS.__getitem__),
    Setting("complete", "averaging", _on_off("all judged (-c)", "judged in run")),
    Setting("mean_rounding", "mean", MEAN_ROUNDINGS.__getitem__),
)

# ------------------------------------------------------------------------------------------ the tools

TOOLS = ("st-ir", "mteb", "pyserini", "ranx", "bright")
_ST_KS = {"ndcg": (10,), "mrr": (10,), "map": (100,), "p": (1, 3, 5, 10), "recall": (1, 3, 5, 10)}
_ST_KS["success"] = _ST_KS["p"]
MTEB_KS = (1, 3, 5, 10, 20, 100, 1000)
BRIGHT_KS = (1, 5, 10, 25, 50, 100)


def mteb_drops_identical_ids(dataset: str | None) -> bool:
    """Whether mteb's task for ``dataset`` drops hits whose doc id is the query's (records/mteb_tasks.yaml)."""
    tasks = load_mteb_tasks().datasets
    return dataset in tasks and tasks[dataset].ignore_identical_ids


@dataclass(frozen=True)
class Tool:
    """A tool emulated: its protocol, the metrics it computes, the cut-offs it reports, notes on its rules."""

    name: str
    title: str
    protocol: Protocol
    with_cutoff: frozenset[str]  # metric families it computes at a cut-off k
    whole_ranking: frozenset[str]  # families it computes over the whole ranking
    reported_ks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # family -> default cut-offs
    notes: tuple[str, ...] = ()

    def metric_names(self) -> str:
        """The metrics it computes, as the harness names them."""
        return ", ".join([f"{family}@k" for family in sorted(self.with_cutoff)] + sorted(self.whole_ranking))

    def check(self, spec: MetricSpec) -> None:
        """Refuse a metric the tool does not compute (one line naming the ones it does)."""
        families = self.with_cutoff if spec.k is not None else self.whole_ranking
        if spec.family not in families:
            raise HarnessError(
                f"--metric {spec.name}: {self.name} does not compute it; it computes {self.metric_names()}"
            )

    def cutoff_note(self, spec: MetricSpec) -> str | None:
        """A note when the tool does not report this cut-off by default."""
        reported = self.reported_ks.get(spec.family)
        if spec.k is None or reported is None or spec.k in reported:
            return None
        listed = ", ".join(map(str, reported))
        return f"{self.name} reports {spec.family} at k = {listed} by default; @{spec.k} is its value with k added"


_COMMON_FAMILIES = frozenset({"ndcg", "map", "mrr", "p", "recall", "success"})


def _st_ir(dataset: str | None, run_matches_qrels: bool) -> Tool:
    return Tool(
        "st-ir",
        "sentence-transformers InformationRetrievalEvaluator",
        Protocol(
            relevance="binary-every-row",
            score_precision="float32",
            tie_order="docid-ascending",
            map_divisor="min-k-relevant",
            complete=True,
        ),
        _COMMON_FAMILIES,
        frozenset(),
        _ST_KS,
        (
            "relevant_docs = every qrels row (grade 0 too), as its documented example builds it; "
            "success@k is its accuracy@k",
        ),
    )


def _mteb_rule(dataset: str | None) -> str:
    tasks = load_mteb_tasks().datasets
    if dataset in tasks:
        return f"task {tasks[dataset].task}: ignore_identical_ids={tasks[dataset].ignore_identical_ids}"
    named = "no dataset named (--dataset)" if dataset is None else f"{dataset} is no BEIR task of mteb"
    dropping = sorted(name for name, record in tasks.items() if record.ignore_identical_ids)
    return f"{named}: ignore_identical_ids assumed False (True for {', '.join(dropping)})"


def _mteb(dataset: str | None, run_matches_qrels: bool) -> Tool:
    return Tool(
        "mteb",
        "mteb RetrievalEvaluator (v2)",
        Protocol(
            drop_self_hits=mteb_drops_identical_ids(dataset),
            score_precision="float32-mrr-float64",
            mean_rounding="5-decimals-but-mrr",
        ),
        _COMMON_FAMILIES,
        frozenset(),
        dict.fromkeys(_COMMON_FAMILIES, MTEB_KS),
        (_mteb_rule(dataset),),
    )


def _pyserini(dataset: str | None, run_matches_qrels: bool) -> Tool:
    return Tool(
        "pyserini",
        "pyserini 2CR (search --remove-query, trec_eval -c)",
        Protocol(drop_self_hits=True, printed_decimals=6, score_precision="float32", complete=True),
        _COMMON_FAMILIES,
        frozenset({"ndcg", "map", "mrr", "rprec", "bpref", "gmap"}),
        {},
        ("2CR's BEIR pages report nDCG@10, R@100 and R@1000",),
    )


def _ranx(dataset: str | None, run_matches_qrels: bool) -> Tool:
    call = "evaluate(Qrels(qrels), Run(run), metric)"
    if not run_matches_qrels:
        call = call[:-1] + ", make_comparable=True): the run's queries are not the judged ones"
    return Tool(
        "ranx",
        "ranx evaluate",
        Protocol(tie_order="ranx" if run_matches_qrels else "ranx-twice", complete=True),
        _COMMON_FAMILIES,
        frozenset({"ndcg", "map", "mrr"}),
        {},
        (
            call,
            "ranx's ndcg is Järvelin's (gain = grade, as trec_eval); ndcg_burges (2^grade - 1) is another",
        ),
    )


def _bright(dataset: str | None, run_matches_qrels: bool) -> Tool:
    return Tool(
        "bright",
        "BRIGHT calculate_retrieval_metrics",
        Protocol(
            relevance="binary",
            excluded_ids=True,
            depth=TRUNCATION_DEPTH,
            score_precision="float32",
            mean_rounding="5-decimals",
        ),
        frozenset({"ndcg", "map", "p", "recall"}),
        frozenset({"mrr"}),
        dict.fromkeys(("ndcg", "map", "p", "recall"), BRIGHT_KS),
        ("excluded ids come from --excluded-ids ({qid: [docid, ...]}, BRIGHT's excluded_ids)",),
    )


_TOOL_FACTORIES = {"st-ir": _st_ir, "mteb": _mteb, "pyserini": _pyserini, "ranx": _ranx, "bright": _bright}


def tool_protocol(name: str, *, dataset: str | None = None, run_matches_qrels: bool = True) -> Tool:
    """The tool ``name`` of :data:`TOOLS`. ``dataset`` (a BEIR name) decides mteb's identical-id rule;
    ``run_matches_qrels`` (the run's queries are the judged ones) whether ranx needs ``make_comparable``."""
    factory = _TOOL_FACTORIES.get(name)
    if factory is None:
        raise HarnessError(f"unknown tool {name!r}; emulated tools: {', '.join(TOOLS)}")
    return factory(dataset, run_matches_qrels)


# ------------------------------------------------------------------------------------------ scoring


@dataclass(frozen=True)
class Scored:
    """A metric under one protocol: the (possibly rounded) mean and each averaged query's value."""

    mean: float
    per_query: dict[str, float]


def judgments(qrels: Qrels, relevance: str) -> Qrels:
    """The qrels as the protocol's relevance reads them."""
    if relevance == "graded":
        return qrels
    if relevance == "binary-every-row":
        return {qid: dict.fromkeys(judged, 1) for qid, judged in qrels.items()}
    if relevance == "binary":  # BRIGHT's ground truth: {qid: {gold_id: 1}}, a query without gold unjudged
        gold = {qid: {doc: 1 for doc, grade in judged.items() if grade >= 1} for qid, judged in qrels.items()}
        return {qid: judged for qid, judged in gold.items() if judged}
    raise HarnessError(f"unknown relevance {relevance!r}; choose one of {', '.join(RELEVANCE)}")


def _touches_run(protocol: Protocol) -> bool:
    return (
        protocol.drop_self_hits
        or protocol.excluded_ids
        or protocol.depth is not None
        or protocol.printed_decimals is not None
        or protocol.tie_order != TREC_EVAL.tie_order
    )


def _ordered(tie_order: str, docids: list[str], scores: np.ndarray) -> list[int]:
    if tie_order == "docid-ascending":
        return docid_ascending_order(docids, scores)
    return ranx_order(scores, sorts=2 if tie_order == "ranx-twice" else 1)


def handed_run(
    run: RunColumns, protocol: Protocol, precision: str, excluded: Mapping[str, Collection[str]]
) -> tuple[Run | RunColumns, str]:
    """The run the engine scores under ``protocol``, and the precision it ranks at.

    Documents are removed (self-hits, excluded ids), cut to the depth and their scores printed, in that
    order, each query in its file order; a tie order other than trec_eval's is handed over as scores
    n..1 in that order (ranked at float64 then, the tool's precision applied before ordering)."""
    if not _touches_run(protocol):
        return run, precision
    handed: Run = {}
    for index, qid in enumerate(run.qids):
        docids, scores = run.query(index)
        # BRIGHT lists "N/A" for a query without exclusions and skips it.
        removed = set(excluded.get(qid, ())) - {"N/A"} if protocol.excluded_ids else set()
        if protocol.drop_self_hits:
            removed.add(qid)
        if removed:
            keep = [i for i, docid in enumerate(docids) if docid not in removed]
            docids, scores = [docids[i] for i in keep], scores[keep]
        if protocol.depth is not None and len(docids) > protocol.depth:
            keep = np.sort(np.argsort(-scores, kind="stable")[: protocol.depth])
            docids, scores = [docids[i] for i in keep.tolist()], scores[keep]
        if protocol.printed_decimals is not None:
            places = protocol.printed_decimals
            scores = np.array([float(f"{score:.{places}f}") for score in scores.tolist()], dtype=np.float64)
        if protocol.tie_order != TREC_EVAL.tie_order:
            if precision == "float32":
                with np.errstate(over="ignore"):
                    scores = scores.astype(np.float32).astype(np.float64)
            encoded = np.empty(len(docids), dtype=np.float64)
            encoded[_ordered(protocol.tie_order, docids, scores)] = np.arange(len(docids), 0, -1)
            scores = encoded
        docs = dict(zip(docids, scores.tolist(), strict=True))
        if len(docs) != len(docids):
            run.raise_duplicate()
        handed[qid] = docs
    return handed, ("float64" if protocol.tie_order != TREC_EVAL.tie_order else precision)


def _map_over_min_k(value: float, judged: Mapping[str, int], k: int) -> float:
    """AP@k / min(k, R) from trec_eval's AP@k / R (sentence-transformers' MAP@k)."""
    relevant = sum(1 for grade in judged.values() if grade >= 1)
    return value * relevant / min(k, relevant) if relevant else value


def score_under(
    protocol: Protocol,
    qrels: Qrels,
    run: RunColumns,
    spec: MetricSpec,
    excluded: Mapping[str, Collection[str]] | None = None,
) -> Scored:
    """``spec`` of ``run`` as ``protocol`` scores it, through the harness's metric engine."""
    judged = judgments(qrels, protocol.relevance)
    handed, precision = handed_run(run, protocol, protocol.precision_for(spec.family), excluded or {})
    evaluation = evaluate(
        judged,
        handed,
        [spec.name],
        complete=protocol.complete,
        score_precision=precision,
        diagnose=False,
    )
    per_query = {qid: values[spec.name] for qid, values in evaluation.per_query.items()}
    if protocol.map_divisor == "min-k-relevant" and spec.family == "map" and spec.k is not None:
        per_query = {qid: _map_over_min_k(value, judged[qid], spec.k) for qid, value in per_query.items()}
    decimals = protocol.decimals_for(spec.family)
    if decimals is None:
        return Scored(aggregate_values(spec.name, list(per_query.values())), per_query)
    return Scored(round(_summed_in_run_order(per_query, run) / len(per_query), decimals), per_query)


def _summed_in_run_order(per_query: Mapping[str, float], run: RunColumns) -> float:
    """The values added left to right in the run's query order, as mteb and BRIGHT add pytrec_eval's output
    (which follows the run's order): at a rounding boundary the order of the float additions decides."""
    order = [qid for qid in run.qids if qid in per_query]
    order += sorted(per_query.keys() - set(order))
    return sum(per_query[qid] for qid in order)


# ------------------------------------------------------------------------------------------ the waterfall


@dataclass(frozen=True)
class Step:
    """One setting switched from trec_eval's value to the tool's: the mean before and after, and the
    queries whose contribution to the mean (value / number averaged) moved most."""

    setting: str
    was: str
    now: str
    before: float
    after: float
    queries: list[tuple[str, float]]

    @property
    def change(self) -> float:
        return self.after - self.before

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "from": self.was,
            "to": self.now,
            "before": self.before,
            "after": self.after,
            "change": self.change,
            "queries": [{"qid": qid, "contribution": share} for qid, share in self.queries],
        }


@dataclass(frozen=True)
class Waterfall:
    """trec_eval's value of a metric, each setting's step to the tool's value, and the tool's value."""

    tool: Tool
    metric: str
    start: float
    steps: list[Step]

    @property
    def value(self) -> float:
        return self.steps[-1].after if self.steps else self.start

    def notes(self, spec: MetricSpec) -> list[str]:
        cutoff = self.tool.cutoff_note(spec)
        return [*self.tool.notes, *([cutoff] if cutoff else [])]

    def to_json(self, spec: MetricSpec) -> dict[str, Any]:
        return {
            "title": self.tool.title,
            "metric": self.metric,
            "trec_eval": self.start,
            "value": self.value,
            "difference": self.value - self.start,
            "settings": {
                setting.field: setting.describe(getattr(self.tool.protocol, setting.field))
                for setting in SETTINGS
            },
            "steps": [step.to_json() for step in self.steps],
            "notes": self.notes(spec),
        }


def contributions(before: Scored, after: Scored) -> dict[str, float]:
    """Each query's change of its share of the mean (value / queries averaged; an absent query's is 0).
    The shares' changes add up to the change of the unrounded mean."""

    def share(scored: Scored, qid: str) -> float:
        value = scored.per_query.get(qid)
        return value / len(scored.per_query) if value is not None else 0.0

    qids = before.per_query.keys() | after.per_query.keys()
    return {qid: share(after, qid) - share(before, qid) for qid in sorted(qids)}


def top_contributions(before: Scored, after: Scored, top: int) -> list[tuple[str, float]]:
    """The ``top`` queries whose share moved most (those that moved at all), largest first."""
    moved = [(qid, share) for qid, share in contributions(before, after).items() if share != 0.0]
    moved.sort(key=lambda item: (-abs(item[1]), item[0]))
    return moved[:top]


def waterfall(
    tool: Tool,
    qrels: Qrels,
    run: RunColumns,
    spec: MetricSpec,
    *,
    excluded: Mapping[str, Collection[str]] | None = None,
    top_queries: int = TOP_QUERIES,
    start: Scored | None = None,
) -> Waterfall:
    """From trec_eval's value to ``tool``'s, switching one setting at a time in :data:`SETTINGS` order.

    Each step keeps the settings switched before it, so the steps add up to the whole difference; ``start``
    is trec_eval's score when already computed."""
    tool.check(spec)
    state = TREC_EVAL
    before = start or score_under(state, qrels, run, spec, excluded)
    first = before.mean
    steps = []
    for setting in SETTINGS:
        was, now = getattr(state, setting.field), getattr(tool.protocol, setting.field)
        if was == now:
            continue
        state = dataclasses.replace(state, **{setting.field: now})
        after = score_under(state, qrels, run, spec, excluded)
        steps.append(
            Step(
                setting.label,
                setting.describe(was),
                setting.describe(now),
                before.mean,
                after.mean,
                top_contributions(before, after, top_queries),
            )
        )
        before = after
    return Waterfall(tool, spec.name, first, steps)
