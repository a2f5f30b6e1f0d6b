"""The ``rag-eval`` and ``rag-compare`` stages without argparse: settings in, a report with ``to_json()`` out.

:func:`evaluate_rag_file` and :func:`compare_rag_files` read the RAG files (and qrels), choose the metrics
(the fields every line has, unless named), check the fields, set up the judge and the embedding model,
score, and return a report whose ``to_json()`` is the JSON report. What the CLI shows on stderr (empty
answers, repeated ids, metrics left out) is a :class:`Notice`: passed to ``notify`` as it happens (so it
comes before an error that stops the run) and kept on the report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import file_digest
from harness.core.paths import default_cache_dir
from harness.datasets.qrels import DEFAULT_DUPLICATES, read_qrels
from harness.evaluation.comparison import Comparison, SignificanceSettings
from harness.models.model_registry import DEFAULT_MODEL
from harness.qa.rag.embedding_metrics import TextEmbedder
from harness.qa.rag.judge_client import (
    BASE_URL_ENV,
    MODEL_ENV,
    REPEAT_TEMPERATURE,
    SINGLE_TEMPERATURE,
    JudgeClient,
    JudgeSettings,
    env_value,
    key_from_environment,
)
from harness.qa.rag.rag_evaluator import RAGEvaluation, RAGEvaluator
from harness.qa.rag.rows import (
    JUDGE_METRICS,
    PAIRING_RULE,
    RAGFile,
    RAGKeys,
    check_fields,
    compare_scores,
    default_metrics,
    read_rag_file,
    resolve_rag_metrics,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    """Something the user should see that does not stop the run; ``str()`` is the line the CLI prints."""

    level: str  # "warning" or "note"
    text: str

    def __str__(self) -> str:
        return f"{self.level}: {self.text}"


Notify = Callable[[Notice], None]


def _log_notice(notice: Notice) -> None:
    _log.warning("%s", notice)


@dataclass(frozen=True)
class RAGRunSettings:
    """Everything ``rag-eval`` / ``rag-compare`` options set; option ``--x-y`` is attribute ``x_y``.

    ``metrics`` holds the raw ``--metrics`` items (names or groups, comma-separated); ``None`` picks
    every metric the files' fields allow. The judge's URL and model fall back to their environment
    variables; its key is only ever read from the environment (the variable ``judge_api_key_env`` names,
    else ``HARNESS_JUDGE_API_KEY`` / ``OPENAI_API_KEY``), so no options record or file ever holds it; its
    temperature falls back to one for a single ask and another for repeats.
    """

    keys: RAGKeys = field(default_factory=RAGKeys)
    qrels: Path | None = None
    relevance_level: int = 1
    qrels_duplicates: str = DEFAULT_DUPLICATES
    metrics: Sequence[str] | None = None
    embedding_model: str = DEFAULT_MODEL
    cache_dir: Path = field(default_factory=default_cache_dir)
    judge: bool = False
    judge_base_url: str | None = field(default=None, repr=False)  # may hold user:password@
    judge_model: str | None = None
    judge_api_key_env: str | None = None  # the NAME of the variable holding the key, never the key
    judge_repeats: int = 1
    judge_timeout: float = 60.0
    judge_retries: int = 3
    judge_backoff: float = 1.0
    judge_rps: float | None = None
    judge_temperature: float | None = None

    def judge_settings(self) -> JudgeSettings:
        """The judge endpoint's settings, options first, then the environment; checked."""
        base_url = self.judge_base_url or env_value(BASE_URL_ENV)
        if not base_url:
            raise HarnessError(
                "--judge needs the server's base URL: --judge-base-url http://127.0.0.1:8000/v1 or "
                f"{' / '.join(BASE_URL_ENV)}"
            )
        temperature = self.judge_temperature
        if temperature is None:
            temperature = SINGLE_TEMPERATURE if self.judge_repeats == 1 else REPEAT_TEMPERATURE
        return JudgeSettings(
            base_url=base_url,
            model=self.judge_model or env_value(MODEL_ENV) or "",
            api_key=key_from_environment(self.judge_api_key_env),
            timeout=self.judge_timeout,
            retries=self.judge_retries,
            backoff=self.judge_backoff,
            max_rps=self.judge_rps,
            temperature=temperature,
        ).validate()


# ---- shared steps --------------------------------------------------------------------------------


def read_rag_input(path: str | Path, settings: RAGRunSettings, notify: Notify) -> RAGFile:
    """One RAG file with its relevance (its own ids or the qrels); empty answers and repeated ids noticed."""
    qrels = read_qrels(settings.qrels, duplicates=settings.qrels_duplicates).qrels if settings.qrels else None
    rag_file = read_rag_file(
        path, settings.keys, qrels=qrels, qrels_path=settings.qrels, relevance_level=settings.relevance_level
    )
    if rag_file.empty_answers:
        notify(Notice("warning", f"{rag_file.path}: {rag_file.empty_answers} empty answer(s), scored 0"))
    if rag_file.duplicates:
        qid, first, repeated = rag_file.duplicates[0]
        notify(
            Notice(
                "warning",
                f"{rag_file.path}: {len(rag_file.duplicates)} repeated id(s), e.g. {qid!r} on lines {first} "
                f"and {repeated}; kept each id's first line",
            )
        )
    return rag_file


def _default_metrics(files: Sequence[RAGFile], *, judge: bool, notify: Notify) -> list[str]:
    """The metrics every file's fields allow; a note names those some lines' missing fields rule out."""
    chosen: list[str] | None = None
    for rag_file in files:
        allowed, partial = default_metrics(rag_file, judge=judge)
        chosen = [m for m in allowed if chosen is None or m in chosen]
        if partial:
            notify(
                Notice(
                    "note",
                    f"{rag_file.path}: not every line has the fields of {', '.join(partial)}; left out "
                    "(name them in --metrics to see the first such line)",
                )
            )
    return chosen or []


def build_evaluator(settings: RAGRunSettings, files: Sequence[RAGFile], notify: Notify) -> RAGEvaluator:
    """The evaluator for these files: metrics chosen and checked, the judge and embedding model set up."""
    metrics = resolve_rag_metrics(settings.metrics)
    if metrics is None:
        metrics = _default_metrics(files, judge=settings.judge, notify=notify)
    if not metrics:
        raise HarnessError(
            f"{files[0].path}: no metric can be computed from its fields; see --help for the keys"
        )
    judged = [m for m in metrics if m in JUDGE_METRICS]
    if judged and not settings.judge:
        raise HarnessError(f"{', '.join(judged)} need a judge model; add --judge (see --help)")
    for rag_file in files:
        check_fields(rag_file, metrics, settings.keys)
    judge = None
    if settings.judge:
        judge = JudgeClient(
            settings.judge_settings(), settings.cache_dir, warn=lambda text: notify(Notice("warning", text))
        )
    embedder = (
        TextEmbedder.from_spec(settings.embedding_model, settings.cache_dir)
        if RAGEvaluator.needs_embedder(metrics)
        else None
    )
    return RAGEvaluator(metrics, embedder=embedder, judge=judge, repeats=settings.judge_repeats)


def file_summary(rag_file: RAGFile) -> dict[str, Any]:
    """A scored file in a report: path, digest, question count, relevance source and reading counts."""
    return {
        "path": str(rag_file.path),
        "sha256": file_digest(rag_file.path, "sha256"),
        "questions": len(rag_file.rows),
        "relevance": rag_file.relevance,
        **rag_file.warnings(),
    }


def provenance_lines(evaluator: RAGEvaluator) -> list[str]:
    """What scored the metrics: the embedding model, and the judge with its call counts."""
    lines = []
    if evaluator.embedder is not None:
        described = evaluator.embedder.describe()
        lines.append(
            f"embedding model: {described['model']} ({described['settings']['runtime']} fp32, normalised)"
        )
    if evaluator.judge is not None:
        stats = evaluator.judge.stats()
        lines.append(
            f"judge: {evaluator.judge.settings.model} at {evaluator.judge.settings.endpoint}; "
            f"{stats['requests']} requests, {stats['cache_hits']} cached replies, {stats['retries']} retries, "
            f"{stats['timeouts']} timeouts, {stats['malformed_replies']} malformed replies"
            + (
                f", {stats['damaged_cache_entries']} damaged cache entries asked again"
                if stats["damaged_cache_entries"]
                else ""
            )
        )
    return lines


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


# ---- rag-eval ------------------------------------------------------------------------------------


@dataclass
class RAGReport:
    """One file's scores; ``to_json()`` is ``rag-eval --output``'s report."""

    rag_file: RAGFile
    keys: RAGKeys
    evaluator: RAGEvaluator
    result: RAGEvaluation
    per_question: bool = False  # whether the JSON lists every question's scores
    notices: list[Notice] = field(default_factory=list)

    @property
    def metrics(self) -> list[str]:
        return self.evaluator.metrics

    def to_json(self) -> dict[str, Any]:
        report: dict[str, Any] = {
            "data": file_summary(self.rag_file),
            "keys": self.keys.to_json(),
            "metrics": self.evaluator.metrics,
            "settings": self.evaluator.settings(),
            "aggregate": self.result.aggregate(),
        }
        if self.evaluator.judge is not None:
            report["judge_repeats"] = self.result.repeat_summary(self.evaluator.repeats)
            report["judge_calls"] = self.evaluator.judge.stats()
        if self.per_question:
            report["per_question"] = self._per_question()
        return report

    def _per_question(self) -> list[dict[str, Any]]:
        rows = []
        for row in self.rag_file.rows:
            entry = {"id": row.qid, "line": row.line, **self.result.per_question[row.qid]}
            if row.qid in self.result.repeats:
                entry["judge_repeats"] = self.result.question_spread(row.qid)
            rows.append(entry)
        return rows

    def summary_line(self) -> str:
        counts = self.rag_file.warnings()
        return (
            f"{self.rag_file.path}: {len(self.rag_file.rows)} questions, {counts['empty_answers']} empty "
            f"answers, {counts['duplicate_ids']} repeated ids dropped; relevance from {self.rag_file.relevance}"
        )

    def table_rows(self) -> list[list[str]]:
        """Header and one row per metric: mean, questions, undefined (and the repeat spread if repeated)."""
        repeated = self.evaluator.repeats > 1
        spread = self.result.repeat_summary(self.evaluator.repeats) if repeated else {}
        rows = [["metric", "mean", "questions", "undefined"] + (["repeat spread (sd)"] if repeated else [])]
        for metric, row in self.result.aggregate().items():
            cells = [metric, _fmt(row["mean"]), str(row["questions"]), str(row["undefined"])]
            if repeated:
                cells.append(_fmt(spread[metric]["std"]) if metric in spread else "")
            rows.append(cells)
        return rows

    def question_rows(self) -> list[list[str]]:
        """Header and one row per question: its score on each metric."""
        return [["id", *self.metrics]] + [
            [qid, *(_fmt(scores.get(m)) for m in self.metrics)]
            for qid, scores in self.result.per_question.items()
        ]

    def provenance_lines(self) -> list[str]:
        return provenance_lines(self.evaluator)


def _collector(notify: Notify | None) -> tuple[list[Notice], Notify]:
    """A list the notices are kept in, and the callback that keeps each one and passes it on."""
    notices: list[Notice] = []
    forward = notify or _log_notice

    def keep(notice: Notice) -> None:
        notices.append(notice)
        forward(notice)

    return notices, keep


def evaluate_rag_file(
    path: str | Path, settings: RAGRunSettings, *, per_question: bool = False, notify: Notify | None = None
) -> RAGReport:
    """Score one RAG file (``harness rag-eval``); notices go to ``notify`` (default: this module's logger)."""
    notices, keep = _collector(notify)
    rag_file = read_rag_input(path, settings, keep)
    evaluator = build_evaluator(settings, [rag_file], keep)
    result = evaluator.evaluate(rag_file.rows)
    return RAGReport(rag_file, settings.keys, evaluator, result, per_question, notices)


# ---- rag-compare ---------------------------------------------------------------------------------


@dataclass
class RAGComparisonReport:
    """Paired tests of B against A on every metric; ``to_json()`` is ``rag-compare --output``'s report."""

    file_a: RAGFile
    file_b: RAGFile
    significance: SignificanceSettings
    evaluator: RAGEvaluator
    comparisons: dict[str, Comparison]
    ids_a: set[str]
    ids_b: set[str]
    notices: list[Notice] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": file_summary(self.file_a),
            "b": file_summary(self.file_b),
            "pairing_rule": PAIRING_RULE,
            "only_in_a": sorted(self.ids_a - self.ids_b),
            "only_in_b": sorted(self.ids_b - self.ids_a),
            "significance": self.significance.to_json(),
            "confidence_interval": self.significance.confidence_interval(),
            "settings": self.evaluator.settings(),
            "results": {metric: comparison.to_json() for metric, comparison in self.comparisons.items()},
        }

    def summary_lines(self) -> list[str]:
        a, b, settings = self.ids_a, self.ids_b, self.significance
        return [
            f"A: {self.file_a.path}  B: {self.file_b.path}",
            f"questions: {len(a | b)}; only in A: {len(a - b)}; only in B: {len(b - a)}",
            f"pairing: {PAIRING_RULE}",
            f"test: {settings.describe()}, seed {settings.seed}",
        ]

    def table_rows(self) -> list[list[str]]:
        """Header and one row per metric: n, both means, the difference, its CI, p and adjusted p."""
        settings = self.significance
        header = ["metric", "n", "A", "B", "B-A", f"{settings.confidence:.0%} CI", "p"]
        rows = [[*header, f"p ({settings.correction})", ""]]
        for metric, row in self.comparisons.items():
            rows.append([metric, str(row.n_queries), *row.table_cells()])
        return rows

    def provenance_lines(self) -> list[str]:
        return provenance_lines(self.evaluator)


def compare_rag_files(
    path_a: str | Path,
    path_b: str | Path,
    settings: RAGRunSettings,
    significance: SignificanceSettings,
    *,
    notify: Notify | None = None,
) -> RAGComparisonReport:
    """Score two RAG files alike and test B against A per metric, questions paired by id (``harness
    rag-compare``); notices go to ``notify`` (default: this module's logger)."""
    significance.validate()
    notices, keep = _collector(notify)
    file_a, file_b = read_rag_input(path_a, settings, keep), read_rag_input(path_b, settings, keep)
    evaluator = build_evaluator(settings, [file_a, file_b], keep)
    result_a, result_b = evaluator.evaluate(file_a.rows), evaluator.evaluate(file_b.rows)
    labels = (str(file_a.path), str(file_b.path))
    comparisons = compare_scores(
        labels, result_a.per_question, result_b.per_question, evaluator.metrics, significance
    )
    if not comparisons:
        raise HarnessError("no metric is defined for any question of either file; nothing to compare")
    ids_a, ids_b = set(result_a.per_question), set(result_b.per_question)
    if not ids_a & ids_b:
        raise HarnessError(f"{file_a.path} and {file_b.path} share no question id; check --id-key")
    return RAGComparisonReport(file_a, file_b, significance, evaluator, comparisons, ids_a, ids_b, notices)
