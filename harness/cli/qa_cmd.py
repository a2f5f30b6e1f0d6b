"""``harness qa-eval`` and ``harness qa-compare``: score RAG answers against gold answers, compare two systems."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli.common import add_significance_arguments, output_file, significance_settings
from harness.core.fileio import atomic_write_json
from harness.evaluation.comparison import QA_PAIRING_RULE
from harness.qa.answers.answer_comparison import DEFAULT_COMPARE_METRICS, compare_answers, comparison_report
from harness.qa.answers.answer_metrics import (
    ALL_SCORE_KEYS,
    METRIC_GROUPS,
    WORDNET_ENV,
    QAScorer,
    resolve_metrics,
)
from harness.qa.answers.answer_report import empty_gold_warning, evaluation_report, file_summary
from harness.qa.answers.predictions import QAFile, read_predictions
from harness.qa.answers.profiles import DEFAULT_PROFILE, PROFILE_NAMES

_EXAMPLE_LINE = (
    '{"id": 0, "question": "...", "golden_answers": ["14 December 1972 UTC", "December 1972"], '
    '"pred_answer": "December 14, 1973"}'
)
_METRICS_HELP = (
    f"comma-separated metric groups ({', '.join(METRIC_GROUPS)}) or single scores "
    f"({', '.join(ALL_SCORE_KEYS)}); 'all' for everything"
)


def _add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gold-key", default="golden_answers", help="key of the gold answers (default: %(default)s)"
    )
    parser.add_argument(
        "--pred-key", default="pred_answer", help="key of the prediction (default: %(default)s)"
    )
    parser.add_argument("--id-key", default="id", help="key of the question id (default: %(default)s)")
    parser.add_argument(
        "--choices-key",
        default="choices",
        help="key of multiple-choice options; when a line has them, gold answers are 0-based indices "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILE_NAMES,
        default=DEFAULT_PROFILE,
        help="whose definitions of the answer metrics (EM, Acc, StringEM, CoverEM, F1, ROUGE) to use: squad "
        "(SQuAD/ALCE), ultrarag (UltraRAG's evaluation server) or flashrag (FlashRAG's evaluator); named in "
        "every output (default: %(default)s)",
    )
    parser.add_argument(
        "--no-synonyms",
        action="store_true",
        help=f"run METEOR's exact and stem stages only, even when WordNet is installed (it is looked for in "
        f"${WORDNET_ENV}, nltk's data folders and /usr/share/wordnet from Debian's wordnet-base)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "qa-eval",
        help="score generated answers: EM, Acc, StringEM, CoverEM, F1, ROUGE, BLEU, METEOR, distinct-n",
        description="Score a JSONL file of predictions against gold answers, per question and in aggregate. "
        f"One JSON object per line, e.g. {_EXAMPLE_LINE}. Gold answers are a string, a list of aliases, "
        "or a list of alias lists (ASQA: StringEM counts the groups found). EM, Acc, StringEM, CoverEM, "
        "F1 and ROUGE follow --profile (squad: SQuAD normalisation, rouge-score); BLEU (sacrebleu) and "
        "METEOR (nltk) use their libraries' tokenisation. CJK text is scored per character. An empty "
        "prediction scores 0 and is counted; a repeated id keeps its first line.",
    )
    evaluate.add_argument("predictions", type=Path, help="JSONL file of predictions with gold answers")
    _add_input_options(evaluate)
    evaluate.add_argument("--metrics", action="append", default=None, help=f"{_METRICS_HELP} (default: all)")
    evaluate.add_argument(
        "--per-question",
        action="store_true",
        help="also give every question's scores (in the --output report, or as a table on stdout)",
    )
    evaluate.add_argument("--output", type=output_file, default=None, help="write the full report to this JSON file")
    evaluate.set_defaults(func=run_eval)

    compare = subparsers.add_parser(
        "qa-compare",
        help="paired significance test between two systems' answers to the same questions",
        description="Score two predictions files like qa-eval, pair the questions by id and test each "
        "per-question score with the evaluation toolkit's paired test; p-values are adjusted across the "
        "metrics tested. Pairing: " + QA_PAIRING_RULE + " (such ids are reported).",
    )
    compare.add_argument(
        "system_a", type=Path, metavar="A.jsonl", help="predictions of system A (the baseline)"
    )
    compare.add_argument("system_b", type=Path, metavar="B.jsonl", help="predictions of system B")
    _add_input_options(compare)
    compare.add_argument(
        "--metrics",
        action="append",
        default=None,
        help=f"{_METRICS_HELP} (default: {','.join(DEFAULT_COMPARE_METRICS)})",
    )
    add_significance_arguments(
        compare, correction_scope="the metrics tested; the CI is at 1 - alpha, unadjusted"
    )
    compare.add_argument("--output", type=output_file, default=None, help="write the comparison to this JSON file")
    compare.set_defaults(func=run_compare)


def _metric_names(raw: list[str] | None, default: tuple[str, ...] | None) -> list[str]:
    return resolve_metrics(raw or default)


def _read(path: Path, args: argparse.Namespace) -> QAFile:
    qa_file = read_predictions(
        path, gold_key=args.gold_key, pred_key=args.pred_key, id_key=args.id_key, choices_key=args.choices_key
    )
    if qa_file.empty_predictions:
        print(f"warning: {path}: {qa_file.empty_predictions} empty prediction(s), scored 0", file=sys.stderr)
    if qa_file.duplicates:
        qid, first, repeated = qa_file.duplicates[0]
        print(
            f"warning: {path}: {len(qa_file.duplicates)} repeated id(s), e.g. {qid!r} on lines {first} and "
            f"{repeated}; kept each id's first line",
            file=sys.stderr,
        )
    return qa_file


def _warn_empty_golds(summary: dict[str, Any], scorer: QAScorer) -> None:
    warning = empty_gold_warning(summary, scorer.profile.name)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)


def _print_rows(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _print_settings_notes(scorer: QAScorer) -> None:
    settings = scorer.settings()
    print(f"profile: {settings['profile']} ({settings['profile_summary']})")
    print(f"normalisation: {settings['normalisation']}")
    print(f"tokenisation: {settings['tokenisation']}")
    print(f"empty gold: {settings['empty_gold']}")
    if "meteor" in scorer.groups:
        wordnet = scorer.wordnet
        where = f"WordNet {wordnet.version} at {wordnet.path}" if wordnet.reader is not None else wordnet.note
        print(f"METEOR stages: {', '.join(scorer.meteor_stages)} ({where})")


def run_eval(args: argparse.Namespace) -> int:
    keys = _metric_names(args.metrics, None)
    qa_file = _read(args.predictions, args)
    scorer = QAScorer(keys, synonyms=not args.no_synonyms, profile=args.profile)
    result = scorer.evaluate(qa_file.records)
    keys = {"id": args.id_key, "gold": args.gold_key, "prediction": args.pred_key}
    report = evaluation_report(qa_file, scorer, result, keys, per_question=args.per_question)
    _warn_empty_golds(report["predictions"], scorer)
    if args.output:
        atomic_write_json(args.output, report, parents=False)

    counts = qa_file.warnings()
    print(
        f"{qa_file.path}: {len(qa_file.records)} questions, profile {scorer.profile.name}, "
        f"{counts['empty_predictions']} empty predictions, {counts['duplicate_ids']} repeated ids dropped"
    )
    _print_rows([["metric", "score"]] + [[name, f"{value:.4f}"] for name, value in result.aggregate.items()])
    _print_settings_notes(scorer)
    if args.per_question and not args.output:
        rows = [["id", *result.keys]]
        rows += [
            [qid, *(f"{scores[key]:.4f}" for key in result.keys)]
            for qid, scores in result.per_question.items()
        ]
        print()
        _print_rows(rows)
    if args.output:
        print(f"report: {args.output}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    keys = _metric_names(args.metrics, DEFAULT_COMPARE_METRICS)
    settings = significance_settings(args)
    file_a, file_b = _read(args.system_a, args), _read(args.system_b, args)
    scorer = QAScorer(keys, synonyms=not args.no_synonyms, profile=args.profile)
    result = compare_answers(file_a, file_b, scorer, settings)
    for path, ids in ((args.system_a, result.only_a), (args.system_b, result.only_b)):
        if ids:
            print(
                f"warning: {len(ids)} id(s) only in {path}, e.g. {ids[0]!r}; scored 0 for the other system",
                file=sys.stderr,
            )
    if result.gold_differs:
        print(
            f"warning: gold answers differ for {len(result.gold_differs)} shared id(s), e.g. "
            f"{result.gold_differs[0]!r}; each file is scored against its own gold",
            file=sys.stderr,
        )
    files = {"a": file_summary(file_a, scorer), "b": file_summary(file_b, scorer)}
    for summary in files.values():
        _warn_empty_golds(summary, scorer)
    if args.output:
        report = comparison_report(result, settings, files, scorer.settings())
        atomic_write_json(args.output, report, parents=False)

    print(f"A: {file_a.path}  B: {file_b.path}  profile: {scorer.profile.name}")
    print(
        f"paired questions: {len(result.paired)}; only in A: {len(result.only_a)}; "
        f"only in B: {len(result.only_b)}"
    )
    print(f"pairing: {QA_PAIRING_RULE}")
    print(f"test: {settings.describe()}, seed {settings.seed}")
    ci, adjusted = f"{settings.confidence:.0%} CI", f"p ({settings.correction})"
    header = ["metric", "A", "B", "B-A", ci, "p", adjusted, ""]
    rows = [header]
    for key, row in result.comparisons.items():
        rows.append([key, *row.table_cells()])
    _print_rows(rows)
    _print_settings_notes(scorer)
    if args.output:
        print(f"report: {args.output}")
    return 0
