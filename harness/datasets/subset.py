"""Reduced datasets that stand in for a full one: N sampled queries, their judged documents and a pool.

A subset is a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) plus its recipe,
``subset.json``: the source dataset (its result name, split and file checksums), the seed and the number
of queries sampled, the retrievers whose top-k were pooled (each with the identity of the stored result it
was read from), the sampled query ids, and the sha256 of the subset's own files. The corpus holds exactly
the documents judged for the sampled queries plus each pool retriever's top ``depth`` for them, as
NanoBEIR and mteb's hard-negative corpora are built.

Its name says it is derived (``scifact~q50-s13-bm25@100``), so its results never pass for the full
dataset's; the same recipe always yields the same files, so an identical request reuses the folder.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness import __version__
from harness.core.config import Record, validate
from harness.core.errors import HarnessError
from harness.core.fileio import (
    atomic_write,
    atomic_write_json,
    file_digest,
    iter_lines,
    parse_json,
    read_json,
)
from harness.core.staging import make_staging
from harness.datasets.beir import BeirDataset
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import CORPUS_FILE, QRELS_DIR, QUERIES_FILE
from harness.datasets.hub_layout import EXCLUDED_IDS_DIR

SUBSET_FILE = "subset.json"
SUBSET_KIND = "harness-subset"
SUBSETS_DIR = "subsets"  # in the data folder: where subsets go unless an output folder is given
# NanoBEIR's size: 50 queries per dataset, each with its judged documents and a top-100 pool.
SUBSET_QUERIES = 50
SUBSET_SEED = 13
SUBSET_POOL_DEPTH = 100
# Between the source's name and the recipe in a subset's name: registry names never hold it.
DERIVED_MARK = "~"
_UNSAFE_IN_FOLDER = re.compile(r"[^A-Za-z0-9._~@+-]+")


class SubsetSource(Record):
    """The dataset a subset was drawn from, as its results are stored (``name``) and as its files were."""

    name: str  # the name its result folders use (results/<name>/...)
    spec: str  # what was asked for: a registry name, a folder, an ``hf:`` spec
    split: str
    fingerprint: dict[str, str]  # sha256 of its corpus, queries and qrels files
    queries: int  # judged queries of the split
    docs: int
    drop_identical_ids: bool  # the source's convention, which its subset's evaluations should keep


class PoolRetriever(Record):
    """One retriever whose top-k was pooled, and the stored result its run was read from."""

    spec: str
    result_key: str  # the result folder's key: slug and non-default settings (``bm25@top_k=100``)
    label: str
    identity_settings: dict[str, Any] = {}
    config_sha256: str  # of the result's recorded config: what produced the run
    docs: int  # distinct documents this retriever put into the pool


class SubsetPool(Record):
    depth: int
    retrievers: list[PoolRetriever] = []


class SubsetRecipe(Record):
    """``subset.json``: how a subset was made, so it can be checked, reused and never mistaken."""

    kind: str = SUBSET_KIND
    name: str
    source: SubsetSource
    split: str
    seed: int
    queries: int
    pool: SubsetPool
    query_ids: list[str]
    counts: dict[str, int] = {}  # docs, queries, qrels of the subset
    files: dict[str, str] = {}  # the subset's own files: path relative to its folder -> sha256
    harness_version: str = ""

    def core(self) -> dict[str, Any]:
        """What decides the subset's content: equal cores give equal files (counts and files follow)."""
        return self.model_dump(mode="json", exclude={"counts", "files", "harness_version"})


def derived_name(
    source: str, *, queries: int, seed: int, pool: list[str], depth: int, split: str | None
) -> str:
    """``scifact~q50-s13-bm25@100``: the source, the number of queries, the seed, the pool and its depth;
    ``scifact~train-q50-s13...`` when the split is not the source's reported one (``split`` None)."""
    name = f"{source}{DERIVED_MARK}{f'{split}-' if split else ''}q{queries}-s{seed}"
    return f"{name}-{'+'.join(pool)}@{depth}" if pool else name


def default_subset_folder(data_dir: Path, name: str) -> Path:
    """``<data_dir>/subsets/<name>``, characters a folder name should not hold (``/``) replaced by ``_``.

    ``~``, ``@`` and ``+`` are kept: the folder's name is what a loaded subset's results go under.
    """
    return data_dir / SUBSETS_DIR / (_UNSAFE_IN_FOLDER.sub("_", name).strip("._") or "subset")


def sample_query_ids(dataset: BeirDataset, count: int, seed: int) -> list[str]:
    """``count`` of the split's judged queries drawn without replacement with ``seed``, in file order.

    Drawn from the ids sorted as text, so the draw depends on the ids alone, not the files' order.
    """
    available = len(dataset.queries)
    if count > available:
        raise HarnessError(
            f"--queries {count} is more than {dataset.name} has: {available} judged queries in split "
            f"{dataset.split!r}; ask for at most {available}"
        )
    chosen = set(random.Random(seed).sample(sorted(dataset.queries), count))
    return [query_id for query_id in dataset.queries if query_id in chosen]


def judged_documents(dataset: BeirDataset, query_ids: Iterable[str]) -> set[str]:
    """Every document the qrels judge for these queries (any grade, 0 included)."""
    return {doc_id for query_id in query_ids for doc_id in dataset.qrels.get(query_id, {})}


def source_of(dataset: BeirDataset, spec: str) -> SubsetSource:
    return SubsetSource(
        name=dataset.name,
        spec=spec,
        split=dataset.split,
        fingerprint=dataset.fingerprint(),
        queries=len(dataset.queries),
        docs=dataset.num_docs,
        drop_identical_ids=dataset.drop_identical_ids,
    )


def read_recipe(folder: Path) -> SubsetRecipe | None:
    """The folder's ``subset.json`` (None when it has none); a malformed one raises naming the file."""
    path = folder / SUBSET_FILE
    if not path.is_file():
        return None
    return validate(SubsetRecipe, read_json(path), path, where="subset recipe")


def verified_recipe(folder: Path, checksums: ChecksumStore | None = None) -> SubsetRecipe | None:
    """The folder's recipe when every file it lists still has the sha256 it recorded, else None.

    ``checksums`` remembers the hashes (as the loader's do), so a big subset is hashed once.
    """
    recipe = read_recipe(folder)
    if recipe is None or not recipe.files:
        return None
    store = checksums if checksums is not None else ChecksumStore()
    for relative, digest in recipe.files.items():
        if not (folder / relative).is_file() or store.sha256(folder, relative) != digest:
            return None
    return recipe


def derived_from(folder: Path, checksums: ChecksumStore | None = None) -> dict[str, Any] | None:
    """What a result on an intact subset records in its provenance: the subset's name and source, and
    the recipe's checksum (None for any other folder)."""
    recipe = verified_recipe(folder, checksums)
    if recipe is None:
        return None
    return {
        "subset": recipe.name,
        "source": recipe.source.name,
        "split": recipe.source.split,
        "fingerprint": recipe.source.fingerprint,
        "seed": recipe.seed,
        "queries": recipe.queries,
        "pool": recipe.pool.model_dump(mode="json"),
        "recipe_sha256": file_digest(folder / SUBSET_FILE),
    }


def write_subset(dataset: BeirDataset, recipe: SubsetRecipe, documents: set[str], dest: Path) -> SubsetRecipe:
    """Write the subset of ``dataset`` described by ``recipe`` (its queries, ``documents``) into ``dest``.

    Built in a staging folder beside ``dest`` and moved into place whole; returns the recipe completed
    with the subset's counts and file checksums (also written to ``subset.json``).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = make_staging(dest.parent, ".tmp-subset-")
    try:
        chosen = set(recipe.query_ids)
        docs = _copy_records(dataset.corpus_path, staging / CORPUS_FILE, documents, "document")
        _copy_records(_required(dataset.queries_path, "queries"), staging / QUERIES_FILE, chosen, "query")
        qrels_rows = _write_qrels(dataset, recipe.query_ids, staging / QRELS_DIR / f"{recipe.split}.tsv")
        relative = [CORPUS_FILE, QUERIES_FILE, f"{QRELS_DIR}/{recipe.split}.tsv"]
        if dataset.excluded_ids_path is not None:
            relative.append(_write_excluded_ids(dataset, recipe.query_ids, staging, recipe.split))
        complete = recipe.model_copy(
            update={
                "counts": {"docs": docs, "queries": len(recipe.query_ids), "qrels": qrels_rows},
                "files": {name: file_digest(staging / name) for name in relative},
                "harness_version": __version__,
            }
        )
        atomic_write_json(staging / SUBSET_FILE, complete.model_dump(mode="json"))
        try:
            if dest.is_dir() and not any(dest.iterdir()):
                dest.rmdir()  # an empty folder (made for it) holds nothing to keep
            os.rename(staging, dest)
        except OSError as error:
            raise HarnessError(f"could not move the subset into {dest}: {error.strerror}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return complete


def _required(path: Path | None, what: str) -> Path:
    if path is None:
        raise HarnessError(f"the source dataset has no {what} file")
    return path


def _copy_records(source: Path, target: Path, keep: set[str], what: str) -> int:
    """Copy the JSON lines of ``source`` whose ``_id`` is in ``keep``, byte for byte, in file order."""
    kept = 0
    with atomic_write(target) as handle:
        for number, line in iter_lines(source):
            if not line.strip():
                continue
            record = parse_json(line, source, number, invalid="malformed JSON")
            if isinstance(record, dict) and str(record.get("_id")) in keep:
                handle.write(f"{line}\n")
                kept += 1
    if what == "query" and kept != len(keep):
        raise HarnessError(
            f"{source}: {len(keep) - kept} sampled queries not found (was it changed meanwhile?)"
        )
    return kept


def _write_excluded_ids(dataset: BeirDataset, query_ids: list[str], staging: Path, split: str) -> str:
    """The sampled queries' excluded documents (BRIGHT's ``excluded_ids``), in the layout the loader reads."""
    relative = f"{EXCLUDED_IDS_DIR}/{split}.jsonl"
    with atomic_write(staging / relative) as handle:
        for query_id in query_ids:
            if dataset.excluded_ids.get(query_id):
                row = {"query-id": query_id, "corpus-ids": list(dataset.excluded_ids[query_id])}
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return relative


def _write_qrels(dataset: BeirDataset, query_ids: list[str], target: Path) -> int:
    """The sampled queries' judgements, as the source read them, in BEIR's TSV with its header."""
    rows = [
        f"{query_id}\t{doc_id}\t{grade}\n"
        for query_id in query_ids
        for doc_id, grade in dataset.qrels.get(query_id, {}).items()
    ]
    with atomic_write(target) as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(rows)
    return len(rows)
