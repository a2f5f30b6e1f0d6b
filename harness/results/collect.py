"""Which stored results may be compared: collection, data-version checks, model selection and labels.

Collection is strict about what it keeps: a result folder that cannot be read, whose per-query values
are malformed, or that was computed on a different version of the data (its provenance fingerprint
disagrees with the registry pin or with the other results for that dataset) is reported by path and
left out.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import HarnessError
from harness.datasets.dataset_registry import get_dataset_record
from harness.models.resolve import resolve_model
from harness.results.result_store import SETTINGS_MARK, StoredResult, scan_results

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
    """One result per (dataset, split, model and settings): the newest wins, copies are reported.

    ``model_slug`` is the result's key (``bm25@top_k=100``), so ablations of one model are all kept.
    """
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
    """Every name a user may call this result's model by: name, slug, label, the spec given to eval, aliases."""
    labels = {result.model, result.model_slug, result.label}
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
        # A checkpoint folder passed by path: the results run with its weights (``--weights``), or
        # the slug the harness derives from it.
        model_info = result.provenance.get("model") if isinstance(result.provenance, dict) else None
        if isinstance(model_info, dict) and model_info.get("source") == str(path.resolve()):
            return True
        try:
            return resolve_model(spec).slug == result.model_slug.partition(SETTINGS_MARK)[0]
        except (HarnessError, ImportError):
            return False
    return False


def select_models(
    results: list[StoredResult], specs: list[str], aliases_of: AliasLookup = _no_aliases
) -> list[str]:
    """Result keys (``model_slug``) for ``specs`` in the given order; an unknown spec is an error naming
    the known ones.

    A spec naming one result (its key ``bm25@top_k=100`` or its label) selects that result; a spec naming a
    model (``bm25``) selects its result under the default settings, or, when it has none, every result of
    it (e.g. each ``--weights`` run of one record).
    """
    slugs: list[str] = []
    for spec in specs:
        found = _exact_matches(spec, results) or sorted(
            {r.model_slug for r in results if _matches(spec, r, aliases_of)}
        )
        if not Path(spec).expanduser().exists():  # a folder: every result of those weights
            found = [slug for slug in found if SETTINGS_MARK not in slug] or found
        if not found:
            known = sorted({r.label for r in results})
            raise HarnessError(
                f"no results for model {spec!r}; the results folder has: {', '.join(known) or 'none'}"
            )
        slugs.extend(slug for slug in found if slug not in slugs)
    return slugs


def _exact_matches(spec: str, results: list[StoredResult]) -> list[str]:
    wanted = spec.strip().lower()
    return sorted({r.model_slug for r in results if wanted in (r.model_slug.lower(), r.label.lower())})


def display_labels(results: list[StoredResult], slugs: list[str]) -> dict[str, str]:
    """slug -> the label to print (:attr:`StoredResult.label`), unique among ``slugs``.

    Two results sharing a label (two runs' ``checkpoint-500``, one ``--label`` given twice) are told apart
    by the folder holding their model (``run-a/checkpoint-500``), else by a short hash of their key.
    """
    by_slug = {slug: next(r for r in results if r.model_slug == slug) for slug in slugs}
    labels = {slug: result.label for slug, result in by_slug.items()}
    for qualify in (_with_parent_folder, _with_key_hash):
        repeated = {label for label, count in Counter(labels.values()).items() if count > 1}
        labels = {
            slug: qualify(by_slug[slug], label) if label in repeated else label
            for slug, label in labels.items()
        }
    return labels


def _with_parent_folder(result: StoredResult, label: str) -> str:
    model_info = result.provenance.get("model") if isinstance(result.provenance, dict) else None
    source = model_info.get("source") if isinstance(model_info, dict) else None
    if not isinstance(source, str) or not source or result.model_name != Path(source).name:
        return label
    return f"{Path(source).parent.name}/{label}"


def _with_key_hash(result: StoredResult, label: str) -> str:
    return f"{label} [{hashlib.sha256(result.model_slug.encode()).hexdigest()[:6]}]"
