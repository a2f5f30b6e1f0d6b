"""Runs as ranx's JSON and as parquet (read and written), and an ir_datasets dataset's scoreddocs as a run.

Every container holds the same thing, ``{qid: {docid: score}}``, and is ranked and scored exactly as the
TREC text form: score descending, then docid descending, scores as float64. A JSON number is read as C's
``strtod`` reads its text (Python's ``float``: correctly rounded to float64, ``1e400`` is inf), so a run
written as JSON or parquet and as TREC evaluates to the same bits.

- ranx JSON (``.json``, ``.json.gz``): one object ``{qid: {docid: score}}``, as ``ranx.Run.save`` writes it.
  A score must be a JSON number (not a string, ``true`` or ``NaN``); a query with no documents is dropped
  (a TREC run cannot list it) and counted in a note.
- parquet (``.parquet``, ``.parq``): one row per document. The query id column is the first present of
  ``q_id`` (ranx's ``Run.to_dataframe`` / ``save``), ``qid`` (pyterrier), ``query_id`` (ir_datasets); the
  document id column the first of ``doc_id``, ``docno`` (pyterrier's external id, before its internal
  ``docid``), ``docid``; the score column is ``score``. Other columns (``rank``, ``query`` text) are ignored,
  as the rank column of a TREC run is. Ids may be strings or integers; a pair listed twice is an error.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write, json_kind, read_json
from harness.core.ranking import Run
from harness.datasets.qrels import IRDS_PREFIX, JSON, PARQUET, TEXT, irds_rows, load_irds, shown

if TYPE_CHECKING:
    import pyarrow

# Column names, first match wins: ranx, pyterrier, ir_datasets spell them differently.
QUERY_COLUMNS = ("q_id", "qid", "query_id")
DOC_COLUMNS = ("doc_id", "docno", "docid")
SCORE_COLUMNS = ("score",)
RANX_COLUMNS = ("q_id", "doc_id", "score")  # what the harness writes, as ranx does
JSON_SCORE_FIX = "a ranx JSON run maps each document to a number: {qid: {docid: score}}"
Ranking = list[tuple[str, float]]


@dataclass
class RunRows:
    """A run read from JSON or parquet, row by row: row ``i`` belongs to query ``qids[codes[i]]``."""

    qids: list[str]
    codes: np.ndarray
    docids: pyarrow.Array | pyarrow.ChunkedArray
    scores: np.ndarray
    notes: list[str] = field(default_factory=list)


def output_container(path: Path) -> str:
    """The container a run written to ``path`` takes, by suffix: JSON, PARQUET, or TREC TEXT otherwise."""
    suffixes = [suffix.lower() for suffix in path.suffixes[-2:]]
    if suffixes[-1:] in ([".parquet"], [".parq"]):
        return PARQUET
    if suffixes[-1:] == [".json"] or suffixes == [".json", ".gz"]:
        return JSON
    if suffixes and suffixes[0] in (".parquet", ".parq"):
        raise HarnessError(f"cannot write {path}: parquet compresses itself, drop the .gz")
    return TEXT


# ------------------------------------------------------------------------------ JSON


def read_json_run(path: Path) -> RunRows:
    """ranx's JSON run ``{qid: {docid: score}}`` as rows; a score that is not a number names its query."""
    import pyarrow as pa

    payload = read_json(path, fix=JSON_SCORE_FIX)
    if not isinstance(payload, dict):
        raise InputError(
            path, None, f"a ranx JSON run is one object, found {json_kind(payload)}", JSON_SCORE_FIX
        )
    qids: list[str] = []
    sizes: list[int] = []
    docids: list[str] = []
    scores: list[float] = []
    empty = 0
    for qid, docs in payload.items():
        if not isinstance(docs, dict):
            raise InputError(
                path,
                None,
                f"query {shown(qid)} holds {json_kind(docs)}, not {{docid: score}}",
                JSON_SCORE_FIX,
            )
        if not docs:
            empty += 1
            continue
        qids.append(qid)
        sizes.append(len(docs))
        docids.extend(docs)
        scores.extend(_json_score(path, qid, docid, score) for docid, score in docs.items())
    if not qids:
        raise InputError(path, None, "no documents in the run (an empty object?)", JSON_SCORE_FIX)
    codes = np.repeat(np.arange(len(qids), dtype=np.int32), sizes)
    notes = [f"{empty} queries with no documents dropped (a TREC run cannot list them)"] if empty else []
    return RunRows(
        qids, codes, pa.array(docids, type=pa.large_string()), np.array(scores, dtype=np.float64), notes
    )


def _json_score(path: Path, qid: str, docid: str, score: Any) -> float:
    """A JSON score as float64, as ``strtod`` reads the number's text (an integer past float64 is inf)."""
    if isinstance(score, float):
        if math.isnan(score):
            raise InputError(
                path,
                None,
                f"query {shown(qid)}: document {shown(docid)} has score NaN",
                "every document needs a comparable score",
            )
        return score
    if isinstance(score, int) and not isinstance(score, bool):
        try:
            return float(score)
        except OverflowError:
            return math.copysign(math.inf, score)
    raise InputError(
        path,
        None,
        f"query {shown(qid)}: document {shown(docid)} has score {shown(json.dumps(score))} "
        f"({json_kind(score)}), not a number",
        JSON_SCORE_FIX,
    )


def write_json_run(path: Path, rankings: Iterator[tuple[str, Ranking]]) -> None:
    """ranx's JSON run, one query a line, documents in trec_eval order, scores as the shortest exact text."""
    with text_output(path) as handle:
        handle.write("{")
        for number, (qid, ranking) in enumerate(rankings):
            docs = {docid: score for docid, score in ranking}
            if any(math.isinf(score) for score in docs.values()):
                docid = next(docid for docid, score in docs.items() if math.isinf(score))
                raise HarnessError(
                    f"cannot write {path}: query {shown(qid)}, document {shown(docid)} has an infinite "
                    "score, "
                    "which JSON cannot hold (write a .trec run instead)"
                )
            handle.write(("\n" if number == 0 else ",\n") + f"{json.dumps(qid, ensure_ascii=False)}: ")
            handle.write(json.dumps(docs, ensure_ascii=False))
        handle.write("\n}\n")


# ------------------------------------------------------------------------------ parquet


def read_parquet_run(path: Path) -> RunRows:
    """A parquet run (columns named in the module doc) as rows; a missing column is named in one line."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        chosen = [_column(path, names, group, what) for group, what in _COLUMN_GROUPS]
        table = pq.read_table(path, columns=chosen).combine_chunks()
    except (pa.ArrowException, OSError) as error:
        raise HarnessError(f"cannot read parquet run {path}: {str(error).splitlines()[0]}") from None
    qid_column, doc_column, score_column = (table.column(name) for name in chosen)
    if table.num_rows == 0:
        raise InputError(path, None, "no rows in the parquet run")
    query_ids = _id_column(path, qid_column, chosen[0])
    encoded = pc.dictionary_encode(query_ids).chunk(0)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    qids = encoded.dictionary.to_pylist()
    docids = _id_column(path, doc_column, chosen[1])
    scores = _score_column(path, score_column, chosen[2], qids, codes, docids)
    _check_unique(path, codes, docids, qids)
    return RunRows(qids, codes, docids.chunk(0) if isinstance(docids, pa.ChunkedArray) else docids, scores)


_COLUMN_GROUPS = ((QUERY_COLUMNS, "query id"), (DOC_COLUMNS, "document id"), (SCORE_COLUMNS, "score"))


def _column(path: Path, names: list[str], candidates: Sequence[str], what: str) -> str:
    for name in candidates:
        if name in names:
            return name
    raise InputError(
        path,
        None,
        f"the parquet run has no {what} column (one of {', '.join(candidates)}); "
        f"its columns: {', '.join(names) or 'none'}",
        "write q_id, doc_id and score columns, as ranx's Run.save does",
    )


def _id_column(path: Path, column: pyarrow.ChunkedArray, name: str) -> pyarrow.ChunkedArray:
    """An id column as strings: strings stay, integers become their decimal text, nulls are an error."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
        raise InputError(path, None, f"column {name!r} holds {kind}; ids must be strings or integers")
    if column.null_count:
        raise InputError(path, None, f"column {name!r} has {column.null_count} empty (null) ids")
    return column.cast(pa.large_string())


def _score_column(
    path: Path, column: pyarrow.ChunkedArray, name: str, qids: list[str], codes: np.ndarray, docids: Any
) -> np.ndarray:
    import pyarrow as pa

    kind = column.type
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_decimal(kind)):
        raise InputError(path, None, f"column {name!r} holds {kind}, not numbers", "scores are numbers")
    scores = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(np.isnan(scores))  # a null reads as NaN here too
    if len(bad):
        row = int(bad[0])
        raise InputError(
            path,
            None,
            f"query {shown(qids[codes[row]])}: document {shown(docids[row].as_py())} has no comparable score "
            f"(null or NaN; {len(bad)} rows in all)",
            "every document needs a score",
        )
    return scores


def _check_unique(path: Path, codes: np.ndarray, docids: Any, qids: list[str]) -> None:
    """A (qid, docid) pair listed twice is an error naming it, as in trec_eval (one integer sort: each pair
    becomes query code x distinct documents + document code)."""
    import pyarrow.compute as pc

    documents = pc.dictionary_encode(docids).combine_chunks()
    doc_codes = documents.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    keys = codes.astype(np.int64) * len(documents.dictionary) + doc_codes
    order = np.argsort(keys, kind="stable")
    repeats = np.flatnonzero(np.diff(keys[order]) == 0)
    if not len(repeats):
        return
    row = int(order[repeats[0] + 1])
    docid = documents.dictionary[int(doc_codes[row])].as_py()
    raise InputError(
        path,
        None,
        f"query {shown(qids[codes[row]])} lists document {shown(docid)} twice",
        "trec_eval rejects runs that list a (qid, docid) pair twice",
    )


def write_parquet_run(path: Path, rankings: Iterator[tuple[str, Ranking]], header: str | None) -> None:
    """A parquet run in ranx's columns (q_id, doc_id, score), rows in trec_eval order; ``header`` (YAML) goes
    to the schema metadata as ``ir_metadata``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    qids: list[str] = []
    docids: list[str] = []
    scores: list[float] = []
    for qid, ranking in rankings:
        qids.extend([qid] * len(ranking))
        docids.extend(docid for docid, _ in ranking)
        scores.extend(score for _, score in ranking)
    table = pa.table(
        {
            "q_id": pa.array(qids, pa.large_string()),
            "doc_id": pa.array(docids, pa.large_string()),
            "score": scores,
        }
    )
    if header is not None:
        table = table.replace_schema_metadata({b"ir_metadata": header.encode("utf-8")})
    with atomic_write(path, "wb") as handle:
        pq.write_table(table, handle)


# ------------------------------------------------------------------------------ text output, ir_datasets


@contextmanager
def text_output(path: Path) -> Iterator[IO[str]]:
    """A text file written atomically, gzip-compressed when its name ends in ``.gz`` (no timestamp inside,
    so the same run gives the same bytes)."""
    if path.suffix.lower() != ".gz":
        with atomic_write(path) as handle:
            yield handle
        return
    with (
        atomic_write(path, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as compressed,
        io.TextIOWrapper(compressed, encoding="utf-8", newline="") as handle,
    ):
        yield handle


def read_irds_run(dataset_id: str) -> Run:
    """An ir_datasets dataset's scoreddocs (``query_id``, ``doc_id``, ``score``) as a run."""
    dataset = load_irds(dataset_id, "scoreddocs")
    run: Run = {}
    for row in irds_rows(dataset_id, dataset.scoreddocs_iter(), "scoreddocs"):
        docs = run.setdefault(str(row.query_id), {})
        docid = str(row.doc_id)
        if docid in docs:
            raise HarnessError(
                f"{IRDS_PREFIX}{dataset_id}: query {shown(str(row.query_id))} lists document {shown(docid)} "
                "twice "
                "(trec_eval rejects such runs)"
            )
        docs[docid] = float(row.score)
    if not run:
        raise HarnessError(f"{IRDS_PREFIX}{dataset_id}: ir_datasets lists no scoreddocs")
    return run
