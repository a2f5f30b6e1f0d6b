"""Why two results differ: the recorded settings that can move a number, then the per-query picture.

A result's *protocol* is every recorded setting that can change its numbers (dataset checksum, split,
identical-id rule, prefixes, pooling, normalisation, max length, title joining, top-k, trec_eval -c,
relevance level, score precision, the library versions that change scores ...), flattened to
``{setting name: value}`` so a result and a published reference cell can be set side by side.
The per-query picture pairs the two results' values by the comparison engine's one pairing rule and
shows the queries that moved most with each side's top documents and their judgments.

Two run files are diffed by their ir_metadata headers (:func:`run_file_diff`): every recorded field,
flattened to a dotted name (``method.retrieval[bm25].params.k1``), is a setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.datasets.qrels import DEFAULT_DUPLICATES, Qrels, read_qrels
from harness.evaluation.comparison import pair_values
from harness.evaluation.ir_metadata import read_run_header
from harness.evaluation.metrics import empty_ranking_value
from harness.evaluation.trec import Run, read_run, top_k_ranking
from harness.models.model_registry import DENSE_KINDS
from harness.results.result_store import StoredResult

Protocol = dict[str, Any]
# Two per-query values closer than this are a tie (they come from the same arithmetic).
TIE_TOLERANCE = 1e-9
TOP_QUERIES = 5  # queries that moved most, shown by `harness diff`
TOP_DOCS = 5  # documents shown per side for each of them
# Library versions that change scores (tokenisers, kernels, stemmers, the metric engine); others do not.
SCORING_LIBRARIES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "onnxruntime",
    "faiss-cpu",
    "numpy",
    "pytrec-eval-terrier",
    "bm25s",
    "PyStemmer",
    "libstemmer",
)


NOT_APPLICABLE = "n/a"


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _settings_getter(*keys: str) -> Callable[[StoredResult], Any]:
    """A config setting; recorded as null (e.g. a BM25 run's FAISS index) it reads as not applicable."""

    def read(result: StoredResult) -> Any:
        parent = _get(result.provenance, "config", *keys[:-1])
        if not isinstance(parent, Mapping) or keys[-1] not in parent:
            return None
        return NOT_APPLICABLE if parent[keys[-1]] is None else parent[keys[-1]]

    return read


def _model_setting_or_default(key: str, default: Any) -> Callable[[StoredResult], Any]:
    """A model setting the record leaves out when it has its default (``include_prompt`` true, right
    padding, full dimension, prompts matched by role): read as that default for any dense result."""

    def read(result: StoredResult) -> Any:
        settings = _get(result.provenance, "config", "model", "settings")
        if not isinstance(settings, Mapping) or settings.get("kind") not in DENSE_KINDS:
            return None
        return settings.get(key, default)

    return read


def _evaluation_setting(key: str) -> Callable[[StoredResult], Any]:
    """An evaluation setting as metrics.json recorded it, else as the run's config did."""
    return lambda result: result.settings.get(key, _get(result.provenance, "config", "evaluation", key))


def _score_precision(result: StoredResult) -> Any:
    """How scores were computed and rounded: the runtime label, precision, encoder options, score rounding."""
    settings = _get(result.provenance, "config", "model", "settings") or {}
    precision = {
        "runtime": _get(result.provenance, "retrieval", "label"),
        "precision": settings.get("precision") if isinstance(settings, Mapping) else None,
        "encoder_options": _get(result.provenance, "config", "encoder_options") or None,
        "score_precision": result.settings.get("score_precision"),
    }
    return {key: value for key, value in precision.items() if value is not None} or None


def _library_versions(result: StoredResult) -> dict[str, str] | None:
    versions = dict(_get(result.provenance, "environment", "versions") or {})
    versions.update(_get(result.provenance, "config", "model", "libraries") or {})
    kept = {name: str(versions[name]) for name in SCORING_LIBRARIES if name in versions}
    return kept or None


# (setting, how to read it from a result): the order ``harness diff`` lists them in.
RESULT_SETTINGS: tuple[tuple[str, Callable[[StoredResult], Any]], ...] = (
    ("dataset", lambda result: result.dataset),
    ("dataset checksum", lambda result: result.data_fingerprint or None),
    ("split", lambda result: result.split),
    ("qrels duplicates rule", _settings_getter("dataset", "qrels_duplicates")),
    (
        "identical-id rule (drop hits whose id is the query's)",
        _settings_getter("retrieval", "drop_identical_ids"),
    ),
    ("model", lambda result: result.model),
    ("model identity", _settings_getter("model", "identity")),
    ("model kind", _settings_getter("model", "settings", "kind")),
    ("query prefix", _settings_getter("model", "settings", "query_prefix")),
    ("document prefix", _settings_getter("model", "settings", "doc_prefix")),
    ("prompt names (as mteb resolves them)", _model_setting_or_default("prompt_keys", {})),
    ("prompt tokens in pooling", _model_setting_or_default("include_prompt", True)),
    ("padding side", _model_setting_or_default("padding_side", "right")),
    ("Matryoshka dimension", _model_setting_or_default("truncate_dim", "full")),
    ("pooling", _settings_getter("model", "settings", "pooling")),
    ("normalisation", _settings_getter("model", "settings", "normalize")),
    ("max length", _settings_getter("model", "settings", "max_length")),
    ("title joining", _settings_getter("model", "settings", "title_join")),
    ("model parameters", _settings_getter("model", "settings", "params")),
    ("index", _settings_getter("retrieval", "index")),
    ("top-k", _settings_getter("retrieval", "top_k")),
    ("averaging (-c: judged queries without results count as 0)", _evaluation_setting("complete")),
    ("relevance level", _evaluation_setting("relevance_level")),
    ("recall definition", lambda result: "plain (trec_eval recall.k)"),
    ("runtime and score precision", _score_precision),
    ("library versions that change scores", _library_versions),
)


def result_protocol(result: StoredResult) -> Protocol:
    """Every recorded setting of ``result`` that can move a number; unrecorded ones are left out."""
    protocol = {name: read(result) for name, read in RESULT_SETTINGS}
    return {name: value for name, value in protocol.items() if value is not None}


@dataclass(frozen=True)
class SettingDifference:
    setting: str
    a: Any
    b: Any

    def detail(self) -> Any:
        """For mappings, only the keys that differ (a checksum or version list names what changed)."""
        if isinstance(self.a, Mapping) and isinstance(self.b, Mapping):
            keys = sorted(key for key in self.a.keys() | self.b.keys() if self.a.get(key) != self.b.get(key))
            return {key: (self.a.get(key), self.b.get(key)) for key in keys}
        return None


@dataclass
class ProtocolDiff:
    differences: list[SettingDifference]
    only_a: list[str] = field(default_factory=list)  # settings B does not record
    only_b: list[str] = field(default_factory=list)
    equal: dict[str, Any] = field(default_factory=dict)  # settings both record, with their common value


def protocol_diff(a: Protocol, b: Protocol) -> ProtocolDiff:
    """The settings recorded on both sides whose values differ, in ``a``'s order, the equal ones and the
    one-sided ones."""
    differences = [
        SettingDifference(name, a[name], b[name]) for name in a if name in b and a[name] != b[name]
    ]
    return ProtocolDiff(
        differences=differences,
        only_a=[name for name in a if name not in b],
        only_b=[name for name in b if name not in a],
        equal={name: a[name] for name in a if name in b and a[name] == b[name]},
    )


def split_mappings(a: Protocol, b: Protocol) -> tuple[Protocol, Protocol]:
    """``a`` and ``b`` with every setting ``b`` records as a mapping split into one setting per key
    (``model parameters [k1]``), on both sides, where it stood: a side that records only some keys (a
    published cell) then differs only on the keys it records, and the others are named as unrecorded."""
    nested = {name for name, value in b.items() if isinstance(value, Mapping)}

    def split(protocol: Protocol) -> Protocol:
        flat: Protocol = {}
        for name, value in protocol.items():
            if name in nested and isinstance(value, Mapping):
                flat.update({f"{name} [{key}]": item for key, item in value.items()})
            else:
                flat[name] = value
        return flat

    return split(a), split(b)


# ------------------------------------------------------------------------------------- run file headers

# Sections listed first (the ones that move numbers), then the rest in the header's order.
HEADER_ORDER = ("method", "data", "tag", "implementation", "platform")
# Measured each run (wall time, memory): they differ between any two runs, so they are not settings.
MEASURED_SECTIONS = ("resources",)
# The command line differs whenever any option does; it is shown whole in a note, not cut in the table.
COMMAND_KEY = "implementation.executable.cmd"


def header_protocol(header: Mapping[str, Any]) -> Protocol:
    """An ir_metadata header as settings: each leaf under its dotted path; retrieval steps by their name
    (``method.retrieval[bm25].params.k1``), ``name==version`` lists by library (``...python.numpy``)."""
    protocol: Protocol = {}
    ordered = [key for key in HEADER_ORDER if key in header] + [
        key for key in header if key not in HEADER_ORDER
    ]
    for key in ordered:
        if key not in MEASURED_SECTIONS:
            _flatten(str(key), header[key], protocol)
    protocol.pop(COMMAND_KEY, None)
    return protocol


def _flatten(prefix: str, value: Any, protocol: Protocol) -> None:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, protocol)
    elif _is_named_steps(value):
        names = [str(step["name"]) for step in value]
        protocol[f"{prefix} (order)"] = names
        for index, step in enumerate(value):
            name = names[index] if names.count(names[index]) == 1 else f"{names[index]}#{index + 1}"
            _flatten(
                f"{prefix}[{name}]", {key: item for key, item in step.items() if key != "name"}, protocol
            )
    elif isinstance(value, list) and value and all(isinstance(item, str) and "==" in item for item in value):
        for item in value:
            library, _, version = item.partition("==")
            protocol[f"{prefix}.{library}"] = version
    else:
        protocol[prefix] = value


def _is_named_steps(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, Mapping) and "name" in item for item in value)
    )


def run_file_diff(a: str | Path, b: str | Path) -> tuple[ProtocolDiff, list[str]]:
    """The header fields of run files A and B that differ, and notes (a side without a header, what is not
    compared). Each header is read as the run files' readers read them (TREC text or parquet)."""
    headers = {side: read_run_header(path) for side, path in (("A", a), ("B", b))}
    protocols = {side: header_protocol(header or {}) for side, header in headers.items()}
    notes = [
        f"{side} has no ir_metadata header, so none of its settings are known "
        "(every run the harness writes carries one)"
        for side, header in headers.items()
        if header is None
    ]
    commands = {side: _get(header, "implementation", "executable", "cmd") for side, header in headers.items()}
    if commands["A"] != commands["B"]:
        notes += [f"{side} was made by: {command}" for side, command in commands.items() if command]
    if any(header and any(key in header for key in MEASURED_SECTIONS) for header in headers.values()):
        notes.append(
            "resources (wall time, CPU time, memory) are measured, not settings: they are not compared"
        )
    notes.append(
        "run files carry no judgments: for metrics and the per-query picture, diff result folders "
        "or run harness compare QRELS A B"
    )
    return protocol_diff(protocols["A"], protocols["B"]), notes


# ----------------------------------------------------------------------------------------- per query


@dataclass
class RankedDoc:
    docid: str
    score: float
    grade: int | None  # None: not judged


@dataclass
class QueryMove:
    qid: str
    a: float
    b: float
    a_top: list[RankedDoc]
    b_top: list[RankedDoc]
    judged: dict[str, int]  # the query's judgments (docid -> grade), empty when unknown

    @property
    def delta(self) -> float:
        return self.b - self.a


@dataclass
class PerQueryDiff:
    """B against A on one metric over the paired queries: win / tie / loss and the biggest moves."""

    metric: str
    qids: list[str]
    a: list[float]
    b: list[float]
    wins: int  # B better
    ties: int
    losses: int  # B worse
    moved: list[QueryMove]
    judgments: str | None  # where the judgments came from, or None when they could not be read

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "n_queries": len(self.qids),
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "tie_tolerance": TIE_TOLERANCE,
            "judgments": self.judgments,
            "per_query": {qid: [a, b] for qid, a, b in zip(self.qids, self.a, self.b, strict=True)},
            "moved_most": [
                {
                    "qid": move.qid,
                    "a": move.a,
                    "b": move.b,
                    "delta": move.delta,
                    "a_top": [vars(doc) for doc in move.a_top],
                    "b_top": [vars(doc) for doc in move.b_top],
                    "judged": move.judged,
                }
                for move in self.moved
            ],
        }


def result_judgments(result: StoredResult) -> tuple[Qrels, str] | None:
    """The qrels a result was scored with, read from the dataset folder its provenance names (if still there)."""
    root = _get(result.provenance, "dataset", "root")
    if not isinstance(root, str):
        return None
    path = Path(root) / "qrels" / f"{result.split}.tsv"
    if not path.is_file():
        return None
    duplicates = _get(result.provenance, "config", "dataset", "qrels_duplicates") or DEFAULT_DUPLICATES
    try:
        return read_qrels(path, duplicates=duplicates).qrels, str(path)
    except HarnessError:
        return None


def _result_run(result: StoredResult) -> Run:
    return read_run(result.run_path) if result.run_path.is_file() else {}


def _top(run: Run, qid: str, judged: Mapping[str, int], depth: int) -> list[RankedDoc]:
    return [
        RankedDoc(docid, score, judged.get(docid)) for docid, score in top_k_ranking(run.get(qid, {}), depth)
    ]


def per_query_diff(
    a: StoredResult, b: StoredResult, metric: str, *, top_queries: int = TOP_QUERIES, top_docs: int = TOP_DOCS
) -> PerQueryDiff:
    """Pair A's and B's per-query ``metric`` (a query one lacks scores as an empty ranking) and rank the moves."""
    values_a, values_b = a.per_query_values(metric), b.per_query_values(metric)
    if not values_a or not values_b:
        side = "A" if not values_a else "B"
        raise HarnessError(f"result {side} has no per-query {metric}; choose a metric both record (--metric)")
    qids, array_a, array_b = pair_values(values_a, values_b, missing_value=empty_ranking_value(metric))
    deltas = array_b - array_a
    wins = int((deltas > TIE_TOLERANCE).sum())
    losses = int((deltas < -TIE_TOLERANCE).sum())
    order = sorted(range(len(qids)), key=lambda i: (-abs(deltas[i]), qids[i]))
    chosen = [i for i in order[:top_queries] if abs(deltas[i]) > TIE_TOLERANCE]
    found = result_judgments(a) or result_judgments(b)
    qrels, source = found if found else ({}, None)
    runs = (_result_run(a), _result_run(b)) if chosen else ({}, {})
    moved = []
    for i in chosen:
        qid = qids[i]
        judged = dict(qrels.get(qid, {}))
        moved.append(
            QueryMove(
                qid,
                float(array_a[i]),
                float(array_b[i]),
                _top(runs[0], qid, judged, top_docs),
                _top(runs[1], qid, judged, top_docs),
                judged,
            )
        )
    return PerQueryDiff(
        metric=metric,
        qids=qids,
        a=array_a.tolist(),
        b=array_b.tolist(),
        wins=wins,
        ties=len(qids) - wins - losses,
        losses=losses,
        moved=moved,
        judgments=source,
    )
