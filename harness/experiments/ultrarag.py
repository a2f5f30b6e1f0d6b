"""UltraRAG parameter files read as experiments, and the JSON shapes UltraRAG's evaluation server writes.

UltraRAG describes an evaluation as a pipeline (``pipeline: [evaluation.evaluate_trec]``) plus a parameter
file; the parameter file's ``evaluation`` section (and ``benchmark.benchmark`` for answers) is what matters
here. Each of its tools becomes the matching harness step, with UltraRAG's meaning:

- ``evaluate_trec`` -> an ``evaluate`` step: ``ks`` cut only ndcg, precision and recall (``ndcg@k``, ``p@k``,
  ``recall@k``); ``mrr`` and ``map`` are trec_eval's whole-ranking ``recip_rank`` and ``map``; averages
  over the queries present in both run and qrels (pytrec_eval's and the harness's default). Under the
  ``ultrarag`` profile (the default) the files are read as UltraRAG's ``_load_qrels`` / ``_load_run`` read
  them (``--input-rules ultrarag``: grade ``2.0`` is 1, ``0.0`` and ``0.5`` relevant, score ``0x1p-1`` 0,
  short lines skipped) and scores ranked in float32, as pytrec_eval ranks them: UltraRAG's numbers.
- ``evaluate_trec_pvalue`` -> a ``compare`` step: run_old is the baseline (B), run_new the system (A);
  UltraRAG tests with a two-sided paired sign-flip permutation test over the queries either run answered
  (a missing query scores 0) and calls p < 0.05 significant, uncorrected: the harness's permutation test
  with ``correction: none`` and ``alpha: 0.05`` is the same test.
- ``evaluate`` -> a ``qa-eval`` step on ``benchmark.benchmark.path`` with ``key_map.gt_ls`` / ``pred_ls``.

Two keys of the ``evaluation`` section are the harness's own (``--set evaluation.profile=harness``):
``profile`` (``ultrarag``, the default, or ``harness``: strict reading and float64 ranking, trec_eval 10's
numbers) and ``score_precision`` (``float64`` ranks as trec_eval 10 whatever the profile). The profile's
input rules and score precision are recorded in the step's settings and summary.

``save_path`` receives the JSON UltraRAG writes (its keys and spellings), the harness's fuller report is
written beside it as ``<stem>.harness.json``. UltraRAG appends a timestamp to the file name; the harness
writes ``save_path`` itself, so a second run finds (and reuses) it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import field_validator

from harness.core.config import Record, read_mapping, validate
from harness.core.errors import InputError
from harness.datasets.qrels import DEFAULT_DUPLICATES, DEFAULT_INPUT_RULES
from harness.evaluation.metrics import DEFAULT_SCORE_PRECISION, SCORE_PRECISIONS
from harness.qa.answers.profiles import PROFILE_NAMES

TREC_METRICS = ("mrr", "map", "recall", "ndcg", "precision")
DEFAULT_KS = (1, 5, 10, 20, 50, 100)
# evaluate_trec_pvalue's default list names "recip_rank", which its loop never matches: mrr is not tested.
DEFAULT_PVALUE_METRICS = ("recall", "ndcg", "precision", "map")
DEFAULT_RESAMPLES = 10_000
SIGNIFICANCE_LEVEL = 0.05
PAIRED_TEST = "permutation"  # UltraRAG's sign-flip test, whatever the harness's default
# UltraRAG's answer metric names -> the harness's score keys.
ANSWER_METRICS = {
    "acc": "acc",
    "f1": "f1",
    "em": "em",
    "coverem": "cover_em",
    "stringem": "string_em",
    "rouge-1": "rouge_1",
    "rouge-2": "rouge_2",
    "rouge-l": "rouge_l",
}
DEFAULT_ANSWER_METRICS = ("acc", "em", "stringem", "coverem", "f1", "rouge-1", "rouge-2", "rouge-l")
# The answer-metric profile reproducing UltraRAG's normalisation and metric definitions.
ANSWER_PROFILE = "ultrarag"
TOOLS = ("evaluate_trec", "evaluate_trec_pvalue", "evaluate")
# How the TREC tools read and rank, per profile: UltraRAG's own reading and pytrec_eval's float32 ranking,
# or the harness's defaults (trec_eval 10's numbers). Each is (input rules, score precision, duplicates).
TREC_PROFILES = {
    "ultrarag": ("ultrarag", "float32", "last"),  # UltraRAG's dicts keep the last line of a repeated pair
    "harness": (DEFAULT_INPUT_RULES, DEFAULT_SCORE_PRECISION, DEFAULT_DUPLICATES),
}
DEFAULT_TREC_PROFILE = "ultrarag"
_UPPER = {"p": "P"}


class EvaluationSection(Record):
    """The ``evaluation`` section of an UltraRAG parameter file (every tool's keys; each uses its own)."""

    ir_metrics: list[str] | None = None
    ks: list[int] | None = None
    qrels_path: str | None = None
    run_path: str | None = None
    run_new_path: str | None = None
    run_old_path: str | None = None
    n_resamples: int | None = None
    metrics: list[str] | None = None
    save_path: str | None = None
    profile: str = DEFAULT_TREC_PROFILE  # the harness's key: how the TREC tools read and rank
    score_precision: str | None = None  # the harness's key: overrides the profile's

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        if name not in TREC_PROFILES:
            raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(TREC_PROFILES)}")
        return name

    @field_validator("score_precision")
    @classmethod
    def _known_precision(cls, name: str | None) -> str | None:
        if name is not None and name not in SCORE_PRECISIONS:
            raise ValueError(f"unknown score precision {name!r}; choose one of {', '.join(SCORE_PRECISIONS)}")
        return name

    def trec_reading(self) -> dict[str, str]:
        """The TREC steps' input rules, score precision and duplicates policy under this section's profile."""
        rules, precision, duplicates = TREC_PROFILES[self.profile]
        return {
            "input_rules": rules,
            "score_precision": self.score_precision or precision,
            "qrels_duplicates": duplicates,
        }

    @field_validator("ir_metrics")
    @classmethod
    def _known_ir_metrics(cls, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        lowered = [name.lower() for name in names]
        unknown = [name for name in lowered if name not in TREC_METRICS]
        if unknown:
            raise ValueError(f"unknown metric {unknown[0]!r}; UltraRAG's are {', '.join(TREC_METRICS)}")
        return lowered

    @field_validator("metrics")
    @classmethod
    def _known_answer_metrics(cls, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        lowered = [name.lower() for name in names]
        unknown = [name for name in lowered if name not in ANSWER_METRICS]
        if unknown:
            raise ValueError(f"unknown metric {unknown[0]!r}; UltraRAG's are {', '.join(ANSWER_METRICS)}")
        return lowered


class BenchmarkData(Record):
    """``benchmark.benchmark``: the data file and which of its keys hold the gold answers and predictions."""

    path: str
    key_map: dict[str, str]
    name: str | None = None
    limit: int = -1
    seed: int | None = None
    shuffle: bool = False

    @field_validator("key_map")
    @classmethod
    def _has_answer_keys(cls, key_map: dict[str, str]) -> dict[str, str]:
        missing = [key for key in ("gt_ls", "pred_ls") if key not in key_map]
        if missing:
            raise ValueError(
                f"key_map needs {' and '.join(missing)} (the gold answers' and predictions' keys)"
            )
        return key_map


class BenchmarkSection(Record):
    benchmark: BenchmarkData


def answer_profiles() -> tuple[str, ...]:
    """The answer-metric profiles the harness knows (harness.qa.answers.profiles)."""
    return PROFILE_NAMES


def is_ultrarag(document: Any) -> bool:
    """An UltraRAG parameter file (an ``evaluation`` section) or pipeline file, not a harness experiment."""
    return (
        isinstance(document, dict)
        and "steps" not in document
        and ("evaluation" in document or "pipeline" in document)
    )


def parameter_document(path: Path, document: dict[str, Any]) -> tuple[Path, dict[str, Any], list[str] | None]:
    """``(parameter file, its mapping, the evaluation tools its pipeline lists or None)``.

    A pipeline file (``pipeline: [...]``) names its parameters as UltraRAG's build does:
    ``parameters/<stem>_parameter.yaml`` beside it.
    """
    if "pipeline" not in document:
        return path, document, None
    tools = []
    for entry in document.get("pipeline") or []:
        server, _, tool = str(entry).partition(".")
        if server == "evaluation" and tool in TOOLS:
            tools.append(tool)
        elif server != "benchmark":
            raise InputError(
                path, None, f"pipeline step {entry!r} is not an evaluation tool the harness runs"
            )
    parameters = path.parent / "parameters" / f"{path.stem}_parameter.yaml"
    if not parameters.is_file():
        raise InputError(path, None, f"no parameter file {parameters}", "run `ultrarag build` or write it")
    return parameters, read_mapping(parameters), tools


def trec_metric_names(ir_metrics: Sequence[str], ks: Sequence[int]) -> list[str]:
    """Harness metric names for UltraRAG's ``ir_metrics`` x ``ks``: ks cut ndcg, precision, recall only."""
    names: list[str] = []
    for metric in ir_metrics:
        if metric in ("mrr", "map"):
            names.append(metric)
        else:
            family = "p" if metric == "precision" else metric
            names += [f"{family}@{k}" for k in ks]
    return names


def ultrarag_metric_name(name: str) -> str:
    """``p@10`` -> ``P@10`` (UltraRAG keeps pytrec_eval's ``P``); ``ndcg@10``, ``recall@10``, ``map``, ``mrr`` as they are."""
    family, at, cutoff = name.partition("@")
    return f"{_UPPER.get(family, family)}{at}{cutoff}"


def steps_from_parameters(path: Path, document: dict[str, Any]) -> list[dict[str, Any]]:
    """The harness steps an UltraRAG parameter (or pipeline) file stands for."""
    path, document, tools = parameter_document(path, document)
    evaluation = validate(EvaluationSection, document.get("evaluation") or {}, path, "evaluation")
    if tools is None:  # a parameter file alone: every tool whose keys are given
        tools = [
            tool
            for tool, given in (
                ("evaluate_trec", evaluation.run_path),
                ("evaluate_trec_pvalue", evaluation.run_new_path or evaluation.run_old_path),
                ("evaluate", evaluation.metrics is not None or "benchmark" in document),
            )
            if given
        ]
    if not tools:
        raise InputError(path, None, "evaluation: nothing to run", "give run_path, run_new_path or metrics")
    return [_STEP_BUILDERS[tool](path, document, evaluation) for tool in tools]


def _need(path: Path, evaluation: EvaluationSection, tool: str, *keys: str) -> None:
    missing = [key for key in keys if getattr(evaluation, key) is None]
    if missing:
        raise InputError(path, None, f"evaluation: {tool} needs {', '.join(missing)}")


def _evaluate_trec(path: Path, document: dict[str, Any], evaluation: EvaluationSection) -> dict[str, Any]:
    _need(path, evaluation, "evaluate_trec", "qrels_path", "run_path", "save_path")
    metrics = trec_metric_names(evaluation.ir_metrics or TREC_METRICS, evaluation.ks or DEFAULT_KS)
    return {
        "id": "evaluate_trec",
        "kind": "evaluate",
        "qrels": evaluation.qrels_path,
        "run": evaluation.run_path,
        "metrics": metrics,
        "per_query": True,
        **evaluation.trec_reading(),
        "ultrarag_save_path": evaluation.save_path,
    }


def _evaluate_trec_pvalue(
    path: Path, document: dict[str, Any], evaluation: EvaluationSection
) -> dict[str, Any]:
    _need(path, evaluation, "evaluate_trec_pvalue", "qrels_path", "run_new_path", "run_old_path", "save_path")
    ir_metrics = evaluation.ir_metrics or DEFAULT_PVALUE_METRICS
    return {
        "id": "evaluate_trec_pvalue",
        "kind": "compare",
        "qrels": evaluation.qrels_path,
        "baseline": evaluation.run_old_path,
        "others": [evaluation.run_new_path],
        "metrics": trec_metric_names(ir_metrics, evaluation.ks or DEFAULT_KS),
        **evaluation.trec_reading(),
        "test": PAIRED_TEST,
        "n_resamples": evaluation.n_resamples or DEFAULT_RESAMPLES,
        "alpha": SIGNIFICANCE_LEVEL,
        "correction": "none",
        "ultrarag_save_path": evaluation.save_path,
    }


def _evaluate(path: Path, document: dict[str, Any], evaluation: EvaluationSection) -> dict[str, Any]:
    _need(path, evaluation, "evaluate", "save_path")
    if "benchmark" not in document:
        raise InputError(path, None, "evaluate needs a benchmark section (benchmark.benchmark.path, key_map)")
    data = validate(BenchmarkSection, document["benchmark"], path, "benchmark").benchmark
    if data.limit != -1 or data.shuffle:
        raise InputError(path, None, "benchmark.benchmark: only limit -1 and shuffle false are supported")
    names = evaluation.metrics or DEFAULT_ANSWER_METRICS
    return {
        "id": "evaluate",
        "kind": "qa-eval",
        "predictions": data.path,
        "gold_key": data.key_map["gt_ls"],
        "pred_key": data.key_map["pred_ls"],
        "metrics": [ANSWER_METRICS[name] for name in names],
        "per_question": True,
        "profile": ANSWER_PROFILE,
        "ultrarag_save_path": evaluation.save_path,
    }


_STEP_BUILDERS = {
    "evaluate_trec": _evaluate_trec,
    "evaluate_trec_pvalue": _evaluate_trec_pvalue,
    "evaluate": _evaluate,
}


# ------------------------------------------------------------------------- UltraRAG's result files


def trec_results(aggregate: Mapping[str, float]) -> dict[str, float]:
    """evaluate_trec's JSON: ``map``, ``mrr``, then per cutoff ``ndcg@k``, ``P@k``, ``recall@k``."""
    ordered = {name: aggregate[name] for name in ("map", "mrr") if name in aggregate}
    cutoffs = sorted({int(name.split("@")[1]) for name in aggregate if "@" in name})
    for k in cutoffs:
        for family in ("ndcg", "p", "recall"):
            if f"{family}@{k}" in aggregate:
                ordered[ultrarag_metric_name(f"{family}@{k}")] = aggregate[f"{family}@{k}"]
    return ordered


def pvalue_results(comparisons: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """evaluate_trec_pvalue's JSON: per metric A (new) and B (old) means, ``diff`` = A - B, p, significant."""
    return {
        ultrarag_metric_name(row["metric"]): {
            "A_mean": row["mean_system"],
            "B_mean": row["mean_baseline"],
            "diff": row["difference"],
            "p_value": row["p_value"],
            "significant": bool(row["p_value"] < SIGNIFICANCE_LEVEL),
        }
        for row in comparisons
    }


def answer_results(keys: Sequence[str], per_question: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """evaluate's JSON: each metric's per-question scores (file order), then ``avg_<metric>``."""
    names = {harness: ultrarag for ultrarag, harness in ANSWER_METRICS.items()}
    lists = {names.get(key, key): [row[key] for row in per_question] for key in keys}
    averages = {
        f"avg_{name}": (sum(values) / len(values) if values else 0.0) for name, values in lists.items()
    }
    return {**lists, **averages}


def beside(save_path: str | Path) -> Path:
    """Where the harness's fuller report goes next to UltraRAG's ``save_path``."""
    save_path = Path(save_path)
    return save_path.with_name(f"{save_path.stem}.harness.json")
