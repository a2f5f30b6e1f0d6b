"""TREC run files: reading, writing, and the one ranking tie rule (qrels are read by ``datasets.qrels``).

Rankings follow trec_eval: score descending, then document id descending (compared as
strings); the rank column of a run file is ignored. Every stage that orders documents
goes through :func:`sorted_ranking` / :func:`top_k_ranking` / :func:`ranking_order`, whose one
home is ``harness.core.ranking`` (below the retrieval stage, which fuses and re-ranks); they are
re-exported here.

Runs are read as trec_eval 10 reads them (see :func:`read_run_columns`) into
:class:`RunColumns`, which evaluation consumes directly; :func:`read_run` gives the same run as
``{qid: {docid: score}}`` for the stages that want dicts. ``rules`` (``--input-rules``) choose how
the text is read: ``strict`` (the default), ``trec_eval`` or ``ultrarag``
(``harness.datasets.qrels.INPUT_RULES_READING``).

A run may also be ranx's JSON or parquet (``harness.evaluation.run_formats``; told apart by
``harness.datasets.qrels.file_container``) or ``irds:<dataset-id>`` (an ir_datasets dataset's scoreddocs),
and is written in the container its file name says. A TREC run the harness writes starts with an
ir_metadata header (``harness.evaluation.ir_metadata``): ``#`` comment lines, which trec_eval 10 skips.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import iter_lines
from harness.core.ranking import Run as Run
from harness.core.ranking import ranking_order as ranking_order
from harness.core.ranking import sorted_ranking as sorted_ranking
from harness.core.ranking import top_k_ranking as top_k_ranking
from harness.datasets.qrels import (
    DEFAULT_INPUT_RULES,
    JSON,
    PARQUET,
    TEXT,
    c_fields,
    check_input_rules,
    file_container,
    irds_dataset_id,
    is_comment,
    parse_c_double,
    read_strictly,
    rule_lines,
    shown,
    strtod_prefix,
)
from harness.datasets.qrels import Qrels as Qrels  # re-exported: the type lives with the one qrels reader
from harness.evaluation.ir_metadata import Header, header_lines, header_text
from harness.evaluation.run_formats import (
    RunRows,
    output_container,
    read_irds_run,
    read_json_run,
    read_parquet_run,
    text_output,
    write_json_run,
    write_parquet_run,
)

if TYPE_CHECKING:
    import pyarrow

log = logging.getLogger(__name__)

RUN_COLUMNS = ("qid", "q0", "docid", "rank", "score", "tag")
RUN_LINE_HELP = "expected 6 columns: qid Q0 docid rank score tag"


def _check_exists(path: Path, what: str) -> None:
    if path.is_dir():
        inside = sorted(path.glob("*.trec")) or sorted(path.glob("*.run"))
        hint = f"; did you mean {inside[0]}?" if inside else ""
        raise HarnessError(f"{what} file {path} is a folder; expected a TREC run file{hint}")
    if not path.is_file():
        raise HarnessError(f"{what} file not found: {path}")


class RunView(Mapping[str, dict[str, float]]):
    """A :class:`RunColumns` seen as ``{qid: {docid: score}}``, each query's dict built when asked for.

    Diagnostics (judged@k, tie bounds) walk the run query by query; building one dict at a time keeps
    memory at the columns' size instead of a dict per document.
    """

    def __init__(self, columns: RunColumns, *, float32: bool = False) -> None:
        self._columns = columns
        self._index = {qid: index for index, qid in enumerate(columns.qids)}
        self._float32 = float32  # scores as trec_eval 9 / pytrec_eval hold them (C float)

    def __getitem__(self, qid: str) -> dict[str, float]:
        docs = self._columns.ranking(self._index[qid])
        if not self._float32:
            return docs
        with np.errstate(over="ignore"):  # 1e308 becomes +inf in C float, as in trec_eval 9
            rounded = np.fromiter(docs.values(), dtype=np.float64, count=len(docs)).astype(np.float32)
        return dict(zip(docs, rounded.astype(np.float64).tolist(), strict=True))

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


@dataclass
class RunColumns:
    """A run as columns, each query's documents one contiguous slice (far leaner than dicts).

    ``docids`` is an arrow (chunked) string array and ``scores`` float64, both ordered query by query;
    query ``i`` is ``qids[i]`` and owns rows ``offsets[i]:offsets[i + 1]``.
    """

    qids: list[str]
    offsets: np.ndarray
    docids: pyarrow.Array | pyarrow.ChunkedArray
    scores: np.ndarray
    path: Path | None = None
    extra_column_lines: int = 0  # lines with columns after the run tag (ignored, as trec_eval does)
    notes: list[str] = field(default_factory=list)  # what a lenient rule set read silently
    container: str = TEXT  # what ``path`` holds: TREC text, ranx JSON or parquet

    def __len__(self) -> int:
        return len(self.qids)

    def query(self, index: int) -> tuple[list[str], np.ndarray]:
        """Query ``index``'s document ids and float64 scores, in file order."""
        return self.rows(int(self.offsets[index]), int(self.offsets[index + 1]))

    def rows(self, start: int, end: int) -> tuple[list[str], np.ndarray]:
        """Document ids and scores of rows ``start:end`` (one or more whole queries)."""
        return self.docids.slice(start, end - start).to_pylist(), self.scores[start:end]

    def ranking(self, index: int) -> dict[str, float]:
        """Query ``index`` as ``{docid: score}``; a document listed twice is an error naming its line."""
        docids, scores = self.query(index)
        docs = dict(zip(docids, scores.tolist(), strict=True))
        if len(docs) != len(docids):
            self.raise_duplicate()
        return docs

    def raise_duplicate(self) -> None:
        """Raise the located error for a (qid, docid) pair listed twice."""
        if self.path is not None and self.container == TEXT:
            _read_run_careful(self.path, check_duplicates=True)  # raises, naming the line
        raise HarnessError("run lists a (qid, docid) pair twice; trec_eval rejects such runs")

    def to_run(self) -> Run:
        return {qid: self.ranking(index) for index, qid in enumerate(self.qids)}

    @classmethod
    def from_run(cls, run: Run) -> RunColumns:
        """Columns of an in-memory run (scores must be numbers)."""
        import pyarrow as pa

        qids = [str(qid) for qid in run]
        sizes = [len(docs) for docs in run.values()]
        offsets = np.zeros(len(qids) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        docids = pa.array([str(docid) for docs in run.values() for docid in docs], type=pa.large_string())
        try:
            scores = np.fromiter(
                (float(score) for docs in run.values() for score in docs.values()),
                dtype=np.float64,
                count=int(offsets[-1]),
            )
        except (TypeError, ValueError) as error:
            raise HarnessError(f"run scores must be numbers: {error}") from None
        if np.isnan(scores).any():
            raise HarnessError("run scores must be comparable numbers, not NaN")
        return cls(qids, offsets, docids, scores)


def read_run(path: str | os.PathLike, *, rules: str = DEFAULT_INPUT_RULES, finite: bool = False) -> Run:
    """Read a run (TREC ``qid Q0 docid rank score tag``, ranx JSON, parquet or ``irds:<id>``) into dicts;
    see :func:`read_run_columns`."""
    return read_run_columns(path, rules=rules, finite=finite).to_run()


def read_run_columns(
    path: str | os.PathLike, *, rules: str = DEFAULT_INPUT_RULES, finite: bool = False
) -> RunColumns:
    """Read a TREC run as trec_eval reads it (get_trec_results.c), into columns.

    Fields split on C whitespace; lines whose first non-blank character is ``#`` are comments;
    columns after the sixth are ignored (counted in ``extra_column_lines``); the rank column is
    ignored; scores are read as C's ``strtod`` reads them (hex floats such as ``0x1p-1``, inf),
    NaN excepted. Large single-space-separated files take a fast columnar path (pyarrow);
    anything it cannot vouch for is re-read line by line, which reports the first bad line as
    ``path:line: problem``. A (qid, docid) pair listed twice is an error, as in trec_eval.

    ``rules="trec_eval"`` and ``"ultrarag"`` read as those tools do instead (:func:`_read_run_lenient`).
    ``finite`` refuses an infinite score too, naming its line (for stages that add or scale scores).

    ranx JSON, parquet (:mod:`harness.evaluation.run_formats`) and ``irds:<dataset-id>`` are read into the
    same columns and ranked the same way; ``rules`` other than ``strict`` apply to TREC text only.
    """
    check_input_rules(rules)
    dataset_id = irds_dataset_id(path)
    if dataset_id is not None:
        read_strictly(rules, f"irds:{dataset_id}", "an ir_datasets source")
        return _finite_columns(RunColumns.from_run(read_irds_run(dataset_id)), finite, f"irds:{dataset_id}")
    path = Path(path)
    _check_exists(path, "run")
    container = file_container(path, "run")
    if container != TEXT:
        read_strictly(rules, path, "ranx JSON" if container == JSON else "parquet")
        rows = read_json_run(path) if container == JSON else read_parquet_run(path)
        return _finite_columns(_columns_of_rows(rows, path, container), finite, path)
    if rules != DEFAULT_INPUT_RULES:
        return _read_run_lenient(path, rules, finite)
    columns = _read_run_fast(path, _leading_comment_lines(path))
    if columns is None:
        columns = _read_run_careful(path)
    if finite and not np.isfinite(columns.scores).all():
        _raise_infinite(path)
    if columns.extra_column_lines:
        log.warning(
            "%s: %d lines have columns after the run tag; they were ignored, as trec_eval does",
            path,
            columns.extra_column_lines,
        )
    return columns


def _columns_of_rows(rows: RunRows, path: Path, container: str) -> RunColumns:
    columns = _group(rows.qids, rows.codes, rows.docids, rows.scores, path)
    columns.notes, columns.container = rows.notes, container
    return columns


def _finite_columns(columns: RunColumns, finite: bool, source: str | Path) -> RunColumns:
    """``columns``, or (with ``finite``) the error naming the first query and document scored +-inf."""
    if finite and not np.isfinite(columns.scores).all():
        row = int(np.flatnonzero(~np.isfinite(columns.scores))[0])
        index = int(np.searchsorted(columns.offsets, row, side="right")) - 1
        docid = columns.rows(row, row + 1)[0][0]
        raise HarnessError(
            f"{source}: query {shown(columns.qids[index])}, document {shown(docid)} has an infinite score "
            f"({FINITE_FIX})"
        )
    return columns


_HEADER_LINES_SCANNED = 10_000  # comment lines at the top the fast path skips; more go to the careful reader


def _leading_comment_lines(path: Path) -> int:
    """How many lines at the top are comments (an ir_metadata header): the fast reader skips them."""
    count = 0
    for _, line in iter_lines(path):
        if count >= _HEADER_LINES_SCANNED or not line.strip() or not is_comment(line):
            break
        count += 1
    return count


_BLOCK_BYTES = 8 << 20  # bytes parsed per batch: big enough to be fast, small enough to stay lean
# C whitespace other than the space, which the fast path does not split on: a field holding one
# (or an empty field, from doubled, leading or trailing spaces) sends the file to the careful reader.
_OTHER_WHITESPACE = (b"\t", b"\x0b", b"\x0c", b"\r", b"\n")


def _odd_fields(values: pyarrow.Array) -> bool:
    """Whether a string array holds an empty field or one with whitespace the fast path kept whole
    (read straight from its offsets and bytes: far faster than a regular expression)."""
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    if len(values) and not np.all(offsets[1:] > offsets[:-1]):
        return True
    data = data_buffer.to_pybytes()[offsets[0] : offsets[-1]] if data_buffer is not None else b""
    return any(character in data for character in _OTHER_WHITESPACE)


def _read_run_fast(path: Path, skip_lines: int = 0) -> RunColumns | None:
    """Columnar read of a single-space-separated six-column file, batch by batch, keeping only the
    query codes, doc ids and scores; ``None`` when the file needs the careful reader. ``skip_lines``
    comment lines at the top (a header) are passed over."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    few = pa.dictionary(pa.int32(), pa.string())  # columns with few distinct values stay small
    types = {"qid": few, "q0": few, "docid": pa.string(), "rank": few, "score": pa.float64(), "tag": few}
    code_of: dict[str, int] = {}
    codes: list[np.ndarray] = []
    docids: list[pyarrow.Array] = []
    scores: list[np.ndarray] = []
    try:
        reader = pa_csv.open_csv(
            path,
            read_options=pa_csv.ReadOptions(
                column_names=list(RUN_COLUMNS), block_size=_BLOCK_BYTES, skip_rows=skip_lines
            ),
            parse_options=pa_csv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False),
            convert_options=pa_csv.ConvertOptions(column_types=types),
        )
        for batch in reader:
            batch_scores = _plain_batch_scores(batch)
            if batch_scores is None:
                return None
            qids = batch.column("qid")
            known = [code_of.setdefault(qid, len(code_of)) for qid in qids.dictionary.to_pylist()]
            codes.append(np.array(known, dtype=np.int32)[qids.indices.to_numpy()])
            docids.append(batch.column("docid"))
            scores.append(batch_scores)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    finally:
        pa.default_memory_pool().release_unused()  # hand arrow's freed buffers back to the OS
    if not codes:
        return None
    return _group(
        list(code_of), np.concatenate(codes), pa.chunked_array(docids), np.concatenate(scores), path
    )


def _plain_batch_scores(batch: pyarrow.RecordBatch) -> np.ndarray | None:
    """The batch's scores, or None if any field needs the careful reader (other whitespace, an empty
    field, a comment line with six fields, a score arrow could not read as trec_eval does)."""
    import pyarrow.compute as pc

    qids = batch.column("qid").dictionary
    fields = [qids, *(batch.column(name).dictionary for name in ("q0", "rank", "tag")), batch.column("docid")]
    if any(_odd_fields(values) for values in fields):
        return None
    if pc.any(pc.starts_with(qids, "#")).as_py():
        return None
    score = batch.column("score")
    values = score.to_numpy(zero_copy_only=False)
    return None if score.null_count or np.isnan(values).any() else values


def _group(
    qids: list[str], codes: np.ndarray, docids: pyarrow.ChunkedArray, scores: np.ndarray, path: Path
) -> RunColumns:
    """Columns grouped by query (codes number queries in order of first appearance)."""
    import pyarrow as pa

    if len(codes) > 1 and (np.diff(codes) < 0).any():  # queries interleaved: gather each one's rows
        order = np.argsort(codes, kind="stable")
        codes, scores = codes[order], scores[order]
        docids = docids.take(pa.array(order))
    counts = np.bincount(codes, minlength=len(qids))
    offsets = np.zeros(len(qids) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return RunColumns(qids, offsets, docids, scores, path=path)


_FLUSH_LINES = 1 << 19  # lines gathered in Python lists before they become compact arrays


def _read_run_careful(path: Path, check_duplicates: bool = False) -> RunColumns:
    """Line-by-line reader: any C whitespace, comments, extra columns; names the first bad line."""
    import pyarrow as pa

    codes_of: dict[str, int] = {}
    code_chunks: list[np.ndarray] = []
    docid_chunks: list[pyarrow.Array] = []
    score_chunks: list[np.ndarray] = []
    codes: list[int] = []
    docids: list[str] = []
    scores: list[float] = []
    seen: set[tuple[str, str]] = set()
    extra = 0
    line_number = 0

    def flush() -> None:
        code_chunks.append(np.array(codes, dtype=np.int32))
        docid_chunks.append(pa.array(docids, type=pa.large_string()))
        score_chunks.append(np.array(scores, dtype=np.float64))
        codes.clear(), docids.clear(), scores.clear()

    for line_number, line in iter_lines(path):
        fields = c_fields(line)
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 6:
            raise InputError(path, line_number, f"found {len(fields)} columns", RUN_LINE_HELP)
        extra += len(fields) > 6
        qid, _, docid, _, score_text = fields[:5]
        score = parse_c_double(score_text)
        if score is None:
            raise InputError(path, line_number, f"score {score_text!r} is not a number", RUN_LINE_HELP)
        if math.isnan(score):
            raise InputError(path, line_number, "score is NaN", "every document needs a comparable score")
        if check_duplicates:
            if (qid, docid) in seen:
                raise InputError(
                    path,
                    line_number,
                    f"duplicate document {docid!r} for query {qid!r}",
                    "trec_eval rejects runs that list a (qid, docid) pair twice",
                )
            seen.add((qid, docid))
        codes.append(codes_of.setdefault(qid, len(codes_of)))
        docids.append(docid)
        scores.append(score)
        if len(codes) >= _FLUSH_LINES:
            flush()
    if not codes_of:
        raise InputError(path, max(line_number, 1), "no run lines (empty file)", RUN_LINE_HELP)
    flush()
    columns = _group(
        list(codes_of),
        np.concatenate(code_chunks),
        pa.chunked_array(docid_chunks),
        np.concatenate(score_chunks),
        path,
    )
    columns.extra_column_lines = extra
    return columns


FINITE_FIX = "fusion adds and scales scores: give every document a finite score"


def _raise_infinite(path: Path) -> None:
    """The located error for the first infinite score of a (strictly read) run."""
    for number, line in iter_lines(path):
        fields = c_fields(line)
        if (
            len(fields) >= 6
            and not fields[0].startswith("#")
            and math.isinf(parse_c_double(fields[4]) or 0.0)
        ):
            raise InputError(path, number, f"score {shown(fields[4])} is infinite", FINITE_FIX)


def _read_run_lenient(path: Path, rules: str, finite: bool) -> RunColumns:
    """A run read exactly as trec_eval 10 (``rules="trec_eval"``) or UltraRAG (``"ultrarag"``) reads it.

    trec_eval: blank lines and lines whose first non-blank character is ``#`` skipped, a line with fewer
    than 6 fields an error (trec_eval stops there), scores by ``strtod`` (``0.5abc`` is 0.5, ``nan``),
    a pair listed twice an error. A query holding a NaN score is ranked as trec_eval 10 ranks it
    (:func:`trec_eval_order`) and its scores replaced by that ranking (n .. 1). UltraRAG: lines split by
    ``str.split`` and skipped below 6 fields, a score ``float()`` cannot read is 0, the last line of a
    pair listed twice kept; NaN is an error (pytrec_eval's order of NaN is undefined).
    """
    run: Run = {}
    tally = dict.fromkeys(_LENIENT_NOTES, 0)
    extra = number = 0
    parse_line = _trec_eval_run_line if rules == "trec_eval" else _ultrarag_run_line
    for number, line in rule_lines(path, rules):
        parsed = parse_line(path, number, line, tally)
        if parsed is None:
            continue
        fields, score = parsed
        if finite and not math.isfinite(score):
            raise InputError(path, number, f"score {shown(fields[4])} is not a finite number", FINITE_FIX)
        extra += len(fields) > 6
        docs = run.setdefault(fields[0], {})
        if fields[2] in docs:
            if rules == "trec_eval":
                raise InputError(
                    path,
                    number,
                    f"duplicate document {fields[2]!r} for query {fields[0]!r}",
                    "trec_eval 10 rejects runs that list a (qid, docid) pair twice",
                )
            tally["repeated"] += 1
        docs[fields[2]] = score
    if not run:
        raise InputError(path, max(number, 1), "no run lines (empty file?)", RUN_LINE_HELP)
    for qid, docs in run.items():
        if any(math.isnan(score) for score in docs.values()):
            tally["nan"] += 1
            order = trec_eval_order(docs)
            run[qid] = {docid: float(len(order) - rank) for rank, docid in enumerate(order)}
    columns = RunColumns.from_run(run)
    columns.path, columns.extra_column_lines = path, extra
    columns.notes = [f"{count} {_LENIENT_NOTES[what]}" for what, count in tally.items() if count]
    return columns


_LENIENT_NOTES = {
    "short": "non-blank lines with fewer than 6 fields skipped, as UltraRAG does",
    "unread": "scores that float() cannot read taken as 0, as UltraRAG does",
    "repeated": "repeated (query, document) pairs: the last line kept, as UltraRAG does",
    "nan": "queries with a NaN score ranked as trec_eval 10 ranks them (glibc's merge sort)",
}


def _trec_eval_run_line(
    path: Path, number: int, line: str, tally: dict[str, int]
) -> tuple[list[str], float] | None:
    """get_trec_results.c: (fields, strtod of the score), None for a blank or comment line."""
    fields = c_fields(line)
    if not fields or fields[0].startswith("#"):
        return None
    if len(fields) < 6:
        raise InputError(
            path,
            number,
            f"found {len(fields)} fields; trec_eval 10 stops here (Malformed line)",
            RUN_LINE_HELP,
        )
    return fields, strtod_prefix(fields[4])


def _ultrarag_run_line(
    path: Path, number: int, line: str, tally: dict[str, int]
) -> tuple[list[str], float] | None:
    """UltraRAG's _load_run: (fields, float() of the score or 0), None for a line of fewer than 6 fields."""
    fields = line.strip().split()
    if len(fields) < 6:
        tally["short"] += bool(fields)
        return None
    try:
        score = float(fields[4])
    except ValueError:
        tally["unread"] += 1
        return fields, 0.0
    if math.isnan(score):
        raise InputError(
            path,
            number,
            f"score {shown(fields[4])} is NaN: UltraRAG hands it to pytrec_eval, whose order of a NaN is "
            "undefined (a C++ sort with an inconsistent comparison), so there is no number to match",
            "give the document a score",
        )
    return fields, score


def _trec_eval_compare(first: tuple[str, float], second: tuple[str, float]) -> int:
    """trec_eval's comp_sim_docno: score descending, then docno descending; a NaN compares equal to
    every score, so only the docnos decide against it (an inconsistent order, hence the sort matters)."""
    if first[1] > second[1]:
        return -1
    if first[1] < second[1]:
        return 1
    return (first[0] < second[0]) - (first[0] > second[0])


def _glibc_merge_sort(items: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """glibc's qsort (msort.c): halves of n // 2 and the rest, merged taking the left item while it
    compares <= 0. Only the order of comparisons matters for an inconsistent comparison such as NaN's."""
    if len(items) <= 1:
        return items
    left, right = _glibc_merge_sort(items[: len(items) // 2]), _glibc_merge_sort(items[len(items) // 2 :])
    merged, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        if _trec_eval_compare(left[i], right[j]) <= 0:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    return merged + left[i:] + right[j:]


def trec_eval_order(docs: Mapping[str, float]) -> list[str]:
    """Docids in the order trec_eval 10 ranks them on glibc, NaN scores included: get_trec_results.c
    sorts a query's lines by docno, then form_res_rels.c sorts them by score with ``qsort``."""
    by_docno = sorted(docs.items())
    return [docid for docid, _ in _glibc_merge_sort(by_docno)]


def _check_field(value: str, what: str) -> None:
    if value.split() != [value]:
        raise HarnessError(f"cannot write run: {what} {value!r} is empty or contains whitespace")


def write_run(
    path: str | os.PathLike, run: Run, tag: str, top_k: int | None = None, header: Header | None = None
) -> None:
    """Write a run atomically, in the container its name says: TREC text (``.gz`` compressed), ranx JSON
    (``.json``, ``.json.gz``) or parquet (``.parquet``).

    Queries are sorted by qid, each ranked in trec_eval order (TREC: with ranks 1..n), scores written as the
    shortest text that reads back to the same float64. ``top_k`` keeps only the best k documents per query.
    ``header`` (an ir_metadata mapping, :func:`harness.evaluation.ir_metadata.run_header`) heads a TREC run
    as ``#`` lines and goes into a parquet run's metadata; ranx JSON has no place for it.
    """
    path = Path(path)
    _check_field(tag, "tag")
    if top_k is not None and top_k < 1:
        raise HarnessError(f"top_k must be at least 1, got {top_k}")
    container = output_container(path)
    rankings = _rankings(run, top_k)
    if container == JSON:
        write_json_run(path, rankings)
    elif container == PARQUET:
        write_parquet_run(path, rankings, None if header is None else header_text(header))
    else:
        with text_output(path) as handle:
            if header is not None:
                handle.write("".join(f"{line}\n" for line in header_lines(header)))
            for qid, ranking in rankings:
                _check_field(qid, "query id")
                lines = []
                for rank, (docid, score) in enumerate(ranking, start=1):
                    _check_field(docid, "document id")
                    lines.append(f"{qid} Q0 {docid} {rank} {score!r} {tag}\n")
                handle.write("".join(lines))


def _rankings(run: Run, top_k: int | None) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """Each query (sorted by qid) with its ranking in trec_eval order, scores as floats; NaN is an error."""
    for qid in sorted(run):
        docs = run[qid]
        ranking = sorted_ranking(docs) if top_k is None else top_k_ranking(docs, top_k)
        for docid, score in ranking:
            if math.isnan(float(score)):
                raise HarnessError(f"cannot write run: NaN score for query {qid!r}, document {docid!r}")
        yield qid, [(docid, float(score)) for docid, score in ranking]


def run_labels(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Short names for runs (file name without extensions), or the full paths when those collide."""
    names = [Path(path).name.removesuffix(".gz") for path in paths]
    suffixes = (".trec", ".run", ".txt", ".tsv", ".json", ".parquet", ".parq")
    names = [Path(name).stem if Path(name).suffix in suffixes else name for name in names]
    return names if len(set(names)) == len(names) else [str(path) for path in paths]


def cut_run(run: RunColumns, depth: int, score_precision: str) -> Run:
    """Each query's first ``depth`` documents in trec_eval order, as ``trec_eval -M depth`` scores them.

    With ``float32`` the scores are rounded first, as trec_eval 9 reads them, so a tie that rounding
    makes is broken by docid at the cut exactly as it is when ranking.
    """
    cut: Run = {}
    for qid, docs in run.to_run().items():
        if score_precision == "float32":
            with np.errstate(over="ignore"):
                docs = {doc: float(np.float32(score)) for doc, score in docs.items()}
        cut[qid] = dict(top_k_ranking(docs, depth))
    return cut
