"""Which stored results may be compared: collection, data-version checks, model selection and labels.

Collection is strict about what it keeps: a result folder that cannot be read, whose per-query values
are malformed, or that was computed on a different version of the data (its provenance fingerprint
disagrees with the registry pin or with the other results for that dataset) is reported by path and
left out.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import HarnessError
from harness.datasets.dataset_registry import get_dataset_record
from harness.models.resolve import resolve_model
from harness.results.result_store import StoredResult, scan_results

log = logging.getLogger(__name__)


@dataclass
class Collection:
    """The results a table may use, and the folders left out with the reason."""

    results: list[StoredResult]
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def _per_query_problem(result: StoredResult) -> str | None:
    per_query = result.per_query
    if not isinstance(per_query, dict):
        return "'per_query' is not a mapping of query id -> metric values"
    for qid, values in per_query.items():
        if not isinstance(values, dict) or not all(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            for value in values.values()
        ):
            return f"'per_query' entry for query {qid!r} is not a mapping of metric names to finite numbers"
    for name, value in result.metrics.items():
        if not math.isfinite(value):
            return f"metric {name} is {value}"
    return None


def _registry_pins(dataset: str) -> dict[str, str]:
    """sha256 pins of the registry entry for ``dataset`` (empty for folders the registry does not know)."""
    try:
        return dict(get_dataset_record(dataset).files)
    except HarnessError:
        return {}


def _fingerprint_conflict(fingerprint: dict[str, str], reference: dict[str, str]) -> list[str]:
    return sorted(
        name for name in fingerprint.keys() & reference.keys() if fingerprint[name] != reference[name]
    )


def _check_data_versions(results: list[StoredResult]) -> tuple[list[StoredResult], list[tuple[Path, str]]]:
    """Keep only results computed on the pinned (or, without a pin, the agreed) version of their data."""
    kept: list[StoredResult] = []
    skipped: list[tuple[Path, str]] = []
    by_dataset: dict[tuple[str, str], list[StoredResult]] = {}
    for result in results:
        fingerprint = result.data_fingerprint
        if not isinstance(fingerprint, dict) or not fingerprint:
            skipped.append(
                (
                    result.directory,
                    "provenance.json has no dataset fingerprint, so its data version is unknown",
                )
            )
            continue
        by_dataset.setdefault((result.dataset, result.split), []).append(result)

    for (dataset, _split), group in by_dataset.items():
        pins = _registry_pins(dataset)
        pinned_ok: list[StoredResult] = []
        for result in group:
            differing = _fingerprint_conflict(result.data_fingerprint, pins)
            if differing:
                skipped.append(
                    (
                        result.directory,
                        f"computed on another version of {dataset}: {', '.join(differing)} differ from the "
                        "registry pin (re-run it on the pinned data)",
                    )
                )
            else:
                pinned_ok.append(result)
        # Files without a pin (or folders outside the registry): the results must at least agree,
        # file by file; the checksum most of them share is taken as the version to keep.
        conflicts: dict[Path, list[str]] = {}
        tie_files: set[str] = set()
        for name in sorted({name for r in pinned_ok for name in r.data_fingerprint}):
            ranked = Counter(
                r.data_fingerprint[name] for r in pinned_ok if name in r.data_fingerprint
            ).most_common()
            if len(ranked) < 2:
                continue
            majority = ranked[0][0] if ranked[0][1] > ranked[1][1] else None
            tie_files |= {name} if majority is None else set()
            for result in pinned_ok:
                if name in result.data_fingerprint and result.data_fingerprint[name] != majority:
                    conflicts.setdefault(result.directory, []).append(name)
        for result in pinned_ok:
            differing = conflicts.get(result.directory)
            if not differing:
                kept.append(result)
                continue
            tied = " (no version is in the majority)" if tie_files & set(differing) else ""
            skipped.append(
                (
                    result.directory,
                    f"computed on another version of {dataset}: {', '.join(differing)} differ from the other "
                    f"results{tied}",
                )
            )
    return kept, skipped


def _drop_duplicates(results: list[StoredResult]) -> tuple[list[StoredResult], list[tuple[Path, str]]]:
    """One result per (dataset, split, model): the newest wins, copies are reported."""
    newest: dict[tuple[str, str, str], StoredResult] = {}
    skipped: list[tuple[Path, str]] = []
    for result in sorted(results, key=lambda r: str(r.provenance.get("created_at", "")), reverse=True):
        key = (result.dataset, result.split, result.model_slug)
        if key in newest:
            skipped.append((result.directory, f"older duplicate of {newest[key].directory}"))
        else:
            newest[key] = result
    return list(newest.values()), skipped


def collect_results(results_dir: str | Path) -> Collection:
    """Every usable result below ``results_dir``; unreadable or inconsistent folders go to ``skipped``."""
    root = Path(results_dir)
    if not root.is_dir():
        raise HarnessError(f"results folder {root} does not exist (run `harness eval` first)")
    good, bad = scan_results(root)
    skipped = [(Path(path), reason) for path, reason in bad]
    readable: list[StoredResult] = []
    for result in good:
        problem = _per_query_problem(result)
        if problem:
            skipped.append((result.directory, f"{result.directory / 'metrics.json'}: {problem}"))
        else:
            readable.append(result)
    consistent, version_skips = _check_data_versions(readable)
    unique, duplicate_skips = _drop_duplicates(consistent)
    skipped += version_skips + duplicate_skips
    for path, reason in skipped:
        log.debug("skipped %s: %s", path, reason)
    return Collection(results=unique, skipped=sorted(skipped, key=lambda item: str(item[0])))


# Other names of a model (e.g. the published references' aliases); the report layer supplies them.
AliasLookup = Callable[[str], set[str]]


def _no_aliases(model: str) -> set[str]:
    return set()


def model_labels(result: StoredResult, aliases_of: AliasLookup = _no_aliases) -> set[str]:
    """Every name a user may call this result's model by: name, slug, the spec given to eval, aliases."""
    labels = {result.model, result.model_slug}
    model_info = result.provenance.get("model", {}) if isinstance(result.provenance, dict) else {}
    for key in ("spec", "record"):
        if isinstance(model_info.get(key), str):
            labels.add(model_info[key])
    identity = model_info.get("identity") or {}
    if isinstance(identity, dict) and isinstance(identity.get("model_id"), str):
        labels.add(identity["model_id"])
    labels |= aliases_of(result.model)
    return {label for label in labels if label}


def _matches(spec: str, result: StoredResult, aliases_of: AliasLookup) -> bool:
    wanted = spec.strip().lower()
    if wanted in {label.lower() for label in model_labels(result, aliases_of)}:
        return True
    path = Path(spec).expanduser()
    if path.exists():
        # A checkpoint folder passed by path: the slug the harness derives from it names the result.
        try:
            return resolve_model(spec).slug == result.model_slug
        except (HarnessError, ImportError):
            return False
    return False


def select_models(
    results: list[StoredResult], specs: list[str], aliases_of: AliasLookup = _no_aliases
) -> list[str]:
    """Model slugs for ``specs`` in the given order; an unknown spec is an error naming the known ones."""
    slugs: list[str] = []
    for spec in specs:
        found = sorted({r.model_slug for r in results if _matches(spec, r, aliases_of)})
        if not found:
            known = sorted({r.model for r in results})
            raise HarnessError(
                f"no results for model {spec!r}; the results folder has: {', '.join(known) or 'none'}"
            )
        slugs.extend(slug for slug in found if slug not in slugs)
    return slugs


def display_labels(results: list[StoredResult], slugs: list[str]) -> dict[str, str]:
    """slug -> the model name to print, or the slug where two slugs share a name."""
    names = {slug: next(r.model for r in results if r.model_slug == slug) for slug in slugs}
    repeated = {name for name, count in Counter(names.values()).items() if count > 1}
    return {slug: (slug if names[slug] in repeated else names[slug]) for slug in slugs}
