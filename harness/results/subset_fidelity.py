"""How well a subset predicts its full dataset: the systems' order on both, their rank flips, the bias.

Computed from results the user has on both (:func:`results_on_both`): Kendall's tau-b between the
systems' scores on the subset and on the full dataset (scipy's ``kendalltau``, ties counted as tau-b
counts them), the largest rank flip (the pair of systems the subset orders against the full dataset
whose full-dataset difference is the biggest: the worst mistake a user choosing by the subset makes),
and the bias (subset minus full) per system and on average.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scipy.stats import kendalltau

from harness.core.errors import HarnessError
from harness.datasets.subset import SubsetRecipe
from harness.results.collect import collect_results
from harness.results.result_store import StoredResult

# Below three systems there is one pair or none: tau is +-1 or undefined and says nothing.
MIN_SYSTEMS_FOR_TAU = 3


@dataclass(frozen=True)
class RankFlip:
    """Two systems the subset orders against the full dataset: ``better`` wins on the full dataset."""

    better: str
    worse: str
    full_difference: float  # better - worse on the full dataset (> 0)
    subset_difference: float  # better - worse on the subset (< 0)


@dataclass(frozen=True)
class SubsetFidelity:
    """The agreement of a subset's scores with the full dataset's over the systems evaluated on both."""

    subset: dict[str, float]
    full: dict[str, float]
    tau: float | None  # Kendall's tau-b; None with fewer than two systems or a constant list
    p_value: float | None
    flips: list[RankFlip] = field(default_factory=list)  # largest full-dataset difference first

    @property
    def systems(self) -> list[str]:
        return list(self.full)

    @property
    def tau_meaningful(self) -> bool:
        return self.tau is not None and len(self.full) >= MIN_SYSTEMS_FOR_TAU

    @property
    def largest_flip(self) -> RankFlip | None:
        return self.flips[0] if self.flips else None

    @property
    def bias(self) -> dict[str, float]:
        """Subset minus full, per system."""
        return {name: self.subset[name] - self.full[name] for name in self.full}

    @property
    def mean_bias(self) -> float | None:
        values = list(self.bias.values())
        return sum(values) / len(values) if values else None


def subset_fidelity(subset: Mapping[str, float], full: Mapping[str, float]) -> SubsetFidelity:
    """Compare the systems' scores on a subset with theirs on the full dataset (systems on both only).

    E.g. ``subset_fidelity({"a": .70, "b": .60}, {"a": .65, "b": .66}).largest_flip`` is the flip of b
    over a by 0.01. Systems keep the full dataset's order (best first, then by name).
    """
    names = sorted(set(subset) & set(full), key=lambda name: (-full[name], name))
    full_scores = {name: float(full[name]) for name in names}
    subset_scores = {name: float(subset[name]) for name in names}
    tau = p_value = None
    if len(names) >= 2:
        result = kendalltau([full_scores[n] for n in names], [subset_scores[n] for n in names], variant="b")
        if not math.isnan(result.statistic):
            tau, p_value = float(result.statistic), float(result.pvalue)
    return SubsetFidelity(subset_scores, full_scores, tau, p_value, _flips(subset_scores, full_scores))


def _flips(subset: dict[str, float], full: dict[str, float]) -> list[RankFlip]:
    """Every pair ordered one way by the full dataset and strictly the other way by the subset (a tie on
    either side is not a flip), the largest full-dataset difference first."""
    flips = []
    for first, second in itertools.combinations(full, 2):
        better, worse = (first, second) if full[first] >= full[second] else (second, first)
        full_difference = full[better] - full[worse]
        subset_difference = subset[better] - subset[worse]
        if full_difference > 0 and subset_difference < 0:
            flips.append(RankFlip(better, worse, full_difference, subset_difference))
    return sorted(flips, key=lambda flip: (-flip.full_difference, flip.better, flip.worse))


@dataclass
class SystemsOnBoth:
    """The results of every system with a result on the subset and on its full dataset, by result key."""

    subset: dict[str, StoredResult]
    full: dict[str, StoredResult]
    labels: dict[str, str]
    only_one_side: list[str] = field(default_factory=list)  # result keys found on one side only
    lacking_metric: list[str] = field(default_factory=list)

    def scores(self, metric: str) -> tuple[dict[str, float], dict[str, float]]:
        """``(subset, full)``: each system's ``metric``, keyed by its label."""
        return (
            {self.labels[key]: result.metrics[metric] for key, result in self.subset.items()},
            {self.labels[key]: result.metrics[metric] for key, result in self.full.items()},
        )


def _same_data(result: StoredResult, split: str, fingerprint: dict[str, str]) -> bool:
    """Computed on exactly these files: every file the result recorded has the checksum given."""
    recorded = result.data_fingerprint
    return (
        result.split == split
        and bool(recorded)
        and all(fingerprint.get(name) == digest for name, digest in recorded.items())
    )


def _unique_labels(labels: dict[str, str]) -> dict[str, str]:
    """Each result key's label; a label two keys share (a repeated ``--label``) gets its key added."""
    shared = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {key: f"{label} [{key}]" if label in shared else label for key, label in labels.items()}


def results_on_both(results_dir: str | Path, recipe: SubsetRecipe, metric: str) -> SystemsOnBoth:
    """Every system (model and settings: the result key) with a result on the subset and on its source.

    A subset's results are recognised by the checksums of its files (whatever name they went under), the
    full dataset's by its name and the checksums the recipe recorded of its files.
    """
    if not recipe.files:
        raise HarnessError(f"subset {recipe.name}: its recipe lists no files; build it again")
    results = collect_results(results_dir).results
    source = recipe.source
    subset = {r.model_slug: r for r in results if _same_data(r, recipe.split, recipe.files)}
    full = {
        r.model_slug: r
        for r in results
        if r.dataset == source.name and _same_data(r, source.split, source.fingerprint)
    }
    both = sorted(subset.keys() & full.keys())
    lacking = [key for key in both if metric not in subset[key].metrics or metric not in full[key].metrics]
    kept = [key for key in both if key not in lacking]
    return SystemsOnBoth(
        subset={key: subset[key] for key in kept},
        full={key: full[key] for key in kept},
        labels=_unique_labels({key: full[key].label for key in kept}),
        only_one_side=sorted(subset.keys() ^ full.keys()),
        lacking_metric=lacking,
    )
