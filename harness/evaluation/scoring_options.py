"""The scoring options every command that scores a ranking offers, each declared once.

They live with the evaluation stage, whose settings hold their defaults, so the pipeline's options
(``harness.pipeline.EvalOptions``) and the api's commands (evaluate, compare) declare them the same way.
"""

from __future__ import annotations

from typing import Any

from harness.core.options import INT32_MAX, option
from harness.datasets.qrels import DEFAULT_DUPLICATES, DEFAULT_INPUT_RULES, DUPLICATE_POLICIES, INPUT_RULES
from harness.evaluation.metrics import OTHER_SPELLINGS, SCORE_PRECISIONS, VALID_NAMES, EvaluationSettings

_EVALUATION = EvaluationSettings()
Group = tuple[str, str | None] | None


# What every ``--metrics`` / ``--metric`` help ends with: the names read, in every tool's spelling.
METRIC_NAMES_HELP = f"names, case-insensitive: {VALID_NAMES}; {OTHER_SPELLINGS}"


def metrics_option(default: Any, help: str, metavar: str | None = "NAME") -> Any:
    """``--metrics NAME..``: metric names separated by spaces or commas, in any tool's spelling."""
    return option(
        default,
        nargs="+",
        metavar=metavar,
        help=f"{help}; commas or spaces between names; {METRIC_NAMES_HELP}",
    )


def ks_option(help: str = "cut-offs that bare family names expand to", metavar: str | None = None) -> Any:
    """``--ks K..``: the cut-offs bare metric families expand to."""
    return option(_EVALUATION.ks, help=help, nargs="+", low=1, high=INT32_MAX, metavar=metavar)


def relevance_level_option(
    help: str = "minimum grade counted as relevant", metavar: str | None = None
) -> Any:
    """``--relevance-level N``: the lowest grade that counts as relevant (trec_eval -l)."""
    return option(_EVALUATION.relevance_level, help=help, low=-INT32_MAX - 1, high=INT32_MAX, metavar=metavar)


def complete_option(help: str = "average unretrieved judged queries as 0 (-c)") -> Any:
    """``--complete``: average over every judged query (trec_eval -c)."""
    return option(_EVALUATION.complete, help=help, action="store_true")


def score_precision_option() -> Any:
    """``--score-precision {float64,float32}``."""
    return option(
        _EVALUATION.score_precision,
        choices=SCORE_PRECISIONS,
        help="rank by scores as read, like trec_eval 10 (float64, default), or rounded to float32 first, "
        "like trec_eval 9, pytrec_eval, beir and mteb (float32); recorded in the output's settings",
    )


def qrels_duplicates_option(group: Group = None) -> Any:
    """``--qrels-duplicates {error,last}``."""
    return option(
        DEFAULT_DUPLICATES,
        choices=DUPLICATE_POLICIES,
        group=group,
        help="a (query, document) pair judged twice in the qrels: error (as trec_eval, default) "
        "or last (keep the last row, as BEIR's loader)",
    )


def input_rules_option() -> Any:
    """``--input-rules {strict,trec_eval,ultrarag}``: how qrels and run files are read."""
    return option(
        DEFAULT_INPUT_RULES,
        choices=INPUT_RULES,
        help="how qrels and runs are read: strict (default: trec_eval's reading, but a grade or score that "
        "is not entirely a number, or a NaN score, is an error naming the line), trec_eval (exactly as "
        "trec_eval 10 reads them: atol grades such as 2abc -> 2, strtod scores such as 0.5abc -> 0.5 and nan, "
        "lines end at LF only, so legacy files give trec_eval's numbers) or ultrarag (exactly as UltraRAG's "
        "evaluation server: grade 2.0 -> 1, score 0x1p-1 -> 0, short lines skipped, the last of a repeated "
        "pair kept); recorded in the output's settings",
    )
