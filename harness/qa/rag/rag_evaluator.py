"""Score RAG rows on the chosen metrics: IDs first, then the judge (if asked), then the embedding model.

The judge runs first so the questions it generates are encoded with everything else, in one cached
batch. Judged metrics are asked ``repeats`` times: a question's score is the mean over its repeats, and
the report gives each judged metric's per-repeat means with their spread (Ragas's maintainers advise
averaging several runs because judged scores vary from run to run).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import __version__
from harness.core.errors import HarnessError
from harness.qa.rag.embedding_metrics import TextEmbedder, embedding_scores, semantic_similarity, texts_of
from harness.qa.rag.judge_client import JudgeClient, prompt_versions
from harness.qa.rag.judged_metrics import context_recall, faithfulness, generated_questions, statement_f1
from harness.qa.rag.rows import (
    CORRECTNESS_WEIGHTS,
    EMBEDDING_METRICS,
    JUDGE_METRICS,
    METRICS,
    RAGRow,
    Score,
    aggregate,
    id_scores,
    mean_and_spread,
)

# Judged metrics that also read embeddings.
_JUDGE_WITH_EMBEDDINGS = ("answer_relevance", "answer_correctness")


@dataclass
class RAGEvaluation:
    """Per-question scores (``None``: undefined), why values are undefined, and judged repeats."""

    metrics: list[str]
    per_question: dict[str, dict[str, Score]]
    undefined: dict[str, Counter] = field(default_factory=dict)
    repeats: dict[str, dict[str, list[Score]]] = field(default_factory=dict)  # qid -> metric -> values

    def aggregate(self) -> dict[str, Any]:
        table = aggregate(self.per_question, self.metrics)
        for metric, row in table.items():
            row["undefined_reasons"] = dict(self.undefined.get(metric, {}))
        return table

    def repeat_summary(self, repeats: int) -> dict[str, Any]:
        """Per judged metric: the mean of each repeat over its questions, and their mean and spread."""
        summary: dict[str, Any] = {}
        for metric in (m for m in self.metrics if m in JUDGE_METRICS):
            means = []
            for index in range(repeats):
                values = [v[metric][index] for v in self.repeats.values() if v[metric][index] is not None]
                if values:
                    means.append(sum(values) / len(values))
            summary[metric] = {"per_repeat_means": means, **mean_and_spread(means)}
        return summary

    def question_spread(self, qid: str) -> dict[str, Any]:
        """A question's judged values over the repeats, with their mean and spread."""
        return {
            metric: {"values": values, **mean_and_spread([v for v in values if v is not None])}
            for metric, values in self.repeats.get(qid, {}).items()
        }


class RAGEvaluator:
    """Scores rows on ``metrics``; ``embedder`` and ``judge`` are required exactly when a metric needs them."""

    def __init__(
        self,
        metrics: Sequence[str],
        *,
        embedder: TextEmbedder | None = None,
        judge: JudgeClient | None = None,
        repeats: int = 1,
    ):
        self.metrics = list(metrics)
        if repeats < 1:
            raise HarnessError(f"--judge-repeats must be at least 1, got {repeats}")
        judged = [m for m in self.metrics if m in JUDGE_METRICS]
        if judged and judge is None:
            raise HarnessError(f"{', '.join(judged)} need a judge model; pass --judge (see --help)")
        self.embedder, self.judge, self.repeats = embedder, judge, repeats

    @staticmethod
    def needs_embedder(metrics: Sequence[str]) -> bool:
        return any(m in EMBEDDING_METRICS or m in _JUDGE_WITH_EMBEDDINGS for m in metrics)

    def settings(self) -> dict[str, Any]:
        """What produced the scores: definitions, the embedding model, the judge and its prompts."""
        settings: dict[str, Any] = {
            "harness_version": __version__,
            "definitions": {
                m: {"definition": METRICS[m].definition, "source": METRICS[m].source} for m in self.metrics
            },
            "correctness_weights": {
                "factuality": CORRECTNESS_WEIGHTS[0],
                "semantic_similarity": CORRECTNESS_WEIGHTS[1],
            },
            "embedding_model": self.embedder.describe() if self.embedder else None,
            "judge": None,
        }
        if self.judge is not None:
            settings["judge"] = {
                **self.judge.settings.describe(),
                "prompt_versions": prompt_versions(),
                "repeats": self.repeats,
            }
        return settings

    def evaluate(self, rows: Sequence[RAGRow]) -> RAGEvaluation:
        result = RAGEvaluation(self.metrics, {row.qid: {} for row in rows})
        undefined: dict[str, Counter] = defaultdict(Counter)
        for row in rows:
            for metric, value in id_scores(row, self.metrics).items():
                result.per_question[row.qid][metric] = value
                if value is None:
                    undefined[metric][
                        "no judged reference" if row.reference_ids is None else "empty reference"
                    ] += 1
        judged = self._judge_all(rows, undefined) if self.judge is not None else {}
        if self.embedder is not None and self.needs_embedder(self.metrics):
            questions = [q for raw in judged.values() for r in raw for q, _ in r.get("questions") or ()]
            self.embedder.prepare(texts_of(rows) + questions)
            for row in rows:
                result.per_question[row.qid].update(embedding_scores(self.embedder, row, self.metrics))
        for row in rows:
            self._finish_judged(row, judged.get(row.qid, []), result, undefined)
        result.undefined = dict(undefined)
        return result

    def _judge_all(self, rows: Sequence[RAGRow], undefined: dict[str, Counter]) -> dict[str, list[dict]]:
        """Per question, per repeat: the judge's part of every judged metric."""
        asked = [m for m in self.metrics if m in JUDGE_METRICS]
        steps = {
            "faithfulness": faithfulness,
            "context_recall_judge": context_recall,
            "answer_correctness": statement_f1,
        }
        judged: dict[str, list[dict]] = {}
        for row in rows:
            per_repeat = []
            for repeat in range(self.repeats):
                raw: dict[str, Any] = {}
                for metric in asked:
                    if metric == "answer_relevance":
                        raw["questions"], raw["questions_reason"] = (
                            (None, None) if row.is_empty else generated_questions(self.judge, row, repeat)
                        )
                    else:
                        raw[metric] = steps[metric](self.judge, row, repeat)
                per_repeat.append(raw)
            judged[row.qid] = per_repeat
        return judged

    def _finish_judged(
        self, row: RAGRow, per_repeat: list[dict], result: RAGEvaluation, undefined: dict[str, Counter]
    ) -> None:
        if not per_repeat:
            return
        values: dict[str, list[Score]] = {m: [] for m in self.metrics if m in JUDGE_METRICS}
        for raw in per_repeat:
            for metric in values:
                value, reason = self._judged_value(row, metric, raw)
                values[metric].append(value)
                if reason:
                    undefined[metric][reason] += 1
        result.repeats[row.qid] = values
        for metric, repeat_values in values.items():
            defined = [v for v in repeat_values if v is not None]
            result.per_question[row.qid][metric] = sum(defined) / len(defined) if defined else None

    def _judged_value(self, row: RAGRow, metric: str, raw: dict) -> tuple[Score, str | None]:
        if metric == "answer_relevance":
            if row.is_empty:
                return 0.0, None
            if raw["questions"] is None:
                return None, raw["questions_reason"]
            if any(flag for _, flag in raw["questions"]):
                return 0.0, None
            cosines = [self.embedder.cosine(row.question, question) for question, _ in raw["questions"]]
            return float(np.mean(cosines)), None
        value, reason = raw[metric]
        if metric == "answer_correctness" and value is not None:
            value = CORRECTNESS_WEIGHTS[0] * value + CORRECTNESS_WEIGHTS[1] * semantic_similarity(
                self.embedder, row
            )
        return value, reason
