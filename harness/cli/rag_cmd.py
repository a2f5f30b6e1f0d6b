"""``harness rag-eval`` and ``harness rag-compare``: score retrieved contexts and answers, compare two systems."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli.common import (
    add_qrels_duplicates_argument,
    add_significance_arguments,
    positive_int,
    significance_settings,
)
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, file_digest
from harness.core.paths import default_cache_dir
from harness.datasets.qrels import read_qrels
from harness.models.registry import DEFAULT_MODEL
from harness.qa.judge import (
    API_KEY_ENV,
    BASE_URL_ENV,
    MODEL_ENV,
    REPEAT_TEMPERATURE,
    SINGLE_TEMPERATURE,
    JudgeClient,
    JudgeSettings,
    env_value,
)
from harness.qa.rag import (
    JUDGE_METRICS,
    METRICS,
    PAIRING_RULE,
    RAGFile,
    RAGKeys,
    check_fields,
    compare_scores,
    default_metrics,
    read_rag_file,
    resolve_rag_metrics,
)
from harness.qa.rag_embed import TextEmbedder
from harness.qa.rag_eval import RAGEvaluation, RAGEvaluator

_EXAMPLE_LINE = (
    '{"id": "q1", "question": "...", "answer": "...", "contexts": ["..."], "ground_truth": "...", '
    '"context_ids": ["d3", "d7"], "reference_context_ids": ["d7"]}'
)
_METRICS_HELP = (
    f"comma-separated metrics ({', '.join(METRICS)}) or groups (ids, embedding, judge, all); default: every "
    "metric the file's fields allow, judged ones only with --judge"
)


def _add_input_options(parser: argparse.ArgumentParser) -> None:
    keys = parser.add_argument_group("fields", "JSON keys of each line's fields")
    for name, default in RAGKeys().to_json().items():
        keys.add_argument(
            f"--{name.replace('_', '-')}-key",
            dest=f"{name}_key",
            default=default,
            help=f"(default: {default})",
        )
    relevance = parser.add_argument_group("relevance", "which retrieved ids are relevant")
    relevance.add_argument(
        "--qrels",
        type=Path,
        help="judgments (TREC or BEIR qrels) in place of reference_context_ids; context_ids are then the "
        "ranked retrieved doc ids and a question's id is its query id",
    )
    relevance.add_argument("--relevance-level", type=int, default=1, help="minimum grade counted as relevant")
    add_qrels_duplicates_argument(relevance)
    parser.add_argument("--metrics", action="append", default=None, help=_METRICS_HELP)
    parser.add_argument(
        "--embedding-model",
        default=DEFAULT_MODEL,
        help="registry name, alias or model folder of the embedding model (default: %(default)s, offline)",
    )
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(), help="env HARNESS_CACHE_DIR")
    judge = parser.add_argument_group("judge", "an OpenAI-compatible chat endpoint, used only with --judge")
    judge.add_argument("--judge", action="store_true", help="score the judged metrics (each call is cached)")
    judge.add_argument(
        "--judge-base-url", help=f"e.g. http://127.0.0.1:8000/v1 (env {' / '.join(BASE_URL_ENV)})"
    )
    judge.add_argument("--judge-model", help=f"model name the server knows (env {' / '.join(MODEL_ENV)})")
    judge.add_argument(
        "--judge-api-key", help=f"bearer key, if the server wants one (env {' / '.join(API_KEY_ENV)})"
    )
    judge.add_argument(
        "--judge-repeats", type=positive_int, default=1, help="ask N times; report mean and spread"
    )
    judge.add_argument("--judge-timeout", type=float, default=60.0, help="seconds per request (default: 60)")
    judge.add_argument(
        "--judge-retries", type=int, default=3, help="retries on timeout, 429, 5xx (default: 3)"
    )
    judge.add_argument(
        "--judge-backoff", type=float, default=1.0, help="first retry delay, doubled each time"
    )
    judge.add_argument("--judge-rps", type=float, default=None, help="at most this many requests per second")
    judge.add_argument(
        "--judge-temperature",
        type=float,
        default=None,
        help=f"sampling temperature (default: {SINGLE_TEMPERATURE} with one repeat, {REPEAT_TEMPERATURE} with several)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "rag-eval",
        help="score a RAG pipeline: context precision/recall, faithfulness, answer relevance and correctness",
        description="Score a JSONL file of RAG rows, one JSON object per line, e.g. " + _EXAMPLE_LINE + ". "
        "ID-based metrics need no model; semantic similarity and the embedding forms of answer relevance and "
        "correctness use the embedding model; faithfulness, Ragas-style answer relevance, judged context "
        "recall and answer correctness need --judge. Definitions follow Ragas (see the README).",
    )
    evaluate.add_argument("data", type=Path, metavar="DATA.jsonl", help="JSONL file of RAG rows")
    _add_input_options(evaluate)
    evaluate.add_argument("--per-question", action="store_true", help="also give every question's scores")
    evaluate.add_argument("--output", type=Path, default=None, help="write the full report to this JSON file")
    evaluate.set_defaults(func=run_eval)

    compare = subparsers.add_parser(
        "rag-compare",
        help="paired significance tests between two RAG systems on the same questions",
        description="Score two RAG files like rag-eval, pair questions by id and test each metric with the "
        "evaluation toolkit's paired test; p-values are adjusted across the metrics. Pairing: "
        + PAIRING_RULE,
    )
    compare.add_argument("system_a", type=Path, metavar="A.jsonl", help="RAG rows of system A (the baseline)")
    compare.add_argument("system_b", type=Path, metavar="B.jsonl", help="RAG rows of system B")
    _add_input_options(compare)
    add_significance_arguments(
        compare, correction_scope="the metrics tested; the CI is at 1 - alpha, unadjusted"
    )
    compare.add_argument("--output", type=Path, default=None, help="write the comparison to this JSON file")
    compare.set_defaults(func=run_compare)


# ---- shared steps --------------------------------------------------------------------------------


def _keys(args: argparse.Namespace) -> RAGKeys:
    return RAGKeys(**{name: getattr(args, f"{name}_key") for name in RAGKeys().to_json()})


def _read(path: Path, args: argparse.Namespace) -> RAGFile:
    qrels = read_qrels(args.qrels, duplicates=args.qrels_duplicates).qrels if args.qrels else None
    rag_file = read_rag_file(
        path, _keys(args), qrels=qrels, qrels_path=args.qrels, relevance_level=args.relevance_level
    )
    if rag_file.empty_answers:
        print(f"warning: {path}: {rag_file.empty_answers} empty answer(s), scored 0", file=sys.stderr)
    if rag_file.duplicates:
        qid, first, repeated = rag_file.duplicates[0]
        print(
            f"warning: {path}: {len(rag_file.duplicates)} repeated id(s), e.g. {qid!r} on lines {first} and "
            f"{repeated}; kept each id's first line",
            file=sys.stderr,
        )
    return rag_file


def _judge_settings(args: argparse.Namespace) -> JudgeSettings:
    base_url = args.judge_base_url or env_value(BASE_URL_ENV)
    if not base_url:
        raise HarnessError(
            "--judge needs the server's base URL: --judge-base-url http://127.0.0.1:8000/v1 or "
            "HARNESS_JUDGE_BASE_URL / OPENAI_BASE_URL"
        )
    temperature = args.judge_temperature
    if temperature is None:
        temperature = SINGLE_TEMPERATURE if args.judge_repeats == 1 else REPEAT_TEMPERATURE
    return JudgeSettings(
        base_url=base_url,
        model=args.judge_model or env_value(MODEL_ENV) or "",
        api_key=args.judge_api_key or env_value(API_KEY_ENV),
        timeout=args.judge_timeout,
        retries=args.judge_retries,
        backoff=args.judge_backoff,
        max_rps=args.judge_rps,
        temperature=temperature,
    ).validate()


def _evaluator(args: argparse.Namespace, files: list[RAGFile]) -> RAGEvaluator:
    metrics = resolve_rag_metrics(args.metrics)
    if metrics is None:
        metrics = _default_metrics(files, judge=args.judge)
    if not metrics:
        raise HarnessError(
            f"{files[0].path}: no metric can be computed from its fields; see --help for the keys"
        )
    judged = [m for m in metrics if m in JUDGE_METRICS]
    if judged and not args.judge:
        raise HarnessError(f"{', '.join(judged)} need a judge model; add --judge (see --help)")
    keys = _keys(args)
    for rag_file in files:
        check_fields(rag_file, metrics, keys)
    judge = JudgeClient(_judge_settings(args), args.cache_dir) if args.judge else None
    embedder = (
        TextEmbedder.from_spec(args.embedding_model, args.cache_dir)
        if RAGEvaluator.needs_embedder(metrics)
        else None
    )
    return RAGEvaluator(metrics, embedder=embedder, judge=judge, repeats=args.judge_repeats)


def _default_metrics(files: list[RAGFile], *, judge: bool) -> list[str]:
    """The metrics every file's fields allow; a note names those some lines' missing fields rule out."""
    chosen: list[str] | None = None
    for rag_file in files:
        allowed, partial = default_metrics(rag_file, judge=judge)
        chosen = [m for m in allowed if chosen is None or m in chosen]
        if partial:
            print(
                f"note: {rag_file.path}: not every line has the fields of {', '.join(partial)}; left out "
                "(name them in --metrics to see the first such line)",
                file=sys.stderr,
            )
    return chosen or []


def _file_summary(rag_file: RAGFile) -> dict[str, Any]:
    return {
        "path": str(rag_file.path),
        "sha256": file_digest(rag_file.path, "sha256"),
        "questions": len(rag_file.rows),
        "relevance": rag_file.relevance,
        **rag_file.warnings(),
    }


def _print_rows(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _print_provenance(evaluator: RAGEvaluator) -> None:
    if evaluator.embedder is not None:
        described = evaluator.embedder.describe()
        print(f"embedding model: {described['model']} ({described['settings']['runtime']} fp32, normalised)")
    if evaluator.judge is not None:
        stats = evaluator.judge.stats()
        print(
            f"judge: {evaluator.judge.settings.model} at {evaluator.judge.settings.endpoint}; "
            f"{stats['requests']} requests, {stats['cache_hits']} cached replies, {stats['retries']} retries, "
            f"{stats['timeouts']} timeouts, {stats['malformed_replies']} malformed replies"
        )


# ---- rag-eval ------------------------------------------------------------------------------------


def _per_question(rag_file: RAGFile, result: RAGEvaluation) -> list[dict[str, Any]]:
    rows = []
    for row in rag_file.rows:
        entry = {"id": row.qid, "line": row.line, **result.per_question[row.qid]}
        if row.qid in result.repeats:
            entry["judge_repeats"] = result.question_spread(row.qid)
        rows.append(entry)
    return rows


def run_eval(args: argparse.Namespace) -> int:
    rag_file = _read(args.data, args)
    evaluator = _evaluator(args, [rag_file])
    result = evaluator.evaluate(rag_file.rows)
    table = result.aggregate()
    report: dict[str, Any] = {
        "data": _file_summary(rag_file),
        "keys": _keys(args).to_json(),
        "metrics": evaluator.metrics,
        "settings": evaluator.settings(),
        "aggregate": table,
    }
    if evaluator.judge is not None:
        report["judge_repeats"] = result.repeat_summary(evaluator.repeats)
        report["judge_calls"] = evaluator.judge.stats()
    if args.per_question:
        report["per_question"] = _per_question(rag_file, result)
    if args.output:
        atomic_write_json(args.output, report)

    counts = rag_file.warnings()
    print(
        f"{rag_file.path}: {len(rag_file.rows)} questions, {counts['empty_answers']} empty answers, "
        f"{counts['duplicate_ids']} repeated ids dropped; relevance from {rag_file.relevance}"
    )
    repeats = report.get("judge_repeats", {})
    header = ["metric", "mean", "questions", "undefined"] + (
        ["repeat spread (sd)"] if evaluator.repeats > 1 else []
    )
    rows = [header]
    for metric, row in table.items():
        cells = [metric, _fmt(row["mean"]), str(row["questions"]), str(row["undefined"])]
        if evaluator.repeats > 1:
            cells.append(_fmt(repeats[metric]["std"]) if metric in repeats else "")
        rows.append(cells)
    _print_rows(rows)
    _print_provenance(evaluator)
    if args.per_question and not args.output:
        print()
        _print_rows(
            [["id", *evaluator.metrics]]
            + [[qid, *(_fmt(s.get(m)) for m in evaluator.metrics)] for qid, s in result.per_question.items()]
        )
    if args.output:
        print(f"report: {args.output}")
    return 0


# ---- rag-compare ---------------------------------------------------------------------------------


def run_compare(args: argparse.Namespace) -> int:
    settings = significance_settings(args)
    file_a, file_b = _read(args.system_a, args), _read(args.system_b, args)
    evaluator = _evaluator(args, [file_a, file_b])
    result_a, result_b = evaluator.evaluate(file_a.rows), evaluator.evaluate(file_b.rows)
    labels = (str(file_a.path), str(file_b.path))
    comparisons = compare_scores(
        labels, result_a.per_question, result_b.per_question, evaluator.metrics, settings
    )
    if not comparisons:
        raise HarnessError("no metric is defined for any question of either file; nothing to compare")
    ids_a, ids_b = set(result_a.per_question), set(result_b.per_question)
    if not ids_a & ids_b:
        raise HarnessError(f"{file_a.path} and {file_b.path} share no question id; check --id-key")
    if args.output:
        atomic_write_json(
            args.output,
            {
                "a": _file_summary(file_a),
                "b": _file_summary(file_b),
                "pairing_rule": PAIRING_RULE,
                "only_in_a": sorted(ids_a - ids_b),
                "only_in_b": sorted(ids_b - ids_a),
                "significance": settings.to_json(),
                "confidence_interval": settings.confidence_interval(),
                "settings": evaluator.settings(),
                "results": {metric: comparison.to_json() for metric, comparison in comparisons.items()},
            },
        )
    print(f"A: {file_a.path}  B: {file_b.path}")
    print(
        f"questions: {len(ids_a | ids_b)}; only in A: {len(ids_a - ids_b)}; only in B: {len(ids_b - ids_a)}"
    )
    print(f"pairing: {PAIRING_RULE}")
    print(f"test: {settings.describe()}, seed {settings.seed}")
    rows = [
        [
            "metric",
            "n",
            "A",
            "B",
            "B-A",
            f"{settings.confidence:.0%} CI",
            "p",
            f"p ({settings.correction})",
            "",
        ]
    ]
    for metric, row in comparisons.items():
        rows.append(
            [
                metric,
                str(row.n_queries),
                f"{row.mean_baseline:.4f}",
                f"{row.mean_system:.4f}",
                f"{row.difference:+.4f}",
                f"[{row.ci_low:+.4f}, {row.ci_high:+.4f}]",
                f"{row.p_value:.4g}",
                f"{row.p_value_adjusted:.4g}",
                "*" if row.significant else "",
            ]
        )
    _print_rows(rows)
    _print_provenance(evaluator)
    if args.output:
        print(f"report: {args.output}")
    return 0
