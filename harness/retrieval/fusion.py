"""Fusion: several runs over the same queries -> one run (RRF, CombSUM, CombMNZ, weighted interpolation).

Each member contributes its top ``depth`` documents per query (all it retrieved when ``depth`` is None),
ranked in trec_eval order (``harness.evaluation.trec``: score descending, then docid descending), so
RRF's ranks never depend on how a file happened to list tied documents.

- ``rrf``: sum over members of ``1 / (k + rank)``, rank from 1 (Cormack et al.; k defaults to 60).
- ``combsum``: sum of the members' normalised scores; a member that did not retrieve a document adds 0.
- ``combmnz``: CombSUM times the number of members that retrieved the document.
- ``interpolation``: ``sum_i w_i * score_i`` (pyserini's interpolation is two members with weights
  ``alpha, 1 - alpha`` and no normalisation); missing documents add 0.

Normalisations, per query and member, over the documents that member contributes (as ranx):
``min-max`` ``(s - min) / (max - min)``, ``z-score`` ``(s - mean) / std`` (population std), ``sum``
``(s - min) / sum(s - min)``; a zero denominator is taken as 1e-9. Scores are added member by member in
the order given, so equal inputs give bit-equal outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.core.errors import HarnessError
from harness.core.ranking import Run, sorted_ranking, top_k_ranking

FUSION_METHODS = ("rrf", "combsum", "combmnz", "interpolation")
NORMALIZATIONS = ("none", "min-max", "z-score", "sum")
DEFAULT_RRF_K = 60
# Score-based methods need comparable scales; interpolation keeps raw scores by default, as pyserini.
DEFAULT_NORMALIZATION = {"rrf": "none", "combsum": "min-max", "combmnz": "min-max", "interpolation": "none"}
_TINY = 1e-9  # a denominator never falls below this (ranx's rule), so one-document lists stay finite


@dataclass(frozen=True)
class FusionSettings:
    """How member runs are fused; ``describe()`` is what keys a fused result and is recorded."""

    method: str = "rrf"
    k: int = DEFAULT_RRF_K
    normalization: str | None = None  # None: the method's default (DEFAULT_NORMALIZATION)
    weights: tuple[float, ...] | None = None  # interpolation; None: equal weights
    depth: int | None = None  # documents each member contributes per query; None: all it retrieved

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise HarnessError(f"unknown fusion method {self.method!r} (use {', '.join(FUSION_METHODS)})")
        if self.normalization is not None and self.normalization not in NORMALIZATIONS:
            raise HarnessError(
                f"unknown normalisation {self.normalization!r} (use {', '.join(NORMALIZATIONS)})"
            )
        if self.method == "rrf" and self.normalization not in (None, "none"):
            raise HarnessError("rrf fuses ranks, not scores: drop the normalisation")
        if self.depth is not None and self.depth <= 0:
            raise HarnessError(f"fusion depth must be at least 1, got {self.depth}")
        if self.k < 0:
            raise HarnessError(f"rrf k must be 0 or more, got {self.k}")
        if self.weights is not None and self.method != "interpolation":
            raise HarnessError(f"weights belong to interpolation, not {self.method}")
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
            bad = [weight for weight in self.weights if not math.isfinite(weight)]
            if bad:
                raise HarnessError(
                    f"interpolation weight {bad[0]} is not a finite number; give --weights one finite "
                    "number per run (e.g. --weights 0.7 0.3)"
                )

    @property
    def norm(self) -> str:
        return self.normalization or DEFAULT_NORMALIZATION[self.method]

    def member_weights(self, members: int) -> tuple[float, ...]:
        if self.weights is None:
            return (1.0 / members,) * members
        if len(self.weights) != members:
            raise HarnessError(
                f"interpolation has {len(self.weights)} weights for {members} runs; give one weight per run"
            )
        return self.weights

    def describe(self, members: int) -> dict[str, object]:
        """The settings that change a fused score (method parameters, normalisation, per-member depth)."""
        described: dict[str, object] = {"method": self.method, "depth": self.depth}
        if self.method == "rrf":
            described["k"] = self.k
        else:
            described["normalization"] = self.norm
        if self.method == "interpolation":
            described["weights"] = list(self.member_weights(members))
        return described


def check_same_queries(runs: Sequence[Run], labels: Sequence[str]) -> None:
    """Runs over different query sets cannot be fused: one line naming the runs and a differing query."""
    first = set(runs[0])
    for label, run in zip(labels[1:], runs[1:], strict=True):
        other = set(run)
        if other != first:
            only_first, only_other = sorted(first - other), sorted(other - first)
            example = f"{len(only_first)} only in {labels[0]} (e.g. {only_first[0]!r})" if only_first else ""
            if only_other:
                example += (
                    "; " if example else ""
                ) + f"{len(only_other)} only in {label} (e.g. {only_other[0]!r})"
            raise HarnessError(
                f"cannot fuse runs over different queries: {labels[0]} has {len(first)}, {label} has "
                f"{len(other)}; {example} (fuse runs of the same dataset and split)"
            )


def fuse(runs: Sequence[Run], settings: FusionSettings, labels: Sequence[str] | None = None) -> Run:
    """One fused run from ``runs`` (two or more, over the same queries)."""
    labels = list(labels or [f"run {i + 1}" for i in range(len(runs))])
    if len(runs) < 2:
        raise HarnessError(f"fusion needs at least two runs, got {len(runs)}")
    check_same_queries(runs, labels)
    for run, label in zip(runs, labels, strict=True):
        check_finite_scores(run, label)
    weights = settings.member_weights(len(runs))
    combine = _COMBINERS[settings.method]
    fused: Run = {}
    for qid in sorted(runs[0]):
        members = [_member_scores(run[qid], settings) for run in runs]
        fused[qid] = combine(members, weights)
        _check_fused(fused[qid], qid, labels, settings)
    return fused


def check_finite_scores(run: Run, label: str) -> None:
    """A member's scores must all be finite: ``inf`` would swamp every sum (and ``inf - inf`` is NaN)."""
    for qid, docs in run.items():
        for docid, score in docs.items():
            if not math.isfinite(score):
                raise HarnessError(
                    f"cannot fuse {label}: query {qid!r}, document {docid!r} has score {score}; "
                    "fusion needs finite scores (fix or drop that line of the run)"
                )


def _check_fused(scores: dict[str, float], qid: str, labels: Sequence[str], settings: FusionSettings) -> None:
    """Finite inputs can still overflow a sum (two scores near 1e308): such a fused score is refused."""
    for docid, score in scores.items():
        if not math.isfinite(score):
            raise HarnessError(
                f"fusing {', '.join(labels)} overflowed for query {qid!r}, document {docid!r} ({settings.method} "
                "gives a score that is not a finite number); normalise the scores (--norm min-max or z-score) "
                "or scale the weights down"
            )


def _member_scores(docs: dict[str, float], settings: FusionSettings) -> dict[str, float]:
    """One member's contribution to one query: its top ``depth`` in trec_eval order, scored for fusion."""
    ranking = sorted_ranking(docs) if settings.depth is None else top_k_ranking(docs, settings.depth)
    if settings.method == "rrf":
        return {docid: 1 / (settings.k + rank) for rank, (docid, _) in enumerate(ranking, start=1)}
    return _NORMALIZERS[settings.norm](ranking)


def _no_normalization(ranking: list[tuple[str, float]]) -> dict[str, float]:
    return dict(ranking)


def _min_max(ranking: list[tuple[str, float]]) -> dict[str, float]:
    if not ranking:
        return {}
    low, high = ranking[-1][1], ranking[0][1]
    denominator = max(high - low, _TINY)
    return {docid: (score - low) / denominator for docid, score in ranking}


def _z_score(ranking: list[tuple[str, float]]) -> dict[str, float]:
    if not ranking:
        return {}
    mean = _sequential_sum(score for _, score in ranking) / len(ranking)
    variance = _sequential_sum((score - mean) ** 2 for _, score in ranking) / len(ranking)
    denominator = max(math.sqrt(variance), _TINY)
    return {docid: (score - mean) / denominator for docid, score in ranking}


def _sum(ranking: list[tuple[str, float]]) -> dict[str, float]:
    if not ranking:
        return {}
    low = ranking[-1][1]
    denominator = max(_sequential_sum(score for _, score in ranking) - low * len(ranking), _TINY)
    return {docid: (score - low) / denominator for docid, score in ranking}


def _sequential_sum(values) -> float:
    # Left to right on purpose (math.fsum or numpy's pairwise sum would round differently from ranx).
    total = 0.0
    for value in values:
        total += value
    return total


def _union(members: list[dict[str, float]]) -> dict[str, None]:
    """Every document any member contributes, in first-seen order."""
    return dict.fromkeys(docid for member in members for docid in member)


def _comb_sum(members: list[dict[str, float]], weights: tuple[float, ...]) -> dict[str, float]:
    return {docid: _sequential_sum(m.get(docid, 0.0) for m in members) for docid in _union(members)}


def _comb_mnz(members: list[dict[str, float]], weights: tuple[float, ...]) -> dict[str, float]:
    fused = {}
    for docid in _union(members):
        present = [m[docid] for m in members if docid in m]
        fused[docid] = _sequential_sum(present) * len(present)
    return fused


def _interpolation(members: list[dict[str, float]], weights: tuple[float, ...]) -> dict[str, float]:
    return {
        docid: _sequential_sum(w * m.get(docid, 0.0) for w, m in zip(weights, members, strict=True))
        for docid in _union(members)
    }


_NORMALIZERS: dict[str, Callable[[list[tuple[str, float]]], dict[str, float]]] = {
    "none": _no_normalization,
    "min-max": _min_max,
    "z-score": _z_score,
    "sum": _sum,
}
_COMBINERS = {"rrf": _comb_sum, "combsum": _comb_sum, "combmnz": _comb_mnz, "interpolation": _interpolation}
