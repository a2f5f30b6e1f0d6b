"""The judged RAG metrics of one question and one repeat, from the judge's parsed replies.

Each function returns ``(value, reason)``: ``reason`` says why the value is undefined (``None``) so the
report can count it. A malformed reply makes the metric undefined for that question, never a crash.
Answer relevance and answer correctness also need the embedding model; here they stop at the judge's
part (the generated questions, the statement F1) and :mod:`harness.qa.rag.rag_evaluator` completes them.
"""

from __future__ import annotations

from harness.qa.rag.judge_client import ATTRIBUTION, CORRECTNESS, QUESTION, STATEMENTS, VERDICTS, JudgeClient
from harness.qa.rag.rows import RELEVANCE_QUESTIONS, RAGRow, Score

Outcome = tuple[Score, str | None]
MALFORMED = "malformed judge reply"


def _statements(client: JudgeClient, question: str, text: str, repeat: int) -> list[str] | None:
    return client.ask(STATEMENTS, {"question": question, "answer": text}, repeat=repeat)


def faithfulness(client: JudgeClient, row: RAGRow, repeat: int) -> Outcome:
    """Supported answer statements / answer statements (Ragas Faithfulness)."""
    if row.is_empty:
        return 0.0, None
    statements = _statements(client, row.question, row.answer, repeat)
    if statements is None:
        return None, MALFORMED
    if not statements:
        return None, "answer has no statement"
    verdicts = client.ask(
        VERDICTS, {"context": "\n\n".join(row.contexts), "statements": statements}, repeat=repeat
    )
    if verdicts is None or len(verdicts) != len(statements):
        if verdicts is not None:
            client.malformed[VERDICTS.name] += 1  # a verdict list of the wrong length is malformed too
        return None, MALFORMED
    return sum(verdicts) / len(statements), None


def context_recall(client: JudgeClient, row: RAGRow, repeat: int) -> Outcome:
    """Ground-truth sentences attributed to the contexts / all of them (Ragas LLMContextRecall)."""
    flags = client.ask(
        ATTRIBUTION,
        {"question": row.question, "context": "\n\n".join(row.contexts), "reference": row.reference_text},
        repeat=repeat,
    )
    if flags is None:
        return None, MALFORMED
    if not flags:
        return None, "ground truth has no statement"
    return sum(flags) / len(flags), None


def generated_questions(
    client: JudgeClient, row: RAGRow, repeat: int
) -> tuple[list[tuple[str, int]] | None, str | None]:
    """The judge's questions for the answer, with its noncommittal flags (malformed ones left out)."""
    replies = [
        client.ask(QUESTION, {"answer": row.answer}, repeat=repeat, sample=sample)
        for sample in range(RELEVANCE_QUESTIONS)
    ]
    usable = [reply for reply in replies if reply is not None and reply[0].strip()]
    return (usable, None) if usable else (None, MALFORMED)


def statement_f1(client: JudgeClient, row: RAGRow, repeat: int) -> Outcome:
    """TP / (TP + (FP + FN) / 2) over answer and ground-truth statements; 1 when both have none."""
    if row.is_empty:
        return 0.0, None
    answer = _statements(client, row.question, row.answer, repeat)
    truth = _statements(client, row.question, row.reference_text, repeat)
    if answer is None or truth is None:
        return None, MALFORMED
    if not answer and not truth:
        return 1.0, None
    classes = client.ask(
        CORRECTNESS,
        {"question": row.question, "answer statements": answer, "ground-truth statements": truth},
        repeat=repeat,
    )
    if classes is None:
        return None, MALFORMED
    tp, fp, fn = classes["TP"], classes["FP"], classes["FN"]
    return (tp / (tp + 0.5 * (fp + fn)) if tp else 0.0), None
