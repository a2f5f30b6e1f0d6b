"""The one qrels reader: BEIR TSV (``query-id corpus-id score``) and TREC qrels (``qid iter docid rel``).

Every stage reads judgements here (``harness eval`` through ``load_dataset``, ``harness evaluate`` and
``harness compare`` directly), so one file gets one verdict. Relevance stays an int, negative and
graded values included (trec_eval decides what they mean).

Text follows trec_eval's reader (get_qrels.c): fields split on C whitespace (space, tab, CR, LF, VT,
FF; a no-break space is part of an id), lines whose first non-blank character is ``#`` are comments
(a ``#`` inside a field, as in ``CR#93E-1860``, is not), and relevance is read as C's ``atol`` reads a
number: ``1.5`` is 1, ``-0.5`` is 0. Text that is not a number at all is an error here (``atol`` would
silently read 0). A dataset folder's ``qrels/<split>.tsv`` (``layout="beir"``) keeps BEIR's rule instead:
grades are whole numbers, as BEIR's loader reads them with ``int``.

A (query, document) pair judged twice is an error by default, as in trec_eval (form_res_rels.c:
"duplicate docs"); ``duplicates="last"`` keeps the last row instead, as BEIR's loader does, and
counts the repeats so ``harness data verify`` can report them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import iter_lines

Qrels = dict[str, dict[str, int]]

DUPLICATE_POLICIES = ("error", "last")
DEFAULT_DUPLICATES = "error"
# "auto": TREC or BEIR, columns split on any whitespace. "beir": a dataset folder's qrels/<split>.tsv,
# exactly three tab-separated columns (ids may then contain spaces).
QRELS_LAYOUTS = ("auto", "beir")

QRELS_LINE_HELP = "expected `qid iter docid rel` (TREC) or `query-id corpus-id score` (BEIR TSV)"
BEIR_LINE_HELP = "BEIR qrels are TSV; convert 4-column TREC qrels by dropping the iteration column"
BEIR_SPACES_HELP = "BEIR qrels separate columns by tabs: replace the spaces, e.g. sed -E 's/ +/\\t/g'"
DUPLICATES_FIX = "trec_eval refuses them; fix the file, or pass --qrels-duplicates last to keep the last row"


@dataclass
class QrelsFile:
    """The judgements of one qrels file: ``qrels[query_id][doc_id] = relevance``."""

    qrels: Qrels
    rows: int  # data rows read (the count BEIR's tables report)
    duplicate_rows: int  # rows repeating a (query, doc) pair (only with duplicates="last": last one kept)
    path: Path | None = None
    first_duplicate_line: int | None = None  # line of the first repeat, to point at it later


def check_duplicates_policy(duplicates: str) -> str:
    """``duplicates`` if it is a known policy; anything else is a ``HarnessError`` naming the choices."""
    if duplicates not in DUPLICATE_POLICIES:
        raise HarnessError(
            f"unknown qrels duplicates policy {duplicates!r}; choose one of {', '.join(DUPLICATE_POLICIES)}"
        )
    return duplicates


# C's isspace() in the "C" locale: what trec_eval splits fields on.
C_WHITESPACE = " \t\n\v\f\r"
_C_FIELDS = re.compile(r"[^ \t\n\v\f\r]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?")
_SPECIAL = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
_LEADING_INT = re.compile(r"[+-]?[0-9]*")


def c_fields(line: str) -> list[str]:
    """The fields of a line as trec_eval splits it: on C whitespace only."""
    return _C_FIELDS.findall(line)


def is_comment(line: str) -> bool:
    """trec_eval 10 skips lines whose first non-blank character is ``#``."""
    return line.lstrip(C_WHITESPACE).startswith("#")


def parse_c_double(text: str) -> float | None:
    """The number C's ``strtod`` reads from the whole of ``text`` (decimal, hex float such as
    ``0x1p-1``, inf, nan), or None when ``text`` is not entirely one number."""
    if _DECIMAL.fullmatch(text) or _SPECIAL.fullmatch(text):
        return float(text)
    if _HEX.fullmatch(text):
        body = text.lstrip("+-")
        value = float.fromhex(body if "p" in body.lower() else body + "p0")
        return -value if text.startswith("-") else value
    return None


def parse_c_long(text: str) -> int | None:
    """The integer C's ``atol`` reads from a decimal number (``1.5`` -> 1, ``-0.5`` -> 0, ``2e3`` -> 2),
    or None when ``text`` is not a decimal number (``atol`` would read 0 from it silently)."""
    if not _DECIMAL.fullmatch(text):
        return None
    digits = _LEADING_INT.match(text).group(0)
    return int(digits) if digits.strip("+-") else 0


def _is_int(text: str) -> bool:
    return parse_c_long(text) is not None


def _is_whole_number(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


Row = tuple[str, str, int]
RowParser = Callable[[Path, int, str], "Row | None"]


class _AutoRows:
    """TREC or BEIR rows split on whitespace; the first row fixes the column count (3 or 4)."""

    def __init__(self) -> None:
        self.n_columns: int | None = None

    def __call__(self, path: Path, number: int, line: str) -> Row | None:
        fields = c_fields(line)
        if not fields or fields[0].startswith("#"):
            return None  # blank, or a comment line
        if self.n_columns is None:
            if len(fields) not in (3, 4):
                raise InputError(path, number, f"found {len(fields)} columns", QRELS_LINE_HELP)
            self.n_columns = len(fields)
            if self.n_columns == 3 and not _is_int(fields[2]):
                return None  # the BEIR header line `query-id corpus-id score`
        if len(fields) != self.n_columns:
            raise InputError(
                path,
                number,
                f"found {len(fields)} columns, earlier lines have {self.n_columns}",
                QRELS_LINE_HELP,
            )
        rel_text = fields[-1]
        relevance = parse_c_long(rel_text)
        if relevance is None:
            raise InputError(
                path,
                number,
                f"relevance {rel_text!r} is not an integer",
                "relevance grades are whole numbers such as 0, 1, 2",
            )
        return fields[0], fields[-2], relevance


def _beir_row(path: Path, number: int, line: str) -> Row | None:
    """A ``query-id<TAB>corpus-id<TAB>score`` row; a first line that is not a valid row is the header."""
    if not line.strip() or is_comment(line):
        return None
    columns = line.split("\t")
    if number == 1 and not (len(columns) == 3 and _is_whole_number(columns[2].strip())):
        return None  # the "query-id corpus-id score" header (a headerless first row is kept)
    if len(columns) != 3:
        spaced = len(columns) == 1 and len(line.split()) == 3
        raise InputError(
            path,
            number,
            f"expected 3 tab-separated columns (query-id, corpus-id, score), found {len(columns)}"
            + (" (the columns are separated by spaces)" if spaced else ""),
            BEIR_SPACES_HELP if spaced else BEIR_LINE_HELP,
        )
    query_id, doc_id, score_text = (column.strip() for column in columns)
    if not query_id or not doc_id:
        raise InputError(path, number, "empty query-id or corpus-id")
    if not _is_whole_number(score_text):  # BEIR's loader reads int(score): a dataset keeps that rule
        raise InputError(path, number, f"score {score_text!r} is not an integer")
    return query_id, doc_id, int(score_text)


def read_qrels(
    path: str | os.PathLike, *, duplicates: str = DEFAULT_DUPLICATES, layout: str = "auto"
) -> QrelsFile:
    """Read a qrels file (``.gz``, BOM and CRLF accepted) under the ``duplicates`` policy.

    ``layout="auto"`` takes TREC qrels or a BEIR TSV (header optional); ``layout="beir"`` insists on
    BEIR's three tab-separated columns, as a dataset folder's ``qrels/<split>.tsv`` has.
    """
    check_duplicates_policy(duplicates)
    if layout not in QRELS_LAYOUTS:
        raise HarnessError(f"unknown qrels layout {layout!r}; choose one of {', '.join(QRELS_LAYOUTS)}")
    path = Path(path)
    if path.is_dir():
        inside = sorted(path.glob("*.tsv")) or sorted(path.glob("qrels/*.tsv"))
        hint = f"; did you mean {inside[0]}?" if inside else ""
        raise HarnessError(f"qrels file {path} is a folder; expected a qrels file{hint}")
    if not path.is_file():
        raise HarnessError(f"qrels file not found: {path}")
    parse: RowParser = _AutoRows() if layout == "auto" else _beir_row
    result = QrelsFile(qrels={}, rows=0, duplicate_rows=0, path=path)
    first_line: dict[tuple[str, str], int] = {}
    number = 0
    for number, line in iter_lines(path):
        row = parse(path, number, line)
        if row is None:
            continue
        query_id, doc_id, relevance = row
        judged = result.qrels.setdefault(query_id, {})
        if doc_id in judged:
            if duplicates == "error":
                raise InputError(
                    path,
                    number,
                    f"duplicate judgment for query {query_id!r}, document {doc_id!r} "
                    f"(first on line {first_line[(query_id, doc_id)]})",
                    DUPLICATES_FIX,
                )
            result.duplicate_rows += 1
            result.first_duplicate_line = result.first_duplicate_line or number
        else:
            first_line[(query_id, doc_id)] = number
        judged[doc_id] = relevance
        result.rows += 1
    if result.rows == 0:
        problem = "no judgments in file (empty file?)"
        raise InputError(path, max(number, 1), problem, QRELS_LINE_HELP if layout == "auto" else None)
    return result
