"""``harness rag-eval`` and ``harness rag-compare``: score retrieved contexts and answers, compare two systems."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from harness.cli.common import (
    add_qrels_duplicates_argument,
    add_significance_arguments,
    positive_int,
    significance_settings,
)
from harness.core.fileio import atomic_write_json
from harness.qa.rag.judge_client import (
    API_KEY_ENV,
    BASE_URL_ENV,
    MODEL_ENV,
    REPEAT_TEMPERATURE,
    SINGLE_TEMPERATURE,
)
from harness.qa.rag.rag_stage import Notice, RAGRunSettings, compare_rag_files, evaluate_rag_file
from harness.qa.rag.rows import METRICS, PAIRING_RULE, RAGKeys

_EXAMPLE_LINE = (
    '{"id": "q1", "question": "...", "answer": "...", "contexts": ["..."], "ground_truth": "...", '
    '"context_ids": ["d3", "d7"], "reference_context_ids": ["d7"]}'
)
_SETTINGS = [f.name for f in fields(RAGRunSettings) if f.name != "keys"]  # dests of the options but --*-key
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
    relevance.add_argument("--relevance-level", type=int, help="minimum grade counted as relevant")
    add_qrels_duplicates_argument(relevance)
    parser.add_argument("--metrics", action="append", default=None, help=_METRICS_HELP)
    parser.add_argument(
        "--embedding-model",
        help="registry name, alias or model folder of the embedding model (default: %(default)s, offline)",
    )
    parser.add_argument("--cache-dir", type=Path, help="env HARNESS_CACHE_DIR")
    judge = parser.add_argument_group("judge", "an OpenAI-compatible chat endpoint, used only with --judge")
    judge.add_argument("--judge", action="store_true", help="score the judged metrics (each call is cached)")
    judge.add_argument(
        "--judge-base-url", help=f"e.g. http://127.0.0.1:8000/v1 (env {' / '.join(BASE_URL_ENV)})"
    )
    judge.add_argument("--judge-model", help=f"model name the server knows (env {' / '.join(MODEL_ENV)})")
    judge.add_argument(
        "--judge-api-key", help=f"bearer key, if the server wants one (env {' / '.join(API_KEY_ENV)})"
    )
    judge.add_argument("--judge-repeats", type=positive_int, help="ask N times; report mean and spread")
    judge.add_argument("--judge-timeout", type=float, help="seconds per request (default: 60)")
    judge.add_argument("--judge-retries", type=int, help="retries on timeout, 429, 5xx (default: 3)")
    judge.add_argument("--judge-backoff", type=float, help="first retry delay, doubled each time")
    judge.add_argument("--judge-rps", type=float, help="at most this many requests per second")
    judge.add_argument(
        "--judge-temperature",
        type=float,
        help=f"sampling temperature (default: {SINGLE_TEMPERATURE} with one repeat, {REPEAT_TEMPERATURE} with several)",
    )
    # The stage's defaults are the options' defaults (one home: harness run gets the same).
    defaults = RAGRunSettings()
    parser.set_defaults(**{name: getattr(defaults, name) for name in _SETTINGS})


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


# ---- running -------------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> RAGRunSettings:
    keys = RAGKeys(**{name: getattr(args, f"{name}_key") for name in RAGKeys().to_json()})
    return RAGRunSettings(keys=keys, **{name: getattr(args, name) for name in _SETTINGS})


def _warn(notice: Notice) -> None:
    print(notice, file=sys.stderr)


def _print_rows(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def run_eval(args: argparse.Namespace) -> int:
    report = evaluate_rag_file(args.data, _settings(args), per_question=args.per_question, notify=_warn)
    if args.output:
        atomic_write_json(args.output, report.to_json())
    print(report.summary_line())
    _print_rows(report.table_rows())
    for line in report.provenance_lines():
        print(line)
    if args.per_question and not args.output:
        print()
        _print_rows(report.question_rows())
    if args.output:
        print(f"report: {args.output}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    significance = significance_settings(args)
    report = compare_rag_files(args.system_a, args.system_b, _settings(args), significance, notify=_warn)
    if args.output:
        atomic_write_json(args.output, report.to_json())
    print(*report.summary_lines(), sep="\n")
    _print_rows(report.table_rows())
    for line in report.provenance_lines():
        print(line)
    if args.output:
        print(f"report: {args.output}")
    return 0
