"""RAG rows (question, answer, retrieved contexts, ground truth) and the metrics that need no model.

One JSON object per line, e.g.::

    {"id": "q1", "question": "...", "answer": "...", "contexts": ["...", "..."],
     "ground_truth": "..." or [...], "context_ids": ["d3", "d7"], "reference_context_ids": ["d7"]}

Every field but the id is optional in the file; a metric that needs a field a line lacks stops the run
with the line and the option that renames the key. Ground truth takes qa-eval's gold shapes
(:func:`harness.qa.answers.predictions.parse_gold`). Relevance comes from ``reference_context_ids`` or, with ``--qrels``,
from the one qrels reader (``context_ids`` are then the ranked retrieved document ids).

Metric definitions follow Ragas's source (``ragas/metrics``); :data:`METRICS` states each one and
where it comes from, and the report repeats it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import json_text
from harness.datasets.qrels import Qrels
from harness.evaluation.comparison import (
    QA_PAIRING_RULE,
    Comparison,
    SignificanceSettings,
    apply_correction,
    compare_values,
)
from harness.qa.answers.predictions import MAX_LISTED_DUPLICATES, iter_json_objects, not_text, parse_gold

Score = float | None  # None: the metric is undefined for this question (counted, left out of the mean)

# Weights of answer correctness: Ragas's AnswerCorrectness default [factuality, semantic similarity].
CORRECTNESS_WEIGHTS = (0.75, 0.25)
# Questions Ragas's answer relevancy asks the judge to generate per answer ("strictness").
RELEVANCE_QUESTIONS = 3


@dataclass(frozen=True)
class MetricSpec:
    """One RAG metric: the row fields it reads, what it needs beyond them, its definition and source."""

    needs: tuple[str, ...]  # row fields (RAGKeys attribute names)
    model: str  # "none", "embedding" or "judge" (a judge metric may also use the embedding model)
    definition: str
    source: str


METRICS: dict[str, MetricSpec] = {
    "context_precision_id": MetricSpec(
        ("context_ids", "reference_ids"),
        "none",
        "|retrieved ∩ reference| / |retrieved| over distinct retrieved ids; 0 when nothing was retrieved",
        "Ragas IDBasedContextPrecision",
    ),
    "context_precision_ranked": MetricSpec(
        ("context_ids", "reference_ids"),
        "none",
        "sum over ranks k of precision@k x v_k / number of relevant retrieved ids (v_k = 1 when the k-th "
        "distinct retrieved id is relevant); 0 when none is",
        "Ragas _calculate_average_precision (LLM and non-LLM context precision), verdicts from the ids",
    ),
    "context_recall_id": MetricSpec(
        ("context_ids", "reference_ids"),
        "none",
        "|retrieved ∩ reference| / |reference|; undefined when the reference is empty",
        "Ragas IDBasedContextRecall",
    ),
    "semantic_similarity": MetricSpec(
        ("answer", "ground_truth"),
        "embedding",
        "cosine of the L2-normalised embeddings of answer and ground truth (best ground truth)",
        "Ragas SemanticSimilarity / AnswerSimilarity (bi-encoder, no threshold)",
    ),
    "answer_relevance_embed": MetricSpec(
        ("question", "answer"),
        "embedding",
        "cosine of the embeddings of answer and question (a simple form, no judge)",
        "this harness; Ragas's form is answer_relevance",
    ),
    "answer_correctness_embed": MetricSpec(
        ("answer", "ground_truth"),
        "embedding",
        f"{CORRECTNESS_WEIGHTS[0]} x token F1 (SQuAD normalisation, best ground truth) + "
        f"{CORRECTNESS_WEIGHTS[1]} x semantic_similarity",
        "Ragas AnswerCorrectness with token F1 in place of the judge's statement F1",
    ),
    "faithfulness": MetricSpec(
        ("question", "answer", "contexts"),
        "judge",
        "answer claims the judge finds supported by the contexts / all answer claims; undefined when the "
        "answer makes no claim",
        "Ragas Faithfulness (statement generation, then NLI verdicts)",
    ),
    "answer_relevance": MetricSpec(
        ("question", "answer"),
        "judge",
        f"mean cosine between the question and {RELEVANCE_QUESTIONS} questions the judge generates from the "
        "answer; 0 when the judge calls the answer noncommittal",
        "Ragas ResponseRelevancy / AnswerRelevancy (strictness 3)",
    ),
    "context_recall_judge": MetricSpec(
        ("question", "contexts", "ground_truth"),
        "judge",
        "ground-truth statements the judge attributes to the contexts / all ground-truth statements",
        "Ragas LLMContextRecall",
    ),
    "answer_correctness": MetricSpec(
        ("question", "answer", "ground_truth"),
        "judge",
        f"{CORRECTNESS_WEIGHTS[0]} x F1 over answer / ground-truth statements (TP / (TP + (FP + FN) / 2), "
        f"1 when both have none) + {CORRECTNESS_WEIGHTS[1]} x semantic_similarity",
        "Ragas AnswerCorrectness",
    ),
}
ID_METRICS = tuple(name for name, spec in METRICS.items() if spec.model == "none")
EMBEDDING_METRICS = tuple(name for name, spec in METRICS.items() if spec.model == "embedding")
JUDGE_METRICS = tuple(name for name, spec in METRICS.items() if spec.model == "judge")


@dataclass(frozen=True)
class RAGKeys:
    """The JSON key of each row field (``--id-key`` ... ``--reference-ids-key``)."""

    id: str = "id"
    question: str = "question"
    answer: str = "answer"
    contexts: str = "contexts"
    ground_truth: str = "ground_truth"
    context_ids: str = "context_ids"
    reference_ids: str = "reference_context_ids"

    def option(self, name: str) -> str:
        return f"--{name.replace('_', '-')}-key"

    def to_json(self) -> dict[str, str]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RAGRow:
    """One question. A field the line does not have is ``None``; ``reference_ids`` may come from qrels."""

    qid: str
    line: int
    question: str | None = None
    answer: str | None = None
    contexts: tuple[str, ...] | None = None
    ground_truths: tuple[str, ...] | None = None
    context_ids: tuple[str, ...] | None = None
    reference_ids: frozenset[str] | None = None

    def has(self, name: str) -> bool:
        return getattr(self, "ground_truths" if name == "ground_truth" else name) is not None

    @property
    def is_empty(self) -> bool:
        return not (self.answer or "").strip()

    @property
    def reference_text(self) -> str:
        """The ground truth a judge reads: every ground truth, one per line."""
        return "\n".join(self.ground_truths or ())


@dataclass
class RAGFile:
    """The rows of one RAG file and what was counted while reading it."""

    path: Path
    rows: list[RAGRow]
    relevance: str  # where reference ids come from: the file's key, or a qrels file
    from_qrels: bool = False  # then a question the qrels do not judge is left out, not an error
    empty_answers: int = 0
    empty_contexts: int = 0
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)  # (id, first line, repeated line)

    def by_id(self) -> dict[str, RAGRow]:
        return {row.qid: row for row in self.rows}

    def fields_everywhere(self) -> set[str]:
        """Row fields every question has (what the default metrics are chosen from); relevance from
        qrels counts when any question is judged."""
        names = ("question", "answer", "contexts", "ground_truth", "context_ids", "reference_ids")
        return {name for name in names if self._has_everywhere(name)}

    def fields_somewhere(self) -> set[str]:
        names = ("question", "answer", "contexts", "ground_truth", "context_ids", "reference_ids")
        return {name for name in names if any(row.has(name) for row in self.rows)}

    def _has_everywhere(self, name: str) -> bool:
        if name == "reference_ids" and self.from_qrels:
            return any(row.has(name) for row in self.rows)
        return all(row.has(name) for row in self.rows)

    def warnings(self) -> dict[str, Any]:
        return {
            "empty_answers": self.empty_answers,
            "empty_contexts": self.empty_contexts,
            "duplicate_ids": len(self.duplicates),
            "duplicate_examples": [
                {"id": qid, "first_line": first, "repeated_line": repeated}
                for qid, first, repeated in self.duplicates[:MAX_LISTED_DUPLICATES]
            ],
        }


# ---- reading -----------------------------------------------------------------------------------


def _text(value: Any, path: Path, line: int, key: str, *, empty_if_null: bool = False) -> str:
    if value is None and empty_if_null:
        return ""
    text = json_text(value)
    if text is None:
        raise InputError(path, line, *not_text(key, value, "store a string"))
    return text


def _id_list(value: Any, path: Path, line: int, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InputError(path, line, f"{key!r} is {type(value).__name__}, not a list", "store a list of ids")
    return tuple(_text(item, path, line, key) for item in value)


def _contexts(value: Any, path: Path, line: int, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InputError(
            path, line, f"{key!r} is {type(value).__name__}, not a list", "store a list of texts"
        )
    return tuple(_text(item, path, line, key) for item in value)


def _reference(
    row: Mapping[str, Any], qid: str, keys: RAGKeys, qrels: Qrels | None, level: int, where: tuple[Path, int]
) -> frozenset[str] | None:
    """Relevant ids: from the qrels when given (``None`` for an unjudged question), else from the line."""
    if qrels is not None:
        judged = qrels.get(qid)
        return None if judged is None else frozenset(doc for doc, rel in judged.items() if rel >= level)
    if keys.reference_ids in row:
        return frozenset(_id_list(row[keys.reference_ids], *where, keys.reference_ids))
    return None


def _parse_row(
    row: dict[str, Any], path: Path, number: int, keys: RAGKeys, qrels: Qrels | None, level: int
) -> RAGRow:
    if keys.id not in row:
        present = ", ".join(map(str, row)) or "none"
        raise InputError(path, number, f"missing key {keys.id!r}", f"keys on this line: {present}; --id-key")
    qid = _text(row[keys.id], path, number, keys.id)
    where = (path, number)

    def optional(key: str, parse: Callable[[Any, Path, int, str], Any]) -> Any:
        return parse(row[key], path, number, key) if key in row else None

    ground = None
    if keys.ground_truth in row:
        groups = parse_gold(row[keys.ground_truth], path, number, keys.ground_truth)
        ground = tuple(dict.fromkeys(alias for group in groups for alias in group))
    return RAGRow(
        qid=qid,
        line=number,
        question=optional(keys.question, _text),
        answer=_text(row[keys.answer], path, number, keys.answer, empty_if_null=True)
        if keys.answer in row
        else None,
        contexts=optional(keys.contexts, _contexts),
        ground_truths=ground,
        context_ids=optional(keys.context_ids, _id_list),
        reference_ids=_reference(row, qid, keys, qrels, level, where),
    )


def read_rag_file(
    path: str | Path,
    keys: RAGKeys | None = None,
    *,
    qrels: Qrels | None = None,
    qrels_path: str | Path | None = None,
    relevance_level: int = 1,
) -> RAGFile:
    """Read a RAG JSONL file; a structural problem is one ``InputError`` naming the file and line."""
    path, keys = Path(path), keys or RAGKeys()
    if not path.is_file():
        raise HarnessError(f"{path}: RAG file not found")
    relevance = (
        f"qrels {qrels_path} (grade >= {relevance_level})" if qrels is not None else keys.reference_ids
    )
    result = RAGFile(path=path, rows=[], relevance=relevance, from_qrels=qrels is not None)
    first_line: dict[str, int] = {}
    for number, raw in iter_json_objects(path):
        row = _parse_row(raw, path, number, keys, qrels, relevance_level)
        if row.qid in first_line:
            result.duplicates.append((row.qid, first_line[row.qid], number))
            continue
        first_line[row.qid] = number
        result.empty_answers += row.answer is not None and row.is_empty
        result.empty_contexts += row.contexts is not None and not row.contexts
        result.rows.append(row)
    if not result.rows:
        raise HarnessError(f"{path}: no questions in the file")
    return result


def check_fields(rag_file: RAGFile, metrics: Iterable[str], keys: RAGKeys) -> None:
    """Every field the chosen metrics read is on every line; else one error naming the first line without it."""
    for metric in metrics:
        for name in METRICS[metric].needs:
            missing = next((row for row in rag_file.rows if not row.has(name)), None)
            if missing is None:
                continue
            if name == "reference_ids" and rag_file.from_qrels:
                # Unjudged questions are left out (counted), as trec_eval skips queries without qrels.
                if any(row.has(name) for row in rag_file.rows):
                    continue
                raise InputError(
                    rag_file.path,
                    None,
                    f"no question id is judged in the {rag_file.relevance}",
                    f"{metric} needs judgments; check --id-key and that the qrels match these questions",
                )
            key = getattr(keys, name)
            raise InputError(
                rag_file.path,
                missing.line,
                f"missing key {key!r}, which {metric} needs",
                f"{keys.option(name)} names another key; or leave {metric} out of --metrics",
            )


def default_metrics(rag_file: RAGFile, *, judge: bool) -> tuple[list[str], list[str]]:
    """The metrics the file's fields allow (every one without a model, the embedding ones, and with a
    judge the judged ones), and those left out only because some lines lack a field they need."""
    everywhere, somewhere = rag_file.fields_everywhere(), rag_file.fields_somewhere()
    allowed = ID_METRICS + EMBEDDING_METRICS + (JUDGE_METRICS if judge else ())
    chosen = [name for name in allowed if set(METRICS[name].needs) <= everywhere]
    partial = [name for name in allowed if name not in chosen and set(METRICS[name].needs) <= somewhere]
    return chosen, partial


def resolve_rag_metrics(raw: Sequence[str] | None) -> list[str] | None:
    """``--metrics`` (repeatable, comma-separated; ``ids``, ``embedding``, ``judge`` name groups)."""
    if not raw:
        return None
    groups = {
        "ids": ID_METRICS,
        "embedding": EMBEDDING_METRICS,
        "judge": JUDGE_METRICS,
        "all": tuple(METRICS),
    }
    chosen: list[str] = []
    for item in raw:
        for name in filter(None, (part.strip().lower() for part in item.split(","))):
            if name not in METRICS and name not in groups:
                raise HarnessError(
                    f"unknown RAG metric {name!r}; choose from {', '.join(METRICS)} or a group "
                    f"({', '.join(groups)})"
                )
            chosen.extend(metric for metric in groups.get(name, (name,)) if metric not in chosen)
    return chosen


# ---- metrics without a model -----------------------------------------------------------------


def distinct_ranked(ids: Sequence[str]) -> list[str]:
    """The retrieved ids in rank order, each once at its first rank (Ragas's ID metrics take sets)."""
    return list(dict.fromkeys(ids))


def id_context_precision(retrieved: Sequence[str], reference: frozenset[str]) -> float:
    ranked = distinct_ranked(retrieved)
    if not ranked:
        return 0.0  # an empty ranking scores 0, as a judged query with no results does in trec_eval -c
    return sum(doc in reference for doc in ranked) / len(ranked)


def ranked_context_precision(retrieved: Sequence[str], reference: frozenset[str]) -> float:
    hits, total = 0, 0.0
    for rank, doc in enumerate(distinct_ranked(retrieved), start=1):
        if doc in reference:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


def id_context_recall(retrieved: Sequence[str], reference: frozenset[str]) -> Score:
    if not reference:
        return None  # nothing to recall: undefined, as Ragas's NaN
    return len(set(retrieved) & reference) / len(reference)


def id_scores(row: RAGRow, metrics: Iterable[str]) -> dict[str, Score]:
    """The ID-based metrics of one question; all undefined when its relevance is unknown (unjudged)."""
    functions = {
        "context_precision_id": id_context_precision,
        "context_precision_ranked": ranked_context_precision,
        "context_recall_id": id_context_recall,
    }
    return {
        name: None if row.reference_ids is None else functions[name](row.context_ids or (), row.reference_ids)
        for name in metrics
        if name in functions
    }


# ---- aggregation and comparison ----------------------------------------------------------------


def mean_and_spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, sample standard deviation (ddof 1; 0 for one value), min and max of repeated scores."""
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {"mean": mean, "std": math.sqrt(var), "min": min(values), "max": max(values), "n": len(values)}


def aggregate(per_question: Mapping[str, Mapping[str, Score]], metrics: Sequence[str]) -> dict[str, Any]:
    """Mean of each metric over the questions where it is defined, with both counts."""
    table: dict[str, Any] = {}
    for metric in metrics:
        values = [scores[metric] for scores in per_question.values() if scores.get(metric) is not None]
        table[metric] = {
            "mean": sum(values) / len(values) if values else None,
            "questions": len(values),
            "undefined": len(per_question) - len(values),
        }
    return table


def compare_scores(
    labels: tuple[str, str],
    scores_a: Mapping[str, Mapping[str, Score]],
    scores_b: Mapping[str, Mapping[str, Score]],
    metrics: Sequence[str],
    settings: SignificanceSettings,
) -> dict[str, Comparison]:
    """Paired tests of B against A through the one comparison engine, one correction over the metrics.

    Questions are paired by :data:`QA_PAIRING_RULE` over those where the metric is defined for either
    system; a question missing (or undefined) for one system scores 0 for it.
    """
    settings.validate()
    comparisons: dict[str, Comparison] = {}
    for metric in metrics:
        values_a = {qid: s[metric] for qid, s in scores_a.items() if s.get(metric) is not None}
        values_b = {qid: s[metric] for qid, s in scores_b.items() if s.get(metric) is not None}
        over = sorted(values_a.keys() | values_b.keys())
        if not over:
            continue  # undefined everywhere (e.g. no reference ids): nothing to test
        comparisons[metric] = compare_values(metric, labels, values_a, values_b, settings, over=over)
    apply_correction(list(comparisons.values()), settings)
    return comparisons


PAIRING_RULE = QA_PAIRING_RULE + "; a metric undefined for one system's question scores 0 for it"
