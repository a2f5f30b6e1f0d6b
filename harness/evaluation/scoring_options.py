"""The scoring options every command that scores a ranking offers, each declared once.

They live with the evaluation stage, whose settings hold their defaults, so the pipeline's options
(``harness.pipeline.EvalOptions``) and the api's commands (evaluate, compare) declare them the same way.
"""

from __future__ import annotations

from typing import Any

from harness.core.options import INT32_MAX, option
from harness.datasets.qrels import DEFAULT_DUPLICATES, DUPLICATE_POLICIES
from harness.evaluation.metrics import SCORE_PRECISIONS, EvaluationSettings

_EVALUATION = EvaluationSettings()
Group = tuple[str, str | None] | None


def ks_option(help: str = "cut-offs that bare family names expand to", metavar: str | None = None) -> Any:
    """``--ks K..``: the cut-offs bare metric families expand to."""
    return option(_EVALUATION.ks, help=help, nargs="+", low=1, high=INT32_MAX, metavar=metavar)


def relevance_level_option(help: str = "minimum grade counted as relevant", metavar: str | None = None) -> Any:
    """``--relevance-level N``: the lowest grade that counts as relevant (trec_eval -l)."""
    return option(
        _EVALUATION.relevance_level, help=help, low=-INT32_MAX - 1, high=INT32_MAX, metavar=metavar
    )


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
