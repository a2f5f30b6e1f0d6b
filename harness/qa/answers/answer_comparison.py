"""Compare two systems' answers to the same questions with the evaluation's comparison engine.

Questions are paired by id (:data:`harness.evaluation.comparison.QA_PAIRING_RULE`): a question only one
file answers scores 0 for the other system, as a judged query missing from a run does in
``harness compare``. The test, seeding, correction and keys are those of
:mod:`harness.evaluation.comparison`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.errors import HarnessError
from harness.evaluation.comparison import (
    DIFFERENCE,
    QA_PAIRING_RULE,
    Comparison,
    SignificanceSettings,
    apply_correction,
    compare_values,
)
from harness.qa.answers.answer_metrics import QAScorer
from harness.qa.answers.predictions import QAFile

# Default metrics: the headline answer-matching scores; ``--metrics all`` tests every per-question score.
DEFAULT_COMPARE_METRICS = ("em", "acc", "f1")
# How many ids a report lists by name (only in one file, gold differs); the counts are always complete.
MAX_LISTED_IDS = 10


@dataclass
class QAComparison:
    """Both files' questions paired by id, and one :class:`Comparison` per metric (B against A)."""

    paired: list[str]  # every id either file answers, sorted
    only_a: list[str]  # in A's order
    only_b: list[str]  # in B's order
    gold_differs: list[str]  # shared ids whose gold answers differ between the files
    comparisons: dict[str, Comparison]


def pair_by_id(file_a: QAFile, file_b: QAFile) -> tuple[list[str], list[str], list[str]]:
    """Ids in both files (A's order), only in A, only in B."""
    ids_a = {record.qid for record in file_a.records}
    ids_b = {record.qid for record in file_b.records}
    shared = [record.qid for record in file_a.records if record.qid in ids_b]
    only_a = [record.qid for record in file_a.records if record.qid not in ids_b]
    only_b = [record.qid for record in file_b.records if record.qid not in ids_a]
    return shared, only_a, only_b


def compare_answers(
    file_a: QAFile, file_b: QAFile, scorer: QAScorer, settings: SignificanceSettings
) -> QAComparison:
    """Score both files per question, pair by id and test every metric; one correction over the metrics."""
    settings.validate()
    shared, only_a, only_b = pair_by_id(file_a, file_b)
    if not shared:
        raise HarnessError(
            f"{file_a.path} and {file_b.path} share no question id; check --id-key and that both files "
            "answer the same questions"
        )
    records_a, records_b = file_a.by_id(), file_b.by_id()
    gold_differs = [qid for qid in shared if records_a[qid].gold_groups != records_b[qid].gold_groups]
    scores_a = {qid: scorer.score(record) for qid, record in records_a.items()}
    scores_b = {qid: scorer.score(record) for qid, record in records_b.items()}
    paired = sorted(scores_a.keys() | scores_b.keys())
    labels = (str(file_a.path), str(file_b.path))
    comparisons = {
        key: compare_values(
            key,
            labels,
            {qid: scores[key] for qid, scores in scores_a.items()},
            {qid: scores[key] for qid, scores in scores_b.items()},
            settings,
            over=paired,
            missing_value=0.0,
        )
        for key in scorer.keys
    }
    apply_correction(list(comparisons.values()), settings)
    return QAComparison(paired, only_a, only_b, gold_differs, comparisons)


def pairing_warnings(result: QAComparison, path_a: object, path_b: object) -> list[str]:
    """One line per pairing problem: ids only one file answers (scored 0 for the other), golds that differ."""
    warnings = [
        f"{len(ids)} id(s) only in {path}, e.g. {ids[0]!r}; scored 0 for the other system"
        for path, ids in ((path_a, result.only_a), (path_b, result.only_b))
        if ids
    ]
    if result.gold_differs:
        warnings.append(
            f"gold answers differ for {len(result.gold_differs)} shared id(s), e.g. "
            f"{result.gold_differs[0]!r}; each file is scored against its own gold"
        )
    return warnings


def _id_list(ids: list[str]) -> dict[str, Any]:
    return {"count": len(ids), "examples": ids[:MAX_LISTED_IDS]}


def comparison_report(
    result: QAComparison, settings: SignificanceSettings, files: dict[str, dict[str, Any]], scoring: dict
) -> dict[str, Any]:
    """The JSON report: the files, how questions were paired, the settings and one row per metric."""
    return {
        "profile": scoring["profile"],
        **files,
        "pairing_rule": QA_PAIRING_RULE,
        "paired_questions": len(result.paired),
        "only_in_a": _id_list(result.only_a),
        "only_in_b": _id_list(result.only_b),
        "gold_differs": _id_list(result.gold_differs),
        "significance": settings.to_json(),
        "difference": DIFFERENCE,
        "confidence_interval": settings.confidence_interval(),
        "settings": scoring,
        "results": {key: comparison.to_json() for key, comparison in result.comparisons.items()},
    }
