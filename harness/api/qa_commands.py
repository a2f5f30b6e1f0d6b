"""Commands on generated answers and RAG rows: ``qa-eval``, ``qa-compare``, ``rag-eval``, ``rag-compare``.

``qa-eval`` scores a predictions file against gold answers (EM, F1, ROUGE, BLEU, METEOR...), ``rag-eval``
a RAG pipeline's rows (context precision/recall, faithfulness, answer relevance and correctness); each
``-compare`` scores two files alike and tests B against A per metric, questions paired by id.

Warnings (empty answers, repeated ids, ids only one file has) are the result's ``messages``; each is
also passed to ``notify`` as it comes, if given, so it is seen before a later error or a long scoring
run (the command line prints them on standard error that way, as these commands always did). Without
``notify``, ``rag-eval`` and ``rag-compare`` log them (their stage's default).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_serializer, field_validator, model_validator

from harness.api.command_result import Command, CommandResult, StepOutcome
from harness.api.run_file_commands import write_ultrarag
from harness.api.shared_options import (
    alpha_option,
    correction_option,
    n_resamples_option,
    paired_test_option,
    qrels_duplicates_option,
    seed_option,
    significance_of,
)
from harness.core.credentials import redacted_url
from harness.core.options import INT32_MAX, MAX_RETRIES, MAX_TIMEOUT, OptionsRecord, option, output_file
from harness.core.paths import default_cache_dir
from harness.core.text_table import text_table
from harness.evaluation.comparison import QA_PAIRING_RULE, SignificanceSettings
from harness.experiments import ultrarag
from harness.qa.answers.answer_comparison import (
    DEFAULT_COMPARE_METRICS,
    QAComparison,
    compare_answers,
    comparison_report,
    pairing_warnings,
)
from harness.qa.answers.answer_metrics import (
    ALL_SCORE_KEYS,
    METRIC_GROUPS,
    WORDNET_ENV,
    QAEvaluation,
    QAScorer,
    resolve_metrics,
)
from harness.qa.answers.answer_report import (
    empty_gold_warning,
    evaluation_report,
    file_summary,
    reading_warnings,
)
from harness.qa.answers.predictions import CHOICES_KEY, GOLD_KEY, ID_KEY, PRED_KEY, QAFile, read_predictions
from harness.qa.answers.profiles import DEFAULT_PROFILE, PROFILE_NAMES
from harness.qa.rag.judge_client import (
    API_KEY_ENV,
    BASE_URL_ENV,
    KEY_REFUSED,
    MAX_RETRY_AFTER,
    MODEL_ENV,
    REPEAT_TEMPERATURE,
    SINGLE_TEMPERATURE,
    key_variable_problem,
)
from harness.qa.rag.rag_stage import (
    Notice,
    RAGComparisonReport,
    RAGReport,
    RAGRunSettings,
    compare_rag_files,
    evaluate_rag_file,
)
from harness.qa.rag.rows import METRICS, PAIRING_RULE, RAGKeys

CORRECTION_SCOPE = "the metrics tested; the CI is at 1 - alpha, unadjusted"
ULTRARAG_SAVE_PATH = "also write UltraRAG's result JSON here, the harness's fuller report beside it"


Notify = Callable[[str], None]

# ------------------------------------------------------------------------------------ warnings


def _messages(notify: Notify | None) -> tuple[list[str], Notify]:
    """The result's message list, and the callback a warning goes to: ``notify`` when given (the line is
    then delivered, not kept), else the list."""
    messages: list[str] = []
    return messages, notify if notify is not None else messages.append


# ---------------------------------------------------------------------------------------- qa-eval

QA_EXAMPLE_LINE = (
    '{"id": 0, "question": "...", "golden_answers": ["14 December 1972 UTC", "December 1972"], '
    '"pred_answer": "December 14, 1973"}'
)
QA_METRICS_HELP = (
    f"comma-separated metric groups ({', '.join(METRIC_GROUPS)}) or single scores "
    f"({', '.join(ALL_SCORE_KEYS)}); 'all' for everything"
)


class AnswerInputOptions(OptionsRecord):
    """How ``qa-eval`` and ``qa-compare`` read a predictions file and which metric definitions they use."""

    gold_key: str = option(GOLD_KEY, help="key of the gold answers (default: %(default)s)")
    pred_key: str = option(PRED_KEY, help="key of the prediction (default: %(default)s)")
    id_key: str = option(ID_KEY, help="key of the question id (default: %(default)s)")
    choices_key: str = option(
        CHOICES_KEY,
        help="key of multiple-choice options; when a line has them, gold answers are 0-based indices "
        "(default: %(default)s)",
    )
    profile: str = option(
        DEFAULT_PROFILE,
        choices=PROFILE_NAMES,
        help="whose definitions of the answer metrics (EM, Acc, StringEM, CoverEM, F1, ROUGE) to use: squad "
        "(SQuAD/ALCE), ultrarag (UltraRAG's evaluation server) or flashrag (FlashRAG's evaluator); named in "
        "every output (default: %(default)s)",
    )
    no_synonyms: bool = option(
        False,
        action="store_true",
        help=f"run METEOR's exact and stem stages only, even when WordNet is installed (it is looked for in "
        f"${WORDNET_ENV}, nltk's data folders and /usr/share/wordnet from Debian's wordnet-base)",
    )

    def read(self, path: Path, warn: Notify) -> QAFile:
        """The predictions file at ``path``, read with these keys; what reading survived goes to ``warn``."""
        qa_file = read_predictions(
            path,
            gold_key=self.gold_key,
            pred_key=self.pred_key,
            id_key=self.id_key,
            choices_key=self.choices_key,
        )
        _warn_each(warn, reading_warnings(qa_file))
        return qa_file

    def scorer(self, keys: list[str]) -> QAScorer:
        """The scorer of score ``keys`` under this profile (METEOR's synonym stage unless ``no_synonyms``)."""
        return QAScorer(keys, synonyms=not self.no_synonyms, profile=self.profile)


class QAEvalOptions(AnswerInputOptions):
    """``harness qa-eval PREDICTIONS.jsonl``: answer metrics of one predictions file."""

    predictions: Path = option(
        positional=True, parse=Path, help="JSONL file of predictions with gold answers"
    )
    metrics: list[str] | None = option(None, action="append", help=f"{QA_METRICS_HELP} (default: all)")
    per_question: bool = option(
        False,
        action="store_true",
        help="also give every question's scores (in the --output report, or as a table on stdout)",
    )
    output: Path | None = option(None, parse=output_file, help="write the full report to this JSON file")
    ultrarag_save_path: Path | None = option(None, hidden=True, role="output", help=ULTRARAG_SAVE_PATH)


def _scorer_lines(scorer: QAScorer) -> list[str]:
    """The definitions behind the numbers: profile, normalisation, tokenisation, empty golds, METEOR."""
    settings = scorer.settings()
    lines = [
        f"profile: {settings['profile']} ({settings['profile_summary']})",
        f"normalisation: {settings['normalisation']}",
        f"tokenisation: {settings['tokenisation']}",
        f"empty gold: {settings['empty_gold']}",
    ]
    if "meteor" in scorer.groups:
        wordnet = scorer.wordnet
        where = f"WordNet {wordnet.version} at {wordnet.path}" if wordnet.reader is not None else wordnet.note
        lines.append(f"METEOR stages: {', '.join(scorer.meteor_stages)} ({where})")
    return lines


def _warn_each(warn: Notify, warnings: list[str | None]) -> None:
    for warning in warnings:
        if warning:
            warn(f"warning: {warning}")


@dataclass
class QAEvalResult(CommandResult):
    """One predictions file scored: ``evaluation.aggregate`` (key -> mean), ``evaluation.per_question``,
    and ``report``, the JSON ``output`` holds (inputs, keys, metrics, settings, aggregate)."""

    options: QAEvalOptions
    qa_file: QAFile
    scorer: QAScorer
    evaluation: QAEvaluation
    report: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        return self.report

    def render(self) -> str:
        counts, result = self.qa_file.warnings(), self.evaluation
        scores = result.aggregate
        lines = [
            f"{self.qa_file.path}: {len(self.qa_file.records)} questions, profile {self.scorer.profile.name}, "
            f"{counts['empty_predictions']} empty predictions, {counts['duplicate_ids']} repeated ids dropped",
            *text_table([["metric", "score"], *([name, f"{value:.4f}"] for name, value in scores.items())]),
            *_scorer_lines(self.scorer),
        ]
        if self.options.per_question and not self.options.output:
            rows = [["id", *result.keys]]
            rows += [
                [qid, *(f"{scores[key]:.4f}" for key in result.keys)]
                for qid, scores in result.per_question.items()
            ]
            lines += ["", *text_table(rows)]
        if self.options.output:
            lines.append(f"report: {self.options.output}")
        return "\n".join(lines)

    def summary(self) -> list[str]:
        """The two lines an experiment step shows: questions and profile, then the aggregate scores."""
        return [
            f"{len(self.qa_file.records)} questions; profile {self.options.profile}",
            ", ".join(f"{name} {value:.4f}" for name, value in self.evaluation.aggregate.items()),
        ]


def qa_eval(
    options: QAEvalOptions | None = None, /, *, notify: Notify | None = None, **values: Any
) -> QAEvalResult:
    """Score generated answers against gold answers, per question and in aggregate, as ``harness qa-eval``.

    Give a :class:`QAEvalOptions` or its fields as keywords: ``predictions`` (JSONL, one question per
    line), ``metrics`` (groups or score keys; default all), ``profile`` (squad, ultrarag, flashrag),
    the ``*_key`` names of the JSON fields, ``per_question``, ``output`` (the JSON report) and
    ``ultrarag_save_path`` (UltraRAG's result file). The result holds the scores and the report;
    its ``messages`` the warnings (empty predictions, repeated ids, golds that normalise to nothing).
    Example: ``qa_eval(predictions="answers.jsonl", metrics=["em,f1"]).evaluation.aggregate``.
    """
    options = QAEvalOptions.coerce(options, values)
    messages, warn = _messages(notify)
    keys = resolve_metrics(options.metrics)
    qa_file = options.read(options.predictions, warn)
    scorer = options.scorer(keys)
    evaluation = scorer.evaluate(qa_file.records)
    names = {"id": options.id_key, "gold": options.gold_key, "prediction": options.pred_key}
    report = evaluation_report(qa_file, scorer, evaluation, names, per_question=options.per_question)
    _warn_each(warn, [empty_gold_warning(report["predictions"], scorer.profile.name)])
    result = QAEvalResult(
        options=options,
        qa_file=qa_file,
        scorer=scorer,
        evaluation=evaluation,
        report=report,
        messages=messages,
    )
    if options.output:
        result.write_payload(options.output)
    if options.ultrarag_save_path:
        rows = [evaluation.per_question[record.qid] for record in qa_file.records]
        shaped = ultrarag.answer_results(keys, rows)
        result.paths += write_ultrarag(options.ultrarag_save_path, shaped, report)
    return result


def qa_eval_step(options: QAEvalOptions, directory: Path) -> StepOutcome:
    """``qa-eval`` as an experiment step: ``qa.json`` in the step's folder (and UltraRAG's file if asked)."""
    result = qa_eval(options.replace(output=directory / "qa.json"))
    return StepOutcome(result.paths, result.summary())


# ------------------------------------------------------------------------------------- qa-compare


class QACompareOptions(AnswerInputOptions):
    """``harness qa-compare A.jsonl B.jsonl``: paired tests of B's answers against A's, per metric."""

    system_a: Path = option(
        positional=True, parse=Path, metavar="A.jsonl", help="predictions of system A (the baseline)"
    )
    system_b: Path = option(positional=True, parse=Path, metavar="B.jsonl", help="predictions of system B")
    metrics: list[str] | None = option(
        None, action="append", help=f"{QA_METRICS_HELP} (default: {','.join(DEFAULT_COMPARE_METRICS)})"
    )
    test: str = paired_test_option()
    n_resamples: int = n_resamples_option()
    seed: int = seed_option()
    alpha: float = alpha_option()
    correction: str = correction_option(CORRECTION_SCOPE)
    output: Path | None = option(None, parse=output_file, help="write the comparison to this JSON file")


@dataclass
class QACompareResult(CommandResult):
    """B against A: ``comparison.comparisons`` (metric -> means, difference, CI, p, adjusted p), the
    pairing (``paired``, ``only_a``, ``only_b``, ``gold_differs``) and each file's summary."""

    options: QACompareOptions
    file_a: QAFile
    file_b: QAFile
    scorer: QAScorer
    comparison: QAComparison
    significance: SignificanceSettings
    files: dict[str, dict[str, Any]]

    def payload(self) -> dict[str, Any]:
        return comparison_report(self.comparison, self.significance, self.files, self.scorer.settings())

    def render(self) -> str:
        result, settings = self.comparison, self.significance
        ci, adjusted = f"{settings.confidence:.0%} CI", f"p ({settings.correction})"
        header = ["metric", "A", "B", "B-A", ci, "p", adjusted, ""]
        lines = [
            f"A: {self.file_a.path}  B: {self.file_b.path}  profile: {self.scorer.profile.name}",
            f"paired questions: {len(result.paired)}; only in A: {len(result.only_a)}; "
            f"only in B: {len(result.only_b)}",
            f"pairing: {QA_PAIRING_RULE}",
            f"test: {settings.describe()}, seed {settings.seed}",
            *text_table([header, *([key, *row.table_cells()] for key, row in result.comparisons.items())]),
            *_scorer_lines(self.scorer),
        ]
        if self.options.output:
            lines.append(f"report: {self.options.output}")
        return "\n".join(lines)


def qa_compare(
    options: QACompareOptions | None = None, /, *, notify: Notify | None = None, **values: Any
) -> QACompareResult:
    """Score two systems' answers alike and test B against A on each metric, as ``harness qa-compare``.

    Questions are paired by id; one only a file answers scores 0 for the other system. Options: the
    files ``system_a`` (baseline) and ``system_b``, ``metrics`` (default em, acc, f1), the paired
    ``test``, ``n_resamples``, ``seed``, ``alpha``, ``correction`` (over the metrics), the reading keys
    and ``profile`` as :func:`qa_eval`, ``output`` (the JSON report).
    Example: ``qa_compare(system_a="a.jsonl", system_b="b.jsonl").comparison.comparisons["f1"].p_value``.
    """
    options = QACompareOptions.coerce(options, values)
    messages, warn = _messages(notify)
    keys = resolve_metrics(options.metrics or DEFAULT_COMPARE_METRICS)
    significance = significance_of(options)
    file_a, file_b = options.read(options.system_a, warn), options.read(options.system_b, warn)
    scorer = options.scorer(keys)
    comparison = compare_answers(file_a, file_b, scorer, significance)
    _warn_each(warn, pairing_warnings(comparison, options.system_a, options.system_b))
    files = {"a": file_summary(file_a, scorer), "b": file_summary(file_b, scorer)}
    _warn_each(warn, [empty_gold_warning(summary, scorer.profile.name) for summary in files.values()])
    result = QACompareResult(
        options=options,
        file_a=file_a,
        file_b=file_b,
        scorer=scorer,
        comparison=comparison,
        significance=significance,
        files=files,
        messages=messages,
    )
    if options.output:
        result.write_payload(options.output)
    return result


# --------------------------------------------------------------------------------------- rag-eval

RAG_EXAMPLE_LINE = (
    '{"id": "q1", "question": "...", "answer": "...", "contexts": ["..."], "ground_truth": "...", '
    '"context_ids": ["d3", "d7"], "reference_context_ids": ["d7"]}'
)
RAG_METRICS_HELP = (
    f"comma-separated metrics ({', '.join(METRICS)}) or groups (ids, embedding, judge, all); default: every "
    "metric the file's fields allow, judged ones only with --judge"
)
# The stage's defaults are the options' defaults (one home: an experiment step gets the same).
_RAG = RAGRunSettings()
_KEYS = RAGKeys()
# The options that are RAGRunSettings fields of the same name (all but the keys, built from --*-key).
_SETTINGS = tuple(f.name for f in fields(RAGRunSettings) if f.name != "keys")
FIELDS = ("fields", "JSON keys of each line's fields")
RELEVANCE = ("relevance", "which retrieved ids are relevant")
JUDGE = ("judge", "an OpenAI-compatible chat endpoint, used only with --judge")
MAX_JUDGE_RPS = 10_000.0
MAX_TEMPERATURE = 2.0  # the OpenAI API's range


def _key_variable(text: str) -> str:
    """argparse type of ``--judge-api-key-env``: an environment variable's name (never echoed if not)."""
    problem = key_variable_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _refuse_key(text: str) -> None:
    """argparse type of ``--judge-api-key``: always refused, without echoing the key."""
    raise argparse.ArgumentTypeError(KEY_REFUSED)


def _key_option(name: str) -> Any:
    """``--NAME-key``: the JSON key of one row field (``RAGKeys``), in the fields group."""
    default = getattr(_KEYS, name)
    return option(default, help=f"(default: {default})", group=FIELDS)


class RAGInputOptions(OptionsRecord):
    """How ``rag-eval`` and ``rag-compare`` read RAG rows, judge relevance, and score (embedding model, judge).

    :meth:`settings` is the stage's :class:`RAGRunSettings` these options describe.
    """

    id_key: str = _key_option("id")
    question_key: str = _key_option("question")
    answer_key: str = _key_option("answer")
    contexts_key: str = _key_option("contexts")
    ground_truth_key: str = _key_option("ground_truth")
    context_ids_key: str = _key_option("context_ids")
    reference_ids_key: str = _key_option("reference_ids")
    qrels: Path | None = option(
        None,
        parse=Path,
        group=RELEVANCE,
        help="judgments (TREC or BEIR qrels) in place of reference_context_ids; context_ids are then the "
        "ranked retrieved doc ids and a question's id is its query id",
    )
    relevance_level: int = option(
        _RAG.relevance_level,
        low=-INT32_MAX - 1,
        high=INT32_MAX,
        group=RELEVANCE,
        help="minimum grade counted as relevant",
    )
    qrels_duplicates: str = qrels_duplicates_option(RELEVANCE)
    metrics: list[str] | None = option(None, action="append", help=RAG_METRICS_HELP)
    embedding_model: str = option(
        _RAG.embedding_model,
        help="registry name, alias or model folder of the embedding model (default: %(default)s, offline)",
    )
    cache_dir: Path | None = option(None, parse=Path, help="env HARNESS_CACHE_DIR")
    judge: bool = option(
        _RAG.judge, action="store_true", group=JUDGE, help="score the judged metrics (each call is cached)"
    )
    # Secret-bearing: a base URL may hold ``user:password@`` (left out of the repr; redacted in every
    # JSON dump: experiment.yaml, step.json, --dry-run). The key itself is never an option's value.
    judge_base_url: Annotated[str | None, Field(repr=False)] = option(
        None, group=JUDGE, help=f"e.g. http://127.0.0.1:8000/v1 (env {' / '.join(BASE_URL_ENV)})"
    )
    judge_model: str | None = option(
        None, group=JUDGE, help=f"model name the server knows (env {' / '.join(MODEL_ENV)})"
    )
    judge_api_key_env: str | None = option(
        None,
        parse=_key_variable,
        metavar="NAME",
        group=JUDGE,
        help=f"the environment variable holding the bearer key, if the server wants one (default: "
        f"{' then '.join(API_KEY_ENV)}); the key is never written or shown",
    )
    judge_api_key: Annotated[None, Field(exclude=True)] = option(
        None,
        parse=_refuse_key,
        metavar="KEY",
        group=JUDGE,
        help="refused: a key on the command line shows in `ps`; use --judge-api-key-env",
    )
    judge_repeats: int = option(
        _RAG.judge_repeats, low=1, high=INT32_MAX, group=JUDGE, help="ask N times; report mean and spread"
    )
    judge_timeout: float = option(
        _RAG.judge_timeout,
        above=0,
        high=MAX_TIMEOUT,
        group=JUDGE,
        help=f"seconds for a whole request, the reply's last byte included (default: {_RAG.judge_timeout:g})",
    )
    judge_retries: int = option(
        _RAG.judge_retries,
        low=0,
        high=MAX_RETRIES,
        group=JUDGE,
        help=f"retries on a timeout, 408, 429, 5xx, a reset or short read, or a body that is not a chat "
        f"completion; a 429/503's Retry-After is waited for, up to {MAX_RETRY_AFTER:g} s "
        f"(default: {_RAG.judge_retries})",
    )
    judge_backoff: float = option(
        _RAG.judge_backoff,
        low=0.0,
        high=MAX_TIMEOUT,
        group=JUDGE,
        help="first retry delay, doubled each time",
    )
    judge_rps: float | None = option(
        _RAG.judge_rps, above=0, high=MAX_JUDGE_RPS, group=JUDGE, help="at most this many requests per second"
    )
    judge_temperature: float | None = option(
        _RAG.judge_temperature,
        low=0.0,
        high=MAX_TEMPERATURE,
        group=JUDGE,
        help=f"sampling temperature (default: {SINGLE_TEMPERATURE} with one repeat, {REPEAT_TEMPERATURE} with "
        "several)",
    )

    # A refused key must not be echoed by a validation error either (pydantic shows the input otherwise).
    model_config = ConfigDict(hide_input_in_errors=True)

    @model_validator(mode="before")
    @classmethod
    def _no_key_in_the_options(cls, data: Any) -> Any:
        """A key in a file, ``--set`` or a keyword would be written to experiment.yaml: refused."""
        if isinstance(data, dict) and any(
            data.get(k) is not None for k in ("judge_api_key", "judge-api-key")
        ):
            raise ValueError(f"judge_api_key: {KEY_REFUSED}")
        return data

    @field_validator("judge_api_key_env")
    @classmethod
    def _a_variable_name(cls, name: str | None) -> str | None:
        problem = key_variable_problem(name) if name is not None else None
        if problem:
            raise ValueError(problem)
        return name

    @field_serializer("judge_base_url", when_used="json")
    def _without_credentials(self, url: str | None) -> str | None:
        return redacted_url(url) if url else url

    def settings(self) -> RAGRunSettings:
        """The stage's settings: the row keys from the ``*_key`` options, the rest by name; the cache
        folder defaults to ``HARNESS_CACHE_DIR``'s."""
        keys = RAGKeys(**{name: getattr(self, f"{name}_key") for name in _KEYS.to_json()})
        chosen = {name: getattr(self, name) for name in _SETTINGS}
        chosen["cache_dir"] = self.cache_dir or default_cache_dir()
        return RAGRunSettings(keys=keys, **chosen)


class RAGEvalOptions(RAGInputOptions):
    """``harness rag-eval DATA.jsonl``: context and answer metrics of a RAG pipeline's rows."""

    data: Path = option(positional=True, parse=Path, metavar="DATA.jsonl", help="JSONL file of RAG rows")
    per_question: bool = option(False, action="store_true", help="also give every question's scores")
    output: Path | None = option(
        None, parse=Path, role="output", help="write the full report to this JSON file"
    )


@dataclass
class RAGEvalResult(CommandResult):
    """One RAG file scored: ``report`` (``aggregate`` per metric, ``per_question``, ``to_json()``: the
    JSON ``output`` holds) and the notices (``messages``: empty answers, repeated ids, metrics left out)."""

    options: RAGEvalOptions
    report: RAGReport

    def payload(self) -> dict[str, Any]:
        return self.report.to_json()

    def render(self) -> str:
        report = self.report
        lines = [report.summary_line(), *text_table(report.table_rows()), *report.provenance_lines()]
        if self.options.per_question and not self.options.output:
            lines += ["", *text_table(report.question_rows())]
        if self.options.output:
            lines.append(f"report: {self.options.output}")
        return "\n".join(lines)

    def summary(self) -> list[str]:
        """What an experiment step shows: the notices, the file, the table (unaligned), the models used."""
        report = self.report
        return [
            *(str(notice) for notice in report.notices),
            report.summary_line(),
            *("  ".join(row) for row in report.table_rows()),
            *report.provenance_lines(),
        ]


def _as_lines(notify: Notify | None) -> Callable[[Notice], None] | None:
    """The stage's notice callback passing each notice's line to ``notify``; without one the stage logs
    them (logger ``harness.qa.rag.rag_stage``), as an experiment step always has."""
    return (lambda notice: notify(str(notice))) if notify is not None else None


def rag_eval(
    options: RAGEvalOptions | None = None, /, *, notify: Notify | None = None, **values: Any
) -> RAGEvalResult:
    """Score a RAG pipeline's rows, as ``harness rag-eval``: ID-based context precision/recall, embedding
    similarity, and (with ``judge``) faithfulness, answer relevance, context recall and correctness.

    Options: ``data`` (JSONL rows), ``metrics`` (names or groups; default: what the rows' fields allow),
    ``qrels`` in place of each row's reference ids, ``embedding_model``, the ``judge_*`` endpoint, the
    ``*_key`` field names, ``per_question`` and ``output`` (the JSON report). The result's ``report``
    holds the scores. Example: ``rag_eval(data="rag.jsonl", metrics=["ids"]).report.result.aggregate()``.
    """
    options = RAGEvalOptions.coerce(options, values)
    settings = options.settings()
    report = evaluate_rag_file(
        options.data, settings, per_question=options.per_question, notify=_as_lines(notify)
    )
    result = RAGEvalResult(
        options=options,
        report=report,
        messages=[] if notify is not None else [str(notice) for notice in report.notices],
    )
    if options.output:
        result.write_payload(options.output, parents=True)
    return result


def rag_eval_step(options: RAGEvalOptions, directory: Path) -> StepOutcome:
    """``rag-eval`` as an experiment step: ``rag.json`` in the step's folder."""
    result = rag_eval(options.replace(output=directory / "rag.json"))
    return StepOutcome(result.paths, result.summary())


# ------------------------------------------------------------------------------------ rag-compare


class RAGCompareOptions(RAGInputOptions):
    """``harness rag-compare A.jsonl B.jsonl``: paired tests of B's RAG scores against A's, per metric."""

    system_a: Path = option(
        positional=True, parse=Path, metavar="A.jsonl", help="RAG rows of system A (the baseline)"
    )
    system_b: Path = option(positional=True, parse=Path, metavar="B.jsonl", help="RAG rows of system B")
    test: str = paired_test_option()
    n_resamples: int = n_resamples_option()
    seed: int = seed_option()
    alpha: float = alpha_option()
    correction: str = correction_option(CORRECTION_SCOPE)
    output: Path | None = option(
        None, parse=Path, role="output", help="write the comparison to this JSON file"
    )


@dataclass
class RAGCompareResult(CommandResult):
    """B against A: ``report.comparisons`` (metric -> n, means, difference, CI, p, adjusted p), the
    question ids of each file and the notices (``messages``)."""

    options: RAGCompareOptions
    report: RAGComparisonReport

    def payload(self) -> dict[str, Any]:
        return self.report.to_json()

    def render(self) -> str:
        report = self.report
        lines = [*report.summary_lines(), *text_table(report.table_rows()), *report.provenance_lines()]
        if self.options.output:
            lines.append(f"report: {self.options.output}")
        return "\n".join(lines)


def rag_compare(
    options: RAGCompareOptions | None = None, /, *, notify: Notify | None = None, **values: Any
) -> RAGCompareResult:
    """Score two RAG files alike and test B against A per metric, questions paired by id (``harness
    rag-compare``); p-values are adjusted across the metrics.

    Options: ``system_a`` (baseline), ``system_b``, the scoring options of :func:`rag_eval`, the paired
    ``test``, ``n_resamples``, ``seed``, ``alpha``, ``correction``, and ``output`` (the JSON report).
    Example: ``rag_compare(system_a="a.jsonl", system_b="b.jsonl", metrics=["ids"]).report.comparisons``.
    """
    options = RAGCompareOptions.coerce(options, values)
    significance = significance_of(options)
    report = compare_rag_files(
        options.system_a, options.system_b, options.settings(), significance, notify=_as_lines(notify)
    )
    result = RAGCompareResult(
        options=options,
        report=report,
        messages=[] if notify is not None else [str(notice) for notice in report.notices],
    )
    if options.output:
        result.write_payload(options.output, parents=True)
    return result


COMMANDS = (
    Command(
        "qa-eval",
        QAEvalOptions,
        qa_eval,
        help="score generated answers: EM, Acc, StringEM, CoverEM, F1, ROUGE, BLEU, METEOR, distinct-n",
        description="Score a JSONL file of predictions against gold answers, per question and in aggregate. "
        f"One JSON object per line, e.g. {QA_EXAMPLE_LINE}. Gold answers are a string, a list of aliases, "
        "or a list of alias lists (ASQA: StringEM counts the groups found). EM, Acc, StringEM, CoverEM, "
        "F1 and ROUGE follow --profile (squad: SQuAD normalisation, rouge-score); BLEU (sacrebleu) and "
        "METEOR (nltk) use their libraries' tokenisation. CJK text is scored per character. An empty "
        "prediction scores 0 and is counted; a repeated id keeps its first line.",
        step=qa_eval_step,
        step_inputs=lambda o: {"predictions": o.predictions},
        notify=True,
    ),
    Command(
        "qa-compare",
        QACompareOptions,
        qa_compare,
        help="paired significance test between two systems' answers to the same questions",
        description="Score two predictions files like qa-eval, pair the questions by id and test each "
        "per-question score with the evaluation toolkit's paired test; p-values are adjusted across the "
        "metrics tested. Pairing: " + QA_PAIRING_RULE + " (such ids are reported).",
        notify=True,
    ),
    Command(
        "rag-eval",
        RAGEvalOptions,
        rag_eval,
        help="score a RAG pipeline: context precision/recall, faithfulness, answer relevance and correctness",
        description=f"Score a JSONL file of RAG rows, one JSON object per line, e.g. {RAG_EXAMPLE_LINE}. "
        "ID-based metrics need no model; semantic similarity and the embedding forms of answer relevance and "
        "correctness use the embedding model; faithfulness, Ragas-style answer relevance, judged context "
        "recall and answer correctness need --judge. Definitions follow Ragas (see the README).",
        step=rag_eval_step,
        step_inputs=lambda o: {"data": o.data, **({"qrels": o.qrels} if o.qrels else {})},
        notify=True,
    ),
    Command(
        "rag-compare",
        RAGCompareOptions,
        rag_compare,
        help="paired significance tests between two RAG systems on the same questions",
        description="Score two RAG files like rag-eval, pair questions by id and test each metric with the "
        "evaluation toolkit's paired test; p-values are adjusted across the metrics. Pairing: "
        + PAIRING_RULE,
        notify=True,
    ),
)
