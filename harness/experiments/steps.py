"""The step kinds of an experiment: each takes its command's options and calls the stage functions.

A step's options are spelled as its command's options (``top_k`` or ``top-k`` for ``--top-k``; positional
arguments by their name: ``qrels``, ``run``, ``baseline``, ``others``, ``predictions``, ``suite``,
``results_dir``) with the command's defaults; ``tests/test_experiments.py`` checks every schema against
its command's parser. Outputs go to the step's folder instead of ``--output``.

Adding a step kind is one schema, one function and one :data:`STEP_KINDS` entry. ``inputs`` names the
files a step reads: such a step is reused when its options and those files' checksums are unchanged.
Steps without it (``eval``, ``reproduce``) rely on the pipeline's own result cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import field_validator, model_validator

from harness.core.config import Record
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write, atomic_write_json, describe_inputs
from harness.core.paths import default_cache_dir, default_results_dir
from harness.datasets.qrels import DEFAULT_DUPLICATES, DUPLICATE_POLICIES, read_qrels
from harness.evaluation.comparison import COMPARE_METRICS, SignificanceSettings, compare_runs
from harness.evaluation.metrics import (
    DEFAULT_SCORE_PRECISION,
    EVALUATE_FAMILIES,
    HEADLINE_METRICS,
    PIPELINE_KS,
    PIPELINE_METRICS,
    SCORE_PRECISIONS,
    evaluate,
)
from harness.evaluation.significance import CORRECTIONS, TESTS
from harness.evaluation.trec import read_run, run_labels
from harness.experiments import ultrarag
from harness.pipeline import EvalOptions, check_inputs, run_eval, run_pairs
from harness.qa.answers.answer_metrics import QAScorer, resolve_metrics
from harness.qa.answers.answer_report import evaluation_report
from harness.qa.answers.predictions import read_predictions
from harness.qa.answers.profiles import DEFAULT_PROFILE
from harness.qa.rag.rag_stage import RAGRunSettings, evaluate_rag_file
from harness.qa.rag.rows import RAGKeys
from harness.report.charts import write_charts
from harness.report.formats import FORMATS, render
from harness.report.html import write_report
from harness.report.tables import TableSet, build_tables
from harness.reproduce.suites import format_markdown, load_suite, run_suite
from harness.results.collect import collect_results
from harness.results.result_store import StoredResult, iter_result_dirs
from harness.retrieval.fusion import DEFAULT_RRF_K
from harness.retrieval.rerank import DEFAULT_RERANK_DEPTH
from harness.retrieval.systems import SYSTEM_OPTIONS, SystemRecord, systems_from_options


class StepOptions(Record):
    """Options of one step: unknown keys are errors; values listed in ``CHOICES`` are checked (each class
    lists the choices of the fields it declares; a step checks those of all its bases)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}

    @model_validator(mode="before")
    @classmethod
    def _dashes_as_underscores(cls, data: Any) -> Any:
        """``top-k`` (the option as typed on the command line) is ``top_k``."""
        if isinstance(data, dict):
            return {str(key).replace("-", "_"): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _checked_choices(self) -> StepOptions:
        choices_of = {
            name: choices
            for klass in reversed(type(self).__mro__)
            for name, choices in vars(klass).get("CHOICES", {}).items()
        }
        for name, choices in choices_of.items():
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise ValueError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        return self


def _as_list(value: Any) -> Any:
    """A single name where the command takes several (``dataset: scifact``) is a list of one."""
    return [value] if isinstance(value, str | int) else value


_SIGNIFICANCE = SignificanceSettings()  # the commands' defaults: one home


class SignificanceOptions(StepOptions):
    """``--test --n-resamples --seed --alpha --correction``."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"test": TESTS, "correction": CORRECTIONS}
    test: str = _SIGNIFICANCE.test
    n_resamples: int = _SIGNIFICANCE.n_resamples
    seed: int = _SIGNIFICANCE.seed
    alpha: float = _SIGNIFICANCE.alpha
    correction: str = _SIGNIFICANCE.correction

    def significance(self) -> SignificanceSettings:
        return SignificanceSettings(
            test=self.test,
            n_resamples=self.n_resamples,
            seed=self.seed,
            alpha=self.alpha,
            correction=self.correction,
        ).validate()


class ScoringOptions(StepOptions):
    """How runs are scored, as ``eval``, ``evaluate`` and ``compare`` take it: ``--ks --relevance-level
    --complete --score-precision --qrels-duplicates``."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "qrels_duplicates": DUPLICATE_POLICIES,
        "score_precision": SCORE_PRECISIONS,
    }
    ks: list[int] | None = None
    relevance_level: int = 1
    complete: bool = False
    score_precision: str = DEFAULT_SCORE_PRECISION
    qrels_duplicates: str = DEFAULT_DUPLICATES


class PipelineOptions(ScoringOptions):
    """The options of ``harness eval`` / ``reproduce`` (``add_eval_arguments``); folders default to env."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"executor": ("local", "ray")}
    split: str | None = None
    top_k: int = 1000
    batch_size: int = 128
    device: str | None = None
    index: str = "Flat"
    results_dir: str | None = None
    data_dir: str | None = None
    cache_dir: str | None = None
    mirror: str | None = None
    drop_identical_ids: bool | None = None
    metrics: list[str] = list(PIPELINE_METRICS)
    strict: bool = False
    trust_remote_code: bool = False
    shard_size: int | None = None
    force: bool = False
    no_progress: bool = False
    runtime: str | None = None
    precision: str | None = None
    int8: str | None = None
    workers: int | None = None
    devices: str | None = None
    executor: str = "local"
    ray_address: str | None = None

    def eval_options(self) -> EvalOptions:
        return EvalOptions.from_command_options(self.model_dump())


class EvalStep(PipelineOptions):
    """``harness eval``: every dataset x model (or system) pair; ``fuse``/``rerank`` make systems as the
    command's options do (a system record's name in ``model`` works too)."""

    dataset: list[str]
    model: list[str]
    fuse: str | None = None
    rrf_k: int = DEFAULT_RRF_K
    norm: str | None = None
    weights: list[float] | None = None
    fuse_depth: int | None = None
    rerank: str | None = None
    rerank_depth: int = DEFAULT_RERANK_DEPTH
    rerank_max_length: int | None = None

    def systems(self) -> list[str | SystemRecord]:
        return systems_from_options(self.model, **{name: getattr(self, name) for name in SYSTEM_OPTIONS})

    @field_validator("dataset", "model", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)


class ReproduceStep(PipelineOptions):
    """``harness reproduce SUITE``."""

    suite: str
    references: str | None = None


class EvaluateStep(ScoringOptions):
    """``harness evaluate QRELS RUN``; ``ultrarag_save_path`` also writes UltraRAG's evaluate_trec JSON."""

    qrels: str
    run: str
    metrics: list[str] | None = None  # None: the command's default families at its default cut-offs
    no_diagnostics: bool = False
    per_query: bool = False
    ultrarag_save_path: str | None = None


class CompareStep(SignificanceOptions, ScoringOptions):
    """``harness compare QRELS RUN_A RUN_B..``; ``ultrarag_save_path`` also writes evaluate_trec_pvalue's JSON."""

    qrels: str
    baseline: str
    others: list[str]
    metrics: list[str] = list(COMPARE_METRICS)
    ultrarag_save_path: str | None = None

    @field_validator("others", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)


class QAEvalStep(StepOptions):
    """``harness qa-eval PRED.jsonl``; ``profile`` picks the answer-metric definitions (default squad)."""

    predictions: str
    gold_key: str = "golden_answers"
    pred_key: str = "pred_answer"
    id_key: str = "id"
    choices_key: str = "choices"
    no_synonyms: bool = False
    metrics: list[str] | None = None  # None: every metric
    per_question: bool = False
    profile: str = DEFAULT_PROFILE
    ultrarag_save_path: str | None = None

    @field_validator("metrics", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, profile: str) -> str:
        if profile not in ultrarag.answer_profiles():
            raise ValueError(
                f"unknown answer-metric profile {profile!r}; choose {', '.join(ultrarag.answer_profiles())}"
            )
        return profile


class ResultsViewOptions(SignificanceOptions):
    """What ``table`` and ``report`` show of a results folder: which cells, against which baseline."""

    results_dir: str | None = None
    metrics: list[str] = list(HEADLINE_METRICS)
    datasets: list[str] | None = None
    models: list[str] | None = None
    baseline: str | None = None
    digits: int = 4


class TableStep(ResultsViewOptions):
    """``harness table [RESULTS]``."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"format": (*FORMATS, "png")}
    format: str = "md"
    ci: bool = False


class ReportStep(ResultsViewOptions):
    """``harness report [RESULTS]``."""

    title: str = "Retrieval benchmark report"



_RAG_DEFAULTS = RAGRunSettings()
_RAG_KEYS = RAGKeys()


class RAGEvalStep(StepOptions):
    """``harness rag-eval DATA.jsonl``: context and answer metrics of a RAG pipeline's rows."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"qrels_duplicates": DUPLICATE_POLICIES}
    data: str
    per_question: bool = False
    id_key: str = _RAG_KEYS.id
    question_key: str = _RAG_KEYS.question
    answer_key: str = _RAG_KEYS.answer
    contexts_key: str = _RAG_KEYS.contexts
    ground_truth_key: str = _RAG_KEYS.ground_truth
    context_ids_key: str = _RAG_KEYS.context_ids
    reference_ids_key: str = _RAG_KEYS.reference_ids
    qrels: str | None = None
    relevance_level: int = _RAG_DEFAULTS.relevance_level
    qrels_duplicates: str = _RAG_DEFAULTS.qrels_duplicates
    metrics: list[str] | None = None
    embedding_model: str = _RAG_DEFAULTS.embedding_model
    cache_dir: str | None = None
    judge: bool = False
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key: str | None = None
    judge_repeats: int = _RAG_DEFAULTS.judge_repeats
    judge_timeout: float = _RAG_DEFAULTS.judge_timeout
    judge_retries: int = _RAG_DEFAULTS.judge_retries
    judge_backoff: float = _RAG_DEFAULTS.judge_backoff
    judge_rps: float | None = None
    judge_temperature: float | None = None

    @field_validator("metrics", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)

    def settings(self) -> RAGRunSettings:
        """The stage's settings, as ``harness rag-eval`` builds them from its options."""
        options = self.model_dump()
        keys = RAGKeys(**{name: options[f"{name}_key"] for name in _RAG_KEYS.to_json()})
        chosen = {
            name: options[name]
            for name in ("relevance_level", "qrels_duplicates", "metrics", "embedding_model", "judge")
        }
        judge = {name: value for name, value in options.items() if name.startswith("judge_")}
        return RAGRunSettings(
            keys=keys,
            qrels=Path(self.qrels) if self.qrels else None,
            cache_dir=Path(self.cache_dir) if self.cache_dir else default_cache_dir(),
            **chosen,
            **judge,
        )

@dataclass
class StepResult:
    """What a step did: the files it wrote, lines for the console, whether it reused everything."""

    outputs: list[Path]
    summary: list[str] = field(default_factory=list)
    reused: bool = False
    exit_code: int = 0


# --------------------------------------------------------------------------------------------- runners


def _eval(options: EvalStep, directory: Path) -> StepResult:
    eval_options, systems = options.eval_options(), options.systems()
    check_inputs(options.dataset, systems, eval_options)
    outcomes, failures = run_pairs(options.dataset, systems, eval_options)
    if failures:
        raise HarnessError("; ".join(failures))
    results = [outcome.result for outcome in outcomes]
    output = directory / "results.json"
    atomic_write_json(output, {"results": [_result_summary(result) for result in results]})
    summary = [
        f"{result.dataset} x {result.model}: "
        + ", ".join(
            f"{name} {result.metrics[name]:.4f}" for name in HEADLINE_METRICS if name in result.metrics
        )
        + (" (reused)" if result.reused else "")
        for result in results
    ]
    return StepResult([output], summary, reused=all(result.reused for result in results))


def _result_summary(result: StoredResult) -> dict[str, Any]:
    return {
        "dataset": result.dataset,
        "model": result.model,
        "directory": str(result.directory),
        "run": str(result.run_path),
        "reused": result.reused,
        "metrics": {name: result.metrics[name] for name in HEADLINE_METRICS if name in result.metrics},
    }


def _evaluate(options: EvaluateStep, directory: Path) -> StepResult:
    qrels = read_qrels(options.qrels, duplicates=options.qrels_duplicates).qrels
    metrics = options.metrics or list(EVALUATE_FAMILIES)
    ks = options.ks if options.ks or options.metrics else list(PIPELINE_KS)  # the command's default
    result = evaluate(
        qrels,
        read_run(options.run),
        metrics,
        ks=ks,
        relevance_level=options.relevance_level,
        complete=options.complete,
        score_precision=options.score_precision,
        diagnose=not options.no_diagnostics,
    )
    inputs = describe_inputs({"qrels": options.qrels, "run": options.run})
    payload = {"inputs": inputs, **result.to_json(options.per_query)}
    outputs = [directory / "evaluation.json"]
    atomic_write_json(outputs[0], payload)
    if options.ultrarag_save_path:
        outputs += _write_ultrarag(
            options.ultrarag_save_path, ultrarag.trec_results(result.aggregate), payload
        )
    summary = [", ".join(f"{name} {value:.4f}" for name, value in result.aggregate.items())]
    summary.append(f"averaged over {result.n_queries} queries present in both run and qrels")
    return StepResult(outputs, summary)


def _compare(options: CompareStep, directory: Path) -> StepResult:
    paths = [options.baseline, *options.others]
    labels = run_labels(paths)
    if len(set(labels)) != len(labels):
        raise HarnessError("the same run file is given twice")
    result = compare_runs(
        read_qrels(options.qrels, duplicates=options.qrels_duplicates).qrels,
        {label: read_run(path) for label, path in zip(labels, paths, strict=True)},
        options.metrics,
        ks=options.ks,
        settings=options.significance(),
        relevance_level=options.relevance_level,
        complete=options.complete,
        score_precision=options.score_precision,
    )
    files = {
        "qrels": options.qrels,
        **{f"run:{label}": path for label, path in zip(labels, paths, strict=True)},
    }
    payload = {"inputs": describe_inputs(files), **result}
    outputs = [directory / "comparison.json"]
    atomic_write_json(outputs[0], payload)
    if options.ultrarag_save_path:
        shaped = ultrarag.pvalue_results(result["comparisons"])
        outputs += _write_ultrarag(options.ultrarag_save_path, shaped, payload)
    summary = [
        f"baseline {result['baseline']}; {result['n_queries']} paired queries; {options.significance().describe()}"
    ]
    summary += [
        f"{row['metric']} {row['system']} {row['mean_system']:.4f} vs {row['mean_baseline']:.4f}: "
        f"diff {row['difference']:+.4f}, p {row['p_value']:.4f}{', significant' if row['significant'] else ''}"
        for row in result["comparisons"]
    ]
    return StepResult(outputs, summary)


def _qa_eval(options: QAEvalStep, directory: Path) -> StepResult:
    qa_file = read_predictions(
        options.predictions,
        gold_key=options.gold_key,
        pred_key=options.pred_key,
        id_key=options.id_key,
        choices_key=options.choices_key,
    )
    keys = resolve_metrics(options.metrics)
    scorer = QAScorer(keys, synonyms=not options.no_synonyms, profile=options.profile)
    result = scorer.evaluate(qa_file.records)
    names = {"id": options.id_key, "gold": options.gold_key, "prediction": options.pred_key}
    report = evaluation_report(qa_file, scorer, result, names, per_question=options.per_question)
    outputs = [directory / "qa.json"]
    atomic_write_json(outputs[0], report)
    if options.ultrarag_save_path:
        rows = [result.per_question[record.qid] for record in qa_file.records]
        outputs += _write_ultrarag(options.ultrarag_save_path, ultrarag.answer_results(keys, rows), report)
    summary = [f"{len(qa_file.records)} questions; profile {options.profile}"]
    summary.append(", ".join(f"{name} {value:.4f}" for name, value in result.aggregate.items()))
    return StepResult(outputs, summary)


def _rag_eval(options: RAGEvalStep, directory: Path) -> StepResult:
    report = evaluate_rag_file(options.data, options.settings(), per_question=options.per_question)
    output = directory / "rag.json"
    atomic_write_json(output, report.to_json())
    rows = report.table_rows()
    summary = [
        *(str(notice) for notice in report.notices),
        report.summary_line(),
        *("  ".join(row) for row in rows),
        *report.provenance_lines(),
    ]
    return StepResult([output], summary)


def _write_ultrarag(save_path: str, shaped: dict[str, Any], fuller: dict[str, Any]) -> list[Path]:
    """UltraRAG's JSON at ``save_path`` (its indent of 4) and the harness's report beside it."""
    path = Path(save_path)
    with atomic_write(path) as handle:
        json.dump(shaped, handle, ensure_ascii=False, indent=4)
    atomic_write_json(ultrarag.beside(path), fuller)
    return [path, ultrarag.beside(path)]


def _tableset(options: TableStep | ReportStep, *, ci: bool) -> tuple[Path, TableSet, list[str]]:
    results_dir = Path(options.results_dir) if options.results_dir else default_results_dir()
    collection = collect_results(results_dir)
    tableset = build_tables(
        collection,
        options.metrics,
        datasets=options.datasets,
        models=options.models,
        baseline=options.baseline,
        significance=options.significance(),
        digits=options.digits,
        ci=ci,
    )
    return (
        results_dir,
        tableset,
        [f"warning: skipped {path}: {reason}" for path, reason in collection.skipped],
    )


def _table(options: TableStep, directory: Path) -> StepResult:
    results_dir, tableset, warnings = _tableset(options, ci=options.ci)
    if options.format == "png":
        return StepResult(write_charts(tableset, directory / "charts"), warnings)
    text = render(tableset, options.format)
    output = directory / f"table.{options.format}"
    with atomic_write(output) as handle:
        handle.write(text)
    return StepResult([output], [*warnings, *text.rstrip("\n").splitlines()])


def _report(options: ReportStep, directory: Path) -> StepResult:
    results_dir, tableset, warnings = _tableset(options, ci=True)  # as the command: intervals always
    output = write_report(tableset, directory / "report.html", title=options.title, results_dir=results_dir)
    return StepResult([output], warnings)


def _reproduce(options: ReproduceStep, directory: Path) -> StepResult:
    suite = load_suite(options.suite, options.references)
    results: list[StoredResult] = []

    def recording_run_eval(dataset: str, model: str, eval_options: EvalOptions) -> StoredResult:
        results.append(run_eval(dataset, model, eval_options))
        return results[-1]

    report = run_suite(suite, options.eval_options(), run_eval=recording_run_eval)
    output = directory / "reproduce.md"
    with atomic_write(output) as handle:
        handle.write(format_markdown(report))
    summary = [f"{status}: {report.count(status)}" for status in ("OK", "MISS", "SKIPPED")]
    return StepResult([output], summary, reused=all(r.reused for r in results), exit_code=report.exit_code)


# ------------------------------------------------------------------------------------------ the registry


def _results_files(options: TableStep | ReportStep) -> dict[str, Path]:
    """Every result's metrics and provenance below the results folder: a table's whole input."""
    root = Path(options.results_dir) if options.results_dir else default_results_dir()
    files: dict[str, Path] = {}
    for folder in iter_result_dirs(root) if root.is_dir() else []:
        for name in ("metrics.json", "provenance.json"):
            if (folder / name).is_file():
                files[str(folder / name)] = folder / name
    return files


@dataclass(frozen=True)
class StepKind:
    """One kind of step: its command, the schema of its options, what it runs, what it reads."""

    name: str
    options: type[StepOptions]
    run: Callable[[Any, Path], StepResult]
    inputs: Callable[[Any], dict[str, str | Path]] | None = None  # None: the stage's own cache decides
    command: str = ""

    @property
    def command_name(self) -> str:
        return self.command or self.name


STEP_KINDS: dict[str, StepKind] = {
    kind.name: kind
    for kind in (
        StepKind("eval", EvalStep, _eval),
        StepKind("evaluate", EvaluateStep, _evaluate, lambda o: {"qrels": o.qrels, "run": o.run}),
        StepKind(
            "compare",
            CompareStep,
            _compare,
            lambda o: {"qrels": o.qrels, **{f"run{i}": p for i, p in enumerate([o.baseline, *o.others])}},
        ),
        StepKind("qa-eval", QAEvalStep, _qa_eval, lambda o: {"predictions": o.predictions}),
        StepKind(
            "rag-eval",
            RAGEvalStep,
            _rag_eval,
            lambda o: {"data": o.data, **({"qrels": o.qrels} if o.qrels else {})},
        ),
        StepKind("table", TableStep, _table, _results_files),
        StepKind("report", ReportStep, _report, _results_files),
        StepKind("reproduce", ReproduceStep, _reproduce),
    )
}
