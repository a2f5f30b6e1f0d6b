"""The JSON report of one scored predictions file, written by ``harness qa-eval`` and the qa-eval step."""

from __future__ import annotations

from typing import Any

from harness.core.fileio import file_digest
from harness.qa.data import QAFile
from harness.qa.metrics import QAEvaluation, QAScorer


def file_summary(qa_file: QAFile) -> dict[str, Any]:
    """Path, checksum, question count and the file's warnings (empty predictions, repeated ids)."""
    return {
        "path": str(qa_file.path),
        "sha256": file_digest(qa_file.path, "sha256"),
        "questions": len(qa_file.records),
        **qa_file.warnings(),
    }


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
        "predictions": file_summary(qa_file),
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
