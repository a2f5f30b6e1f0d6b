"""TREC run files: reading, writing, and the one ranking tie rule (qrels are read by ``datasets.qrels``).

Rankings follow trec_eval: score descending, then document id descending (compared as
strings); the rank column of a run file is ignored. Every stage that orders documents
goes through :func:`sorted_ranking` / :func:`top_k_ranking` / :func:`ranking_order`, whose one
home is ``harness.core.ranking`` (below the retrieval stage, which fuses and re-ranks); they are
re-exported here.

Runs are read as trec_eval 10 reads them (see :func:`read_run_columns`) into
:class:`RunColumns`, which evaluation consumes directly; :func:`read_run` gives the same run as
``{qid: {docid: score}}`` for the stages that want dicts.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write, iter_lines
from harness.core.ranking import Run as Run
from harness.core.ranking import ranking_order as ranking_order
from harness.core.ranking import sorted_ranking as sorted_ranking
from harness.core.ranking import top_k_ranking as top_k_ranking
from harness.datasets.qrels import Qrels as Qrels  # re-exported: the type lives with the one qrels reader
from harness.datasets.qrels import c_fields, parse_c_double

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
        if self.path is not None:
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


def read_run(path: str | os.PathLike) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``) into dicts; see :func:`read_run_columns`."""
    return read_run_columns(path).to_run()


def read_run_columns(path: str | os.PathLike) -> RunColumns:
    """Read a TREC run as trec_eval reads it (get_trec_results.c), into columns.

    Fields split on C whitespace; lines whose first non-blank character is ``#`` are comments;
    columns after the sixth are ignored (counted in ``extra_column_lines``); the rank column is
    ignored; scores are read as C's ``strtod`` reads them (hex floats such as ``0x1p-1``, inf),
    NaN excepted. Large single-space-separated files take a fast columnar path (pyarrow);
    anything it cannot vouch for is re-read line by line, which reports the first bad line as
    ``path:line: problem``. A (qid, docid) pair listed twice is an error, as in trec_eval.
    """
    path = Path(path)
    _check_exists(path, "run")
    columns = _read_run_fast(path)
    if columns is None:
        columns = _read_run_careful(path)
    if columns.extra_column_lines:
        log.warning(
            "%s: %d lines have columns after the run tag; they were ignored, as trec_eval does",
            path,
            columns.extra_column_lines,
        )
    return columns


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


def _read_run_fast(path: Path) -> RunColumns | None:
    """Columnar read of a single-space-separated six-column file, batch by batch, keeping only the
    query codes, doc ids and scores; ``None`` when the file needs the careful reader."""
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
            read_options=pa_csv.ReadOptions(column_names=list(RUN_COLUMNS), block_size=_BLOCK_BYTES),
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
    return _group(list(code_of), np.concatenate(codes), pa.chunked_array(docids), np.concatenate(scores), path)


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


def _check_field(value: str, what: str) -> None:
    if value.split() != [value]:
        raise HarnessError(f"cannot write run: {what} {value!r} is empty or contains whitespace")


def write_run(path: str | os.PathLike, run: Run, tag: str, top_k: int | None = None) -> None:
    """Write a TREC run atomically: queries sorted by qid, each ranked in trec_eval order with
    ranks 1..n, scores printed as the shortest string that reads back to the same float.
    ``top_k`` keeps only the best k documents per query.
    """
    _check_field(tag, "tag")
    if top_k is not None and top_k < 1:
        raise HarnessError(f"top_k must be at least 1, got {top_k}")
    with atomic_write(path) as handle:
        for qid in sorted(run):
            _check_field(qid, "query id")
            docs = run[qid]
            ranking = sorted_ranking(docs) if top_k is None else top_k_ranking(docs, top_k)
            lines = []
            for rank, (docid, score) in enumerate(ranking, start=1):
                _check_field(docid, "document id")
                value = float(score)
                if math.isnan(value):
                    raise HarnessError(f"cannot write run: NaN score for query {qid!r}, document {docid!r}")
                lines.append(f"{qid} Q0 {docid} {rank} {value!r} {tag}\n")
            handle.write("".join(lines))


def run_labels(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Short names for runs (file name without extensions), or the full paths when those collide."""
    names = [Path(path).name.removesuffix(".gz") for path in paths]
    names = [
        Path(name).stem if Path(name).suffix in (".trec", ".run", ".txt", ".tsv") else name for name in names
    ]
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
