"""TREC run files: reading, writing, and the one ranking tie rule (qrels are read by ``datasets.qrels``).

Rankings follow trec_eval: score descending, then document id descending (compared as
strings); the rank column of a run file is ignored. Every stage that orders documents
goes through :func:`sorted_ranking` / :func:`top_k_ranking` so the rule lives in one place.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write, iter_lines
from harness.datasets.qrels import Qrels as Qrels  # re-exported: the type lives with the one qrels reader

if TYPE_CHECKING:
    import pyarrow

Run = dict[str, dict[str, float]]

RUN_COLUMNS = ("qid", "q0", "docid", "rank", "score", "tag")
RUN_LINE_HELP = "expected 6 columns: qid Q0 docid rank score tag"


def _ranking_key(item: tuple[str, float]) -> tuple[float, str]:
    return (item[1], item[0])


def sorted_ranking(docs: dict[str, float]) -> list[tuple[str, float]]:
    """``(docid, score)`` pairs in trec_eval order: score descending, then docid descending."""
    return sorted(docs.items(), key=_ranking_key, reverse=True)


def top_k_ranking(docs: dict[str, float], k: int) -> list[tuple[str, float]]:
    """The first ``k`` entries of :func:`sorted_ranking`, without sorting the whole ranking.

    numpy finds the k-th largest score; only documents scoring at least that much (k plus
    any ties at the boundary) are sorted by the tie rule.
    """
    if k >= len(docs):
        return sorted_ranking(docs)
    if k <= 0:
        return []
    scores = np.fromiter(docs.values(), dtype=np.float64, count=len(docs))
    threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
    docids = list(docs)
    candidates = [(docids[i], docs[docids[i]]) for i in np.flatnonzero(scores >= threshold).tolist()]
    return sorted(candidates, key=_ranking_key, reverse=True)[:k]


def _check_exists(path: Path, what: str) -> None:
    if not path.is_file():
        raise HarnessError(f"{what} file not found: {path}")


def read_run(path: str | os.PathLike) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``); the rank column is ignored.

    Large single-space-separated files take a fast columnar path (pyarrow); anything it
    cannot vouch for is re-read line by line, which accepts any whitespace and reports the
    first bad line as ``path:line: problem``. A (qid, docid) pair listed twice is an error,
    as in trec_eval.
    """
    path = Path(path)
    _check_exists(path, "run")
    run = _read_run_fast(path)
    if run is None:
        run = _read_run_careful(path)
    return run


# The characters str.split() splits on (str.isspace()), as a regular expression for pyarrow:
# a field containing one, or an empty field (from doubled spaces), needs the careful reader.
_WHITESPACE = (0x9, 0xA, 0xB, 0xC, 0xD, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680)
_WHITESPACE += (*range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
_NOT_ONE_TOKEN = "^$|[" + "".join(f"\\x{{{code:x}}}" for code in _WHITESPACE) + "]"
_BLOCK_BYTES = 8 << 20  # bytes parsed per batch: big enough to be fast, small enough to stay lean


def _read_run_fast(path: Path) -> Run | None:
    """Columnar read, batch by batch; ``None`` whenever the file needs the careful reader."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    # Columns with few distinct values are dictionary-encoded; docids stay plain (faster to read).
    few = pa.dictionary(pa.int32(), pa.string())
    types = {"qid": few, "q0": few, "docid": pa.string(), "rank": few, "score": pa.float64(), "tag": few}
    run: Run = {}
    try:
        reader = pa_csv.open_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=list(RUN_COLUMNS), block_size=_BLOCK_BYTES),
            parse_options=pa_csv.ParseOptions(delimiter=" ", quote_char=False),
            convert_options=pa_csv.ConvertOptions(column_types=types),
        )
        for batch in reader:
            if not _add_batch(run, batch):
                return None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    finally:
        pa.default_memory_pool().release_unused()  # hand arrow's freed buffers back to the OS
    return run or None


def _add_batch(run: Run, batch: pyarrow.RecordBatch) -> bool:
    """Add one record batch to ``run``; False if the batch needs the careful reader."""
    import pyarrow.compute as pc

    fields = [
        *(batch.column(name).dictionary for name in ("qid", "q0", "rank", "tag")),
        batch.column("docid"),
    ]
    if any(pc.any(pc.match_substring_regex(values, _NOT_ONE_TOKEN)).as_py() for values in fields):
        return False
    score_column = batch.column("score")
    scores = score_column.to_numpy()
    if score_column.null_count or np.isnan(scores).any():
        return False
    query_codes = batch.column("qid").indices.to_numpy()
    qids = batch.column("qid").dictionary.to_pylist()
    docids, score_list = batch.column("docid").to_pylist(), scores.tolist()
    # Runs list each query's documents together: add every stretch of one query at once.
    bounds = [0, *(np.flatnonzero(query_codes[1:] != query_codes[:-1]) + 1).tolist(), len(query_codes)]
    for start, end in itertools.pairwise(bounds):
        ranking = run.setdefault(qids[query_codes[start]], {})
        before = len(ranking)
        ranking.update(zip(docids[start:end], score_list[start:end], strict=True))
        if len(ranking) - before != end - start:
            return False  # duplicate (qid, docid): the careful reader names the line
    return True


def _read_run_careful(path: Path) -> Run:
    run: Run = {}
    line_number = 0
    for line_number, line in iter_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise InputError(path, line_number, f"found {len(fields)} columns", RUN_LINE_HELP)
        qid, _, docid, _, score_text, _ = fields
        try:
            score = float(score_text)
        except ValueError:
            raise InputError(
                path, line_number, f"score {score_text!r} is not a number", RUN_LINE_HELP
            ) from None
        if math.isnan(score):
            raise InputError(path, line_number, "score is NaN", "every document needs a comparable score")
        ranking = run.setdefault(qid, {})
        if docid in ranking:
            raise InputError(
                path,
                line_number,
                f"duplicate document {docid!r} for query {qid!r}",
                "trec_eval rejects runs that list a (qid, docid) pair twice",
            )
        ranking[docid] = score
    if not run:
        raise InputError(path, max(line_number, 1), "no run lines (empty file)", RUN_LINE_HELP)
    return run


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
