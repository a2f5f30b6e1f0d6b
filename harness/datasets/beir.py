"""BEIR folders: reading corpus and queries, and loading one split with BEIR's semantics.

A BEIR folder holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` (each may be ``.gz``).
Loading follows ``beir.datasets.data_loader.GenericDataLoader``: the qrels header is skipped, graded
relevance is kept as int, and only the queries the split's qrels judge are kept. Unlike BEIR, the corpus
is never held in memory: documents are streamed from disk, so corpora larger than RAM work.

Every line is validated; bad content raises ``InputError`` naming file and line. Qrels are read by
``datasets.qrels`` under an explicit duplicates policy. Qrels rows that name a query or document the
files lack (real datasets have them) are counted and reported, or are errors with ``strict=True``.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from harness.core.cache import digest_of
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import iter_lines, json_kind, parse_json, read_json_or_none
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import (
    CORPUS_FILE,
    QRELS_DIR,
    QUERIES_FILE,
    SOURCE_FILE,
    dataset_registry,
)
from harness.datasets.hub_layout import EXCLUDED_IDS_DIR, read_excluded_ids
from harness.datasets.qrels import DEFAULT_DUPLICATES, read_qrels

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------- parsing


class Document(NamedTuple):
    """One corpus entry; title and text stay apart so each encoder decides how to join them."""

    id: str
    title: str
    text: str


def _record_id(value: Any, path: Path, line: int, what: str) -> str:
    # BEIR ids are strings; integer ids (common in home-made corpora) are accepted as their decimal text.
    if isinstance(value, str) and value:
        if value.split() != [value]:  # as a TREC run file splits its columns: the id would not survive
            raise InputError(
                path,
                line,
                f"{what} `_id` {value!r} contains whitespace",
                "ids must be single tokens: rename it",
            )
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None or value == "":
        raise InputError(path, line, f"{what} has no `_id`", 'every line needs a non-empty "_id"')
    raise InputError(path, line, f"`_id` must be a string, not {json_kind(value)}")


def _iter_json_records(
    path: Path, what: str, start: tuple[int, int] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of a JSON-lines file (from ``start`` if given)."""
    lines = iter_lines(path) if start is None else iter_lines(path, *start)
    for number, line in lines:
        if not line.strip():
            continue
        record = parse_json(line, path, number, invalid="malformed JSON")
        if not isinstance(record, dict):
            raise InputError(path, number, f"expected a JSON object per {what}, got {type(record).__name__}")
        yield number, record


def _parse_document(path: Path, number: int, record: dict[str, Any]) -> Document:
    doc_id = _record_id(record.get("_id"), path, number, "document")
    text = record.get("text")
    if not isinstance(text, str):
        problem = "document has no `text`" if text is None else "`text` must be a string"
        raise InputError(path, number, f"{problem} (_id {doc_id!r})", 'every document needs a "text" string')
    title = record.get("title")
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise InputError(path, number, f"`title` must be a string (_id {doc_id!r})")
    return Document(doc_id, title, text)


def iter_corpus(path: str | Path, start: tuple[int, int] | None = None) -> Iterator[Document]:
    """Stream the documents of a ``corpus.jsonl`` in file order, validating each line.

    ``start`` is a ``(byte offset, line number)`` from ``corpus_shard_starts``: reading begins there.
    """
    path = Path(path)
    for number, record in _iter_json_records(path, "document", start):
        yield _parse_document(path, number, record)


def corpus_shard_starts(
    path: str | Path, shard_size: int, expected_docs: int | None = None
) -> list[tuple[int, int]] | None:
    """``(byte offset, line number)`` of documents 0, S, 2S, ... so a worker can seek to its shard.

    One pass over the raw bytes, no JSON parsing. ``None`` for gzip files, which cannot seek, and
    when the pass counts other than ``expected_docs`` documents (e.g. bare CR line endings, which
    text reading splits on): such files are streamed instead.
    """
    path = Path(path)
    if path.suffix == ".gz":
        return None
    starts: list[tuple[int, int]] = []
    documents = offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            content = raw[3:] if number == 1 and raw.startswith(codecs.BOM_UTF8) else raw
            stripped = content.strip()
            # str.strip() (what iter_corpus uses) strips more than bytes.strip(): decode the rare doubtful line.
            if stripped and (0x20 < stripped[0] < 0x80 or content.decode("utf-8", "replace").strip()):
                if documents % shard_size == 0:
                    starts.append((offset, number))
                documents += 1
            offset += len(raw)
    if expected_docs is not None and documents != expected_docs:
        return None
    return starts


def load_queries(path: str | Path) -> dict[str, str]:
    """All queries of a ``queries.jsonl``, in file order; duplicate ids and missing text are errors."""
    path = Path(path)
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, record in _iter_json_records(path, "query"):
        query_id = _record_id(record.get("_id"), path, number, "query")
        text = record.get("text")
        if not isinstance(text, str):
            problem = "query has no `text`" if text is None else "`text` must be a string"
            raise InputError(
                path, number, f"{problem} (_id {query_id!r})", 'every query needs a "text" string'
            )
        if query_id in queries:
            raise InputError(
                path, number, f"duplicate query _id {query_id!r} (first on line {first_line[query_id]})"
            )
        queries[query_id] = text
        first_line[query_id] = number
    if not queries:
        raise InputError(
            path, None, "no queries (empty file?)", 'one JSON object per line: {"_id": ..., "text": ...}'
        )
    return queries


def _warn_on_empty_query_texts(path: Path, queries: dict[str, str]) -> None:
    """Say (file, line, count) which judged queries have empty text: they retrieve nothing.

    A warning, not an error: BEIR keeps such queries and every retriever returns an empty ranking
    for them, but the average then leaves them out (``--complete`` counts them as 0) and that must
    not happen silently.
    """
    empty = {query_id for query_id, text in queries.items() if not text.strip()}
    if not empty:
        return
    line = next(
        (number for number, record in _iter_json_records(path, "query") if str(record.get("_id")) in empty),
        None,
    )
    first = next(query_id for query_id in queries if query_id in empty)
    log.warning(
        "%s:%s: %d judged queries have empty text (first %r); they retrieve nothing and are left out of "
        "the average (--complete counts them as 0)",
        path,
        line,
        len(empty),
        first,
    )


@dataclass
class CorpusScan:
    """What one validating pass over a corpus learned."""

    num_docs: int
    missing_doc_ids: list[str]  # judged doc ids absent from the corpus


def scan_corpus(path: str | Path, judged_doc_ids: set[str] | None = None) -> CorpusScan:
    """Validate every line of a corpus, refuse duplicate ids, count documents, find judged docs it lacks.

    Memory stays O(#docs x 8 bytes): ids are remembered as 64-bit hashes, and only when two hashes
    collide is the file read again to name the duplicate and its lines.
    """
    path = Path(path)
    hashes = array("q")
    unseen = set(judged_doc_ids or ())
    for document in iter_corpus(path):
        hashes.append(hash(document.id))
        unseen.discard(document.id)
    if len(hashes) == 0:
        raise InputError(path, None, "corpus has no documents")
    _raise_on_duplicate_ids(path, hashes)
    return CorpusScan(num_docs=len(hashes), missing_doc_ids=sorted(unseen))


def _raise_on_duplicate_ids(path: Path, hashes: array) -> None:
    import numpy as np

    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64))
    colliding = set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
    if not colliding:
        return
    first_line: dict[str, int] = {}
    for number, record in _iter_json_records(path, "document"):
        document = _parse_document(path, number, record)
        if hash(document.id) not in colliding:
            continue
        if document.id in first_line:
            raise InputError(
                path,
                number,
                f"duplicate document _id {document.id!r} (first on line {first_line[document.id]})",
            )
        first_line[document.id] = number


# ---------------------------------------------------------------------------------------- datasets


@dataclass
class LoadReport:
    """Qrels rows that point outside the files (counted and reported; errors when strict)."""

    qrels_rows: int = 0
    duplicate_qrels_rows: int = 0
    missing_query_ids: list[str] = field(default_factory=list)  # judged but absent from queries.jsonl
    missing_query_rows: int = 0  # dropped: a query without text cannot be run
    missing_doc_ids: list[str] = field(default_factory=list)  # judged but absent from the corpus
    missing_doc_rows: int = 0  # kept, as BEIR keeps them: they count as unretrievable relevant docs

    def problems(self) -> list[str]:
        lines = []
        if self.missing_query_rows:
            lines.append(
                f"{self.missing_query_rows} qrels rows name {len(self.missing_query_ids)} queries absent "
                f"from the queries file (e.g. {self.missing_query_ids[0]!r}); those rows are dropped"
            )
        if self.missing_doc_rows:
            lines.append(
                f"{self.missing_doc_rows} qrels rows name {len(self.missing_doc_ids)} documents absent "
                f"from the corpus (e.g. {self.missing_doc_ids[0]!r}); kept as unretrievable judgements"
            )
        if self.duplicate_qrels_rows:
            lines.append(
                f"{self.duplicate_qrels_rows} qrels rows repeat a (query, document) pair; last one kept"
            )
        return lines


def find_data_file(root: Path, relative: str) -> Path | None:
    """``root/relative`` or its ``.gz`` twin, whichever exists."""
    for candidate in (root / relative, root / f"{relative}.gz"):
        if candidate.is_file():
            return candidate
    return None


def available_splits(root: Path) -> list[str]:
    """Splits that have a qrels file in ``root/qrels``."""
    folder = root / QRELS_DIR
    if not folder.is_dir():
        return []
    names = {path.name.removesuffix(".gz").removesuffix(".tsv") for path in folder.glob("*.tsv*")}
    return sorted(names)


@dataclass
class BeirDataset:
    """One split of a BEIR folder: queries and qrels in memory, the corpus streamed from disk."""

    name: str
    root: Path
    split: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    corpus_path: Path
    drop_identical_ids: bool
    queries_path: Path | None = None
    qrels_path: Path | None = None
    report: LoadReport = field(default_factory=LoadReport)
    qrels_duplicates: str = DEFAULT_DUPLICATES  # the policy the qrels were read with
    checksums: ChecksumStore = field(default_factory=ChecksumStore, repr=False)
    # Per query, documents to remove from its ranking before scoring (BRIGHT's `excluded_ids`); read
    # from ``excluded_ids/<split>.jsonl`` when the folder has one, else empty.
    excluded_ids: dict[str, list[str]] = field(default_factory=dict)
    excluded_ids_path: Path | None = None
    _num_docs: int | None = field(default=None, repr=False)
    _fingerprint: dict[str, str] | None = field(default=None, repr=False)
    _shard_starts: dict[int, list[tuple[int, int]] | None] = field(default_factory=dict, repr=False)

    def iter_documents(self, start: tuple[int, int] | None = None) -> Iterator[Document]:
        """Documents in file order, validated line by line, never all in memory.

        ``start`` (an entry of ``shard_starts``) begins at that document instead of the first.
        """
        return iter_corpus(self.corpus_path, start)

    def shard_starts(self, shard_size: int) -> list[tuple[int, int]] | None:
        """Where each shard of ``shard_size`` documents begins in the corpus file (None for gzip).

        Remembered beside the checksums while the corpus is unchanged, so workers seek, not scan.
        """
        if shard_size not in self._shard_starts:
            relative = os.path.relpath(self.corpus_path, self.root)
            value = self.checksums.remembered(
                self.root,
                f"shard_starts:{relative}:{shard_size}",
                [self.corpus_path],
                lambda: corpus_shard_starts(self.corpus_path, shard_size, self.num_docs),
            )
            starts = [(int(offset), int(line)) for offset, line in value] if value is not None else None
            self._shard_starts[shard_size] = starts
        return self._shard_starts[shard_size]

    def iter_document_batches(self, batch_size: int) -> Iterator[list[Document]]:
        """Documents in file order, ``batch_size`` at a time (the last batch may be shorter)."""
        if batch_size < 1:
            raise HarnessError(f"batch size must be at least 1, got {batch_size}")
        batch: list[Document] = []
        for document in self.iter_documents():
            batch.append(document)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    @property
    def num_docs(self) -> int:
        """Documents in the corpus (from the validating scan, remembered while the file is unchanged)."""
        if self._num_docs is None:
            self._num_docs = _remembered_scan(
                self.checksums, self.root, self.corpus_path, None, set()
            ).num_docs
        return self._num_docs

    @property
    def num_qrels(self) -> int:
        """Judgement rows of the split's qrels file."""
        return self.report.qrels_rows

    def _relative(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:  # a file kept outside the dataset folder
            return path.name

    def fingerprint(self) -> dict[str, str]:
        """sha256 of the corpus, queries and qrels files, keyed by path relative to the dataset folder."""
        if self._fingerprint is None:
            paths = [self.corpus_path, self.queries_path, self.qrels_path, self.excluded_ids_path]
            self._fingerprint = {
                self._relative(path): self.checksums.sha256(self.root, os.path.relpath(path, self.root))
                for path in paths
                if path
            }
        return dict(self._fingerprint)


def _remembered_scan(
    checksums: ChecksumStore, root: Path, corpus_path: Path, qrels_path: Path | None, judged: set[str]
) -> CorpusScan:
    key, paths = f"scan:{os.path.relpath(corpus_path, root)}", [corpus_path]
    if qrels_path is not None:
        key, paths = f"{key}|{os.path.relpath(qrels_path, root)}", [corpus_path, qrels_path]
    value = checksums.remembered(
        root, key, paths, lambda: dataclasses.asdict(scan_corpus(corpus_path, judged))
    )
    return CorpusScan(num_docs=int(value["num_docs"]), missing_doc_ids=list(value["missing_doc_ids"]))


def _first_offending_row(
    path: Path, missing_queries: set[str], missing_docs: set[str]
) -> tuple[int | None, str]:
    """Line and description of the first qrels row that names a missing query or document, or repeats."""
    seen: set[tuple[str, str]] = set()
    for number, line in iter_lines(path):
        columns = [column.strip() for column in line.split("\t")]
        if len(columns) != 3:
            continue
        query_id, doc_id, _ = columns
        if query_id in missing_queries:
            return number, f"query-id {query_id!r} is not in the queries file"
        if doc_id in missing_docs:
            return number, f"corpus-id {doc_id!r} is not in the corpus"
        if (query_id, doc_id) in seen:
            return number, f"({query_id!r}, {doc_id!r}) is judged twice"
        seen.add((query_id, doc_id))
    return None, "inconsistent qrels"


def _dataset_name_for(root: Path) -> str:
    """Registry name of a folder: ``.../scifact`` -> scifact, ``.../cqadupstack/android`` -> that forum."""
    registry = dataset_registry()
    nested = f"{root.parent.name}/{root.name}"
    return nested if nested in registry else root.name


def identity_name(root: Path, folder_name: str, record: Any, fingerprint: dict[str, str]) -> str:
    """The name a folder's results are kept under: its identity, not just its folder name.

    A folder is the registry dataset it is named after when every file it is read from matches that
    dataset's pins, or, for files no pin covers (or a re-serialised hub copy), when ``harness data
    download`` installed it (and checked it then). Any other folder is ``<folder name>@<first 8 hex of
    its files' checksums>``: a home-made ``./mine/scifact`` never replaces the genuine scifact's
    results, and two different folders of the same name never replace each other's.
    """
    if record is not None and fingerprint:
        pins = record.files
        source = read_json_or_none(root / SOURCE_FILE)
        if all(pins.get(relative) == sha for relative, sha in fingerprint.items()):
            return folder_name
        unpinned = not any(relative in pins for relative in fingerprint)
        if source is not None and (unpinned or source.get("kind") == "hub"):
            return folder_name
    return f"{folder_name}@{digest_of(fingerprint)[:8]}"


def load_dataset(
    folder: str | Path,
    split: str | None = None,
    *,
    strict: bool = False,
    name: str | None = None,
    qrels_duplicates: str = DEFAULT_DUPLICATES,
    checksums: ChecksumStore | None = None,
) -> BeirDataset:
    """Load one split of a BEIR folder with BEIR's semantics; the corpus is scanned, not kept.

    ``split=None`` means the split papers report (registry ``eval_split``), else ``test``. Qrels rows
    naming queries or documents the files lack are counted in ``report`` and logged; ``strict=True``
    makes them errors. ``qrels_duplicates`` is the policy for a (query, document) pair judged twice
    (``"error"`` as trec_eval, or ``"last"`` as BEIR). ``checksums`` remembers scans and hashes
    (a fresh store when not given; the sidecar beside the data persists them across runs).
    """
    checksums = checksums if checksums is not None else ChecksumStore()
    root = Path(folder)
    if not root.is_dir():
        raise HarnessError(f"dataset folder {root} does not exist (`harness data download NAME` fetches one)")
    named_by_caller = name is not None
    name = name or _dataset_name_for(root)
    record = dataset_registry().get(name)
    split = split or (record.eval_split if record else "test")

    corpus_path = find_data_file(root, CORPUS_FILE)
    queries_path = find_data_file(root, QUERIES_FILE)
    qrels_path = find_data_file(root, f"{QRELS_DIR}/{split}.tsv")
    for path, relative in ((corpus_path, CORPUS_FILE), (queries_path, QUERIES_FILE)):
        if path is None:
            raise HarnessError(f"{root}: no {relative} (or {relative}.gz); not a BEIR dataset folder")
    if qrels_path is None:
        splits = available_splits(root)
        raise HarnessError(
            f"{root}: no qrels for split {split!r} ({root / QRELS_DIR / split}.tsv); "
            f"available splits: {', '.join(splits) or 'none'}"
        )
    assert corpus_path is not None and queries_path is not None

    all_queries = load_queries(queries_path)
    qrels_file = read_qrels(qrels_path, duplicates=qrels_duplicates, layout="beir")
    report = LoadReport(qrels_rows=qrels_file.rows, duplicate_qrels_rows=qrels_file.duplicate_rows)

    qrels = qrels_file.qrels
    report.missing_query_ids = [query_id for query_id in qrels if query_id not in all_queries]
    report.missing_query_rows = sum(len(qrels[query_id]) for query_id in report.missing_query_ids)
    judged_docs = {doc_id for judged in qrels.values() for doc_id in judged}
    scan = _remembered_scan(checksums, root, corpus_path, qrels_path, judged_docs)
    missing_docs = set(scan.missing_doc_ids)
    report.missing_doc_ids = scan.missing_doc_ids
    report.missing_doc_rows = sum(doc_id in missing_docs for judged in qrels.values() for doc_id in judged)

    problems = report.problems()
    if strict and problems:
        line, problem = _first_offending_row(qrels_path, set(report.missing_query_ids), missing_docs)
        raise InputError(qrels_path, line, f"{problem}; {problems[0]}", "fix the files or drop --strict")
    for problem in problems:
        log.warning("%s: %s", qrels_path, problem)

    for query_id in report.missing_query_ids:
        del qrels[query_id]
    # BEIR keeps exactly the judged queries; we keep queries.jsonl order (BEIR's is qrels order).
    queries = {query_id: text for query_id, text in all_queries.items() if query_id in qrels}
    if not queries:
        raise InputError(
            qrels_path,
            None,
            f"none of its {len(report.missing_query_ids)} judged queries is in {queries_path}",
            "check that the queries and qrels files belong to the same dataset",
        )
    _warn_on_empty_query_texts(queries_path, queries)
    excluded_ids_path = find_data_file(root, f"{EXCLUDED_IDS_DIR}/{split}.jsonl")
    excluded_ids = read_excluded_ids(excluded_ids_path) if excluded_ids_path else {}
    dataset = BeirDataset(
        name=name,
        root=root,
        split=split,
        queries=queries,
        qrels=qrels,
        corpus_path=corpus_path,
        drop_identical_ids=record.drop_identical_ids if record else False,
        queries_path=queries_path,
        qrels_path=qrels_path,
        report=report,
        qrels_duplicates=qrels_duplicates,
        checksums=checksums,
        excluded_ids={query_id: ids for query_id, ids in excluded_ids.items() if query_id in queries},
        excluded_ids_path=excluded_ids_path,
        _num_docs=scan.num_docs,
    )
    if not named_by_caller:
        dataset.name = identity_name(root, name, record, dataset.fingerprint())
    return dataset
