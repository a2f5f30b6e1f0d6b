"""``harness diff A B``: two result folders, or a result and a published reference cell, side by side.

A references.yaml source states its evaluation conditions in words (``averaging: complete``,
``identical_ids: dropped (--remove-query)``); they are read into the setting names and values of
:func:`harness.results.settings_diff.result_protocol`. A condition the source words ambiguously is kept as its
text, so it shows as a difference to look at rather than being guessed away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.evaluation.judged import HEADLINE_K
from harness.evaluation.metrics import HEADLINE_METRICS
from harness.reproduction.references import (
    RecordedSettings,
    Reference,
    find_references,
    model_aliases,
    read_references,
)
from harness.results.collect import model_labels
from harness.results.result_store import StoredResult, load_result
from harness.results.settings_diff import (
    TOP_DOCS,
    TOP_QUERIES,
    PerQueryDiff,
    Protocol,
    ProtocolDiff,
    per_query_diff,
    protocol_diff,
    result_protocol,
    split_mappings,
)

REFERENCE_PREFIX = "ref"
# The metrics set side by side (when both sides have them), after the one the per-query picture uses.
DIFF_METRIC = HEADLINE_METRICS[0]  # the per-query picture shows the headline metric (ndcg@10)
DIFF_METRICS = (*HEADLINE_METRICS, f"judged@{HEADLINE_K}", "map", "mrr@10", "p@10")
_RECALL = {"plain": "plain (trec_eval recall.k)", "capped": "capped (BEIR R_cap@k)"}
_AVERAGING = {"complete": True, "retrieved": False}
# A source's recorded model settings (references.yaml ``models:``) -> the names a result's protocol uses.
_MODEL_SETTING_NAMES = {
    "kind": "model kind",
    "query_prefix": "query prefix",
    "doc_prefix": "document prefix",
    "pooling": "pooling",
    "normalize": "normalisation",
    "max_length": "max length",
    "title_join": "title joining",
    "params": "model parameters",
}


def is_reference_spec(spec: str) -> bool:
    """``ref``, ``ref:SOURCE`` or ``ref:SOURCE:MODEL`` names a published cell on the other result's dataset."""
    return spec == REFERENCE_PREFIX or spec.startswith(f"{REFERENCE_PREFIX}:")


def _identical_ids(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    words = text.strip().lower()
    if words.startswith("dropped") and "only where" not in words:
        return True
    if words.startswith(("kept", "not dropped")):
        return False
    return text  # conditional wording: shown as it is


def find_reference(
    spec: str, result: StoredResult, references_file: Path | None = None
) -> tuple[Reference, list[str]]:
    """The cell ``spec`` names on ``result``'s dataset: ``ref`` (the preferred one for its model),
    ``ref:SOURCE`` (that source's) or ``ref:SOURCE:MODEL`` / ``ref::MODEL`` (another model's, e.g. bm25-flat);
    and the notes of reading ``references_file`` (a references YAML or a folder of MTEB results).
    """
    _, source, model = (spec.split(":", 2) + ["", ""])[:3]
    names = model_aliases(model) if model else model_labels(result, model_aliases)
    references = read_references(references_file)
    found = find_references(references.references, names, result.dataset)
    if source:
        found = [ref for ref in found if ref.source.id == source]
    if not found:
        where = f" from source {source!r}" if source else ""
        read = references_file or "references.yaml"
        raise HarnessError(
            f"no published reference{where} for {model or result.model} on {result.dataset} in {read}; "
            "name one as ref:SOURCE:MODEL, diff against a result folder, or add the cell to "
            "HARNESS_CONFIG_DIR/references.yaml"
        )
    return found[0], references.notes


def reference_protocol(reference: Reference) -> Protocol:
    """The settings a reference's source states, under the names a result's protocol uses."""
    conditions = reference.source.conditions
    protocol: dict[str, Any] = {"dataset": reference.dataset}
    if reference.split:
        protocol["split"] = reference.split
    identical_ids = reference.entry.identical_ids or conditions.get("identical_ids")
    if identical_ids is not None:
        protocol["identical-id rule (drop hits whose id is the query's)"] = _identical_ids(identical_ids)
    if "averaging" in conditions:
        protocol["averaging (-c: judged queries without results count as 0)"] = _AVERAGING.get(
            conditions["averaging"], conditions["averaging"]
        )
    if "top_k" in conditions:
        protocol["top-k"] = conditions["top_k"]
    if "recall" in conditions:
        protocol["recall definition"] = _RECALL.get(conditions["recall"], conditions["recall"])
    return {**protocol, **_model_settings(reference.settings)}


def _model_settings(settings: RecordedSettings | None) -> Protocol:
    """How the source ran the model, under the setting names a result's protocol uses; unstated ones left out."""
    if settings is None:
        return {}
    stated = settings.model_dump(exclude={"stated_by"}, exclude_defaults=True)
    return {_MODEL_SETTING_NAMES[key]: value for key, value in stated.items()}


def _settings_note(reference: Reference) -> str:
    settings = reference.settings
    if settings is None:
        return (
            f"{reference.source.id} states no model settings for {reference.model} (only its evaluation "
            "conditions); they can be added under the source's models: in references.yaml"
        )
    return f"B's model settings as {reference.source.id} states them: {' '.join(settings.stated_by.split())}"


def describe_reference(reference: Reference) -> str:
    rounding = reference.source.conditions.get("rounding")
    return f"{reference.model} on {reference.dataset}, published by {reference.describe()}" + (
        f" (printed to {rounding})" if rounding else ""
    )


# ------------------------------------------------------------------------------ harness diff A B


@dataclass
class DiffReport:
    """What ``harness diff`` shows: both sides, the differing settings, metrics side by side, per query."""

    a: str
    b: str
    protocol: ProtocolDiff
    metrics: list[tuple[str, float, float]]  # (metric, A, B) for the metrics both record
    per_query: PerQueryDiff | None  # None when B is a published cell (it has no per-query values)
    notes: list[str] = field(default_factory=list)
    b_is_reference: bool = False  # B is a published cell: what it does not record is said as such

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "protocol_differences": [
                {"setting": d.setting, "a": d.a, "b": d.b} for d in self.protocol.differences
            ],
            "equal_settings": self.protocol.equal,
            "not_recorded_by_a": self.protocol.only_b,
            "not_recorded_by_b": self.protocol.only_a,
            "metrics": [{"metric": name, "a": a, "b": b, "b_minus_a": b - a} for name, a, b in self.metrics],
            "per_query": None if self.per_query is None else self.per_query.to_json(),
            "notes": self.notes,
        }


def _describe_result(result: StoredResult) -> str:
    return f"{result.directory}: {result.model} on {result.dataset} ({result.split})"


def _shared_metrics(a: dict[str, float], b: dict[str, float], first: str) -> list[tuple[str, float, float]]:
    names = [name for name in dict.fromkeys([first, *DIFF_METRICS]) if name in a and name in b]
    return [(name, a[name], b[name]) for name in names]


def _with_judged(result: StoredResult) -> dict[str, float]:
    return {**result.metrics, **(result.judged.get("mean") or {})}


def build_diff(
    a_spec: str | Path,
    b_spec: str | Path,
    *,
    metric: str = DIFF_METRIC,
    top_queries: int = TOP_QUERIES,
    top_docs: int = TOP_DOCS,
    references_file: Path | None = None,
) -> DiffReport:
    """Diff result folder A against result folder B, or against a published cell (``ref[:SOURCE]``)."""
    metric = metric.strip().lower()
    a = load_result(a_spec)
    if is_reference_spec(str(b_spec)):
        reference, notes = find_reference(str(b_spec), a, references_file)
        # A source states only some settings: those it leaves out are listed as unrecorded, not differences.
        protocol = protocol_diff(*split_mappings(result_protocol(a), reference_protocol(reference)))
        notes = [*notes, _settings_note(reference)]
        notes.append("B is a published number: it has no per-query values, so there is no per-query picture.")
        return DiffReport(
            _describe_result(a),
            describe_reference(reference),
            protocol,
            _shared_metrics(_with_judged(a), reference.metrics, metric),
            None,
            notes,
            b_is_reference=True,
        )
    b = load_result(b_spec)
    same_queries = (a.dataset, a.split) == (b.dataset, b.split)
    return DiffReport(
        _describe_result(a),
        _describe_result(b),
        protocol_diff(result_protocol(a), result_protocol(b)),
        _shared_metrics(_with_judged(a), _with_judged(b), metric),
        per_query_diff(a, b, metric, top_queries=top_queries, top_docs=top_docs) if same_queries else None,
        []
        if same_queries
        else ["A and B score different queries (dataset or split), so they are not paired."],
    )
