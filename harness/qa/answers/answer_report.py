"""The JSON report of one scored predictions file, written by ``harness qa-eval`` and the qa-eval step."""

from __future__ import annotations

from typing import Any

from harness.core.fileio import file_digest
from harness.qa.answers.answer_comparison import MAX_LISTED_IDS
from harness.qa.answers.answer_metrics import QAEvaluation, QAScorer
from harness.qa.answers.predictions import QAFile


def file_summary(qa_file: QAFile, scorer: QAScorer) -> dict[str, Any]:
    """Path, checksum, question count and the file's warnings (empty predictions, repeated ids, golds
    that normalise to nothing under the scorer's profile: such a gold matches no prediction)."""
    empty_golds = scorer.empty_gold_ids(qa_file.records)
    return {
        "path": str(qa_file.path),
        "sha256": file_digest(qa_file.path, "sha256"),
        "questions": len(qa_file.records),
        **qa_file.warnings(),
        "empty_golds": len(empty_golds),
        "empty_gold_examples": empty_golds[:MAX_LISTED_IDS],
    }


def reading_warnings(qa_file: QAFile) -> list[str]:
    """What reading the file survived, one line each: empty predictions (scored 0), repeated ids (dropped)."""
    warnings = []
    if qa_file.empty_predictions:
        warnings.append(f"{qa_file.path}: {qa_file.empty_predictions} empty prediction(s), scored 0")
    if qa_file.duplicates:
        qid, first, repeated = qa_file.duplicates[0]
        warnings.append(
            f"{qa_file.path}: {len(qa_file.duplicates)} repeated id(s), e.g. {qid!r} on lines {first} and "
            f"{repeated}; kept each id's first line"
        )
    return warnings


def empty_gold_warning(summary: dict[str, Any], profile: str) -> str | None:
    """One line when some questions' gold normalises to nothing, else None."""
    if not summary["empty_golds"]:
        return None
    return (
        f"{summary['path']}: {summary['empty_golds']} question(s) have a gold answer that normalises to "
        f"nothing under profile {profile}, e.g. id {summary['empty_gold_examples'][0]!r}; such a gold "
        "matches no prediction"
    )


def evaluation_report(
    qa_file: QAFile,
    scorer: QAScorer,
    result: QAEvaluation,
    keys: dict[str, str],
    *,
    per_question: bool,
) -> dict[str, Any]:
    """Inputs, settings, aggregate scores (and each question's scores with ``per_question``).

    ``keys`` names the JSON fields read: ``{"id": ..., "gold": ..., "prediction": ...}``.
    """
    report: dict[str, Any] = {
        "profile": scorer.profile.name,
        "predictions": file_summary(qa_file, scorer),
        "keys": dict(keys),
        "metrics": result.keys,
        "settings": scorer.settings(),
        "aggregate": result.aggregate,
    }
    if result.bleu_corpus:
        report["bleu_corpus"] = result.bleu_corpus
    if per_question:
        report["per_question"] = [
            {"id": record.qid, "line": record.line, **result.per_question[record.qid]}
            for record in qa_file.records
        ]
    return report
