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

``rules`` (``--input-rules``) chooses how the text is read; the default, ``strict``, is the above, with a
clear error for anything that is not a number. ``trec_eval`` reads exactly as trec_eval 10 does (no error
where it reads, an error where it stops) and ``ultrarag`` exactly as UltraRAG's evaluation server does
(:data:`INPUT_RULES_READING` says how). Under every rule a grade must fit a C ``long`` (64 bits), the
most trec_eval and pytrec_eval hold: a larger one is an error naming its line.

Besides text, qrels may be ranx's JSON (``{qid: {docid: grade}}``, ``.json`` or ``.json.gz``, or any file
whose first character is ``{``; :func:`file_container` tells which, for runs too) or an ir_datasets
dataset named ``irds:<dataset-id>`` (read where the ``ir_datasets`` package is installed; it is optional).
"""

from __future__ import annotations

import gzip
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import iter_lines, json_kind, read_json

Qrels = dict[str, dict[str, int]]

DUPLICATE_POLICIES = ("error", "last")
DEFAULT_DUPLICATES = "error"
# "auto": TREC or BEIR, columns split on any whitespace. "beir": a dataset folder's qrels/<split>.tsv,
# exactly three tab-separated columns (ids may then contain spaces).
QRELS_LAYOUTS = ("auto", "beir")

# How qrels and run files are read (``--input-rules``): each rule set, in the words the output records.
INPUT_RULES_READING = {
    "strict": "as trec_eval reads them, but a grade or score that is not entirely a number, a NaN score "
    "and a short line are errors naming the line",
    "trec_eval": "exactly as trec_eval 10: lines end at LF only, fields split on C whitespace (a lone CR "
    "too), grades read by C's atol (2abc -> 2, 0x1 -> 0), scores by strtod (0.5abc -> 0.5, nan), a run "
    "line starting with # skipped, a qrels line with # as its first byte skipped (the line after it is "
    "always read), a blank or short qrels line an error",
    "ultrarag": "exactly as UltraRAG's evaluation server (_load_qrels, _load_run): Python's str.split, "
    "universal newlines, a BOM kept in the first id, lines with fewer than 4 (qrels) or 6 (run) fields "
    "skipped, a grade int() cannot read is 1 (0 if it is '0'), a score float() cannot read is 0, "
    "a pair listed twice keeps its last line",
}
INPUT_RULES = tuple(INPUT_RULES_READING)
DEFAULT_INPUT_RULES = "strict"
# A grade must fit a C long: what trec_eval and pytrec_eval (PyLong_AsLong) hold.
GRADE_LIMIT = 1 << 63
_MAX_LONG_DIGITS = len(str(GRADE_LIMIT))
GRADE_FIX = "relevance grades are small whole numbers such as 0, 1, 2"

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
    notes: list[str] = field(default_factory=list)  # what a lenient rule set read silently (skipped lines...)


def check_duplicates_policy(duplicates: str) -> str:
    """``duplicates`` if it is a known policy; anything else is a ``HarnessError`` naming the choices."""
    if duplicates not in DUPLICATE_POLICIES:
        raise HarnessError(
            f"unknown qrels duplicates policy {duplicates!r}; choose one of {', '.join(DUPLICATE_POLICIES)}"
        )
    return duplicates


def check_input_rules(rules: str) -> str:
    """``rules`` if it is a known rule set; anything else is a ``HarnessError`` naming the choices."""
    if rules not in INPUT_RULES:
        raise HarnessError(f"unknown input rules {rules!r}; choose one of {', '.join(INPUT_RULES)}")
    return rules


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
    return atol_digits(text)


def atol_digits(text: str) -> int:
    """The integer C's ``atol`` reads from the start of a field (``2abc`` -> 2, ``0x1`` -> 0, ``abc`` -> 0),
    before ``atol`` saturates it: outside the range of a C long, glibc would give LONG_MAX or LONG_MIN."""
    digits = _LEADING_INT.match(text).group(0)
    if len(digits.lstrip("+-").lstrip("0")) > _MAX_LONG_DIGITS:  # beyond any long (and Python's int() limit)
        return -GRADE_LIMIT - 1 if digits.startswith("-") else GRADE_LIMIT
    return int(digits) if digits.strip("+-") else 0


_STRTOD_HEX = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP]([+-]?[0-9]+))?")
_STRTOD_SPECIAL = re.compile(r"[+-]?(?:infinity|inf|nan(?:\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
_STRTOD_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def strtod_prefix(text: str) -> float:
    """The number C's ``strtod`` (trec_eval's ``atof``) reads from the start of a field: the longest prefix
    that is a number (``0.5abc`` -> 0.5, ``1e`` -> 1, ``0x1p-1`` -> 0.5, ``infinit`` -> inf, ``nan(1)`` ->
    nan), 0.0 when none is (``abc``, ``.e1``)."""
    hexadecimal = _STRTOD_HEX.match(text)
    if hexadecimal:
        sign, mantissa, exponent = hexadecimal.groups()
        try:
            value = float.fromhex(f"0x{mantissa}p{exponent or 0}")
        except OverflowError:  # strtod overflows to HUGE_VAL
            value = math.inf
        return -value if sign == "-" else value
    special = _STRTOD_SPECIAL.match(text)
    if special:
        return float(special.group(0).split("(")[0])
    decimal = _STRTOD_DECIMAL.match(text)
    return float(decimal.group(0)) if decimal else 0.0


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for an error line, cut short when it is long."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def check_grade(path: Path, number: int, grade: int, text: str) -> int:
    """``grade`` if it fits a C long; else the ``InputError`` naming the line (pytrec_eval cannot take it)."""
    if -GRADE_LIMIT <= grade < GRADE_LIMIT:
        return grade
    raise InputError(
        path,
        number,
        f"relevance {shown(text)} does not fit a 64-bit integer (C long), the most trec_eval and pytrec_eval hold",
        GRADE_FIX,
    )


def rule_lines(path: Path, rules: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` as ``rules`` splits the file into lines.

    ``strict``: :func:`iter_lines` (BOM dropped, any newline). ``trec_eval``: lines end at LF only (a CR is
    whitespace inside a line) and a BOM is part of the first field, as trec_eval reads bytes.
    ``ultrarag``: Python's universal newlines (LF, CRLF and a lone CR end a line), a BOM kept, as
    ``open(path, encoding="utf-8")`` reads. ``.gz`` is read transparently under every rule.
    """
    if rules == "strict":
        yield from iter_lines(path)
        return
    number = 0
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as raw:
            for chunk in raw:
                body = chunk[:-1] if chunk.endswith(b"\n") else chunk
                if rules == "ultrarag":
                    parts = (body[:-1] if body.endswith(b"\r") else body).split(b"\r")
                else:
                    parts = [body]
                for part in parts:
                    number += 1
                    yield number, part.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(path, number, f"not UTF-8 text ({error.reason})", "save the file as UTF-8") from None
    except (OSError, EOFError) as error:
        raise HarnessError(f"cannot read {path}: {error}") from None


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
        return fields[0], fields[-2], check_grade(path, number, relevance, rel_text)


class _TrecEvalRows:
    """Rows as trec_eval 10's get_qrels.c reads them (see ``INPUT_RULES_READING["trec_eval"]``)."""

    def __init__(self) -> None:
        self.after_comment = False  # trec_eval reads the line after a comment as data, whatever it holds

    def __call__(self, path: Path, number: int, line: str) -> Row | None:
        if line.startswith("#") and not self.after_comment:
            self.after_comment = True
            return None
        self.after_comment = False
        fields = c_fields(line)
        if len(fields) != 4:
            raise InputError(
                path,
                number,
                f"found {len(fields)} fields; trec_eval 10 stops here (Malformed line): a qrels line is "
                "exactly `qid iter docno rel`, and a blank line, a comment with blanks before its # or "
                "a second comment line in a row is not skipped",
            )
        grade = atol_digits(fields[3])
        if not -GRADE_LIMIT <= grade < GRADE_LIMIT:
            raise InputError(
                path, number, f"relevance {shown(fields[3])} overflows C's atol (a 64-bit long)", GRADE_FIX
            )
        return fields[0], fields[2], grade

    def finish(self, path: Path, number: int) -> list[str]:
        if self.after_comment:
            raise InputError(
                path,
                number,
                "the last line is a comment: trec_eval 10 reads past the end of the file after it",
                "remove the comment or move it up",
            )
        return []


class _UltraragRows:
    """Rows as UltraRAG's ``_load_qrels`` reads them (see ``INPUT_RULES_READING["ultrarag"]``)."""

    def __init__(self) -> None:
        self.short_lines = 0
        self.unread_grades = 0

    def __call__(self, path: Path, number: int, line: str) -> Row | None:
        fields = line.strip().split()
        if len(fields) < 4:
            self.short_lines += bool(fields)
            return None
        text = fields[3]
        try:
            grade = int(text)
        except ValueError:
            self.unread_grades += 1
            grade = 0 if text == "0" else 1
        return fields[0], fields[2], check_grade(path, number, grade, text)

    def finish(self, path: Path, number: int) -> list[str]:
        notes = []
        if self.short_lines:
            notes.append(
                f"{self.short_lines} non-blank lines with fewer than 4 fields skipped, as UltraRAG does"
            )
        if self.unread_grades:
            notes.append(
                f"{self.unread_grades} grades that are not whole numbers read as 1 (0 only for '0'), as UltraRAG does"
            )
        return notes


_LENIENT_ROWS: dict[str, type[_TrecEvalRows | _UltraragRows]] = {
    "trec_eval": _TrecEvalRows,
    "ultrarag": _UltraragRows,
}


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
    return query_id, doc_id, check_grade(path, number, int(score_text), score_text)


# ------------------------------------------------------------------------------ containers and sources

TEXT, JSON, PARQUET = "text", "json", "parquet"
# What each kind of file may be, in the words of the one-line error for anything else.
ACCEPTED_CONTAINERS = {
    "run": "TREC text (.trec, .txt, .run; .gz too), ranx JSON {qid: {docid: score}} (.json, .json.gz) "
    "or parquet with q_id, doc_id and score columns (.parquet)",
    "qrels": "TREC or BEIR TSV text (.gz too) or ranx JSON {qid: {docid: grade}} (.json, .json.gz)",
}
_SUFFIX_CONTAINERS = {
    ".json": JSON,
    ".parquet": PARQUET,
    ".parq": PARQUET,
    **dict.fromkeys((".trec", ".run", ".txt", ".tsv", ".qrels", ".res"), TEXT),
}
# Containers that are not read, by suffix and by their first bytes: named in the error.
_UNREAD_SUFFIXES = {
    ".lz4": "LZ4 (ranx's .lz4)",
    ".jsonl": "JSON lines",
    ".zip": "a zip archive",
    ".bz2": "bzip2",
    ".xz": "xz",
    ".zst": "zstandard",
    ".pkl": "a pickle",
    ".pickle": "a pickle",
    ".npy": "a numpy array",
    ".npz": "numpy arrays",
    ".feather": "Arrow IPC",
    ".arrow": "Arrow IPC",
    ".h5": "HDF5",
    ".hdf5": "HDF5",
    ".xlsx": "a spreadsheet",
}
_UNREAD_MAGIC = {
    b"\x04\x22\x4d\x18": "LZ4 (ranx's .lz4)",
    b"PK\x03\x04": "a zip archive",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstandard",
    b"\x93NUMPY": "a numpy array",
    b"ARROW1": "Arrow IPC",
    b"\x89HDF": "HDF5",
}
_GZIP_MAGIC = b"\x1f\x8b"
_SNIFF_BYTES = 4096


def file_container(path: Path, what: str) -> str:
    """``TEXT``, ``JSON`` or ``PARQUET``: what the ``what`` file (``run`` or ``qrels``) at ``path`` holds.

    The suffix decides when it names a container (``.gz`` looks through to the suffix before it); otherwise
    the first bytes do: ``PAR1`` is parquet, a first non-blank ``{`` is JSON, anything else is text. A
    known binary container, or bytes no text has, is a ``HarnessError`` naming what the file is and what
    is read instead.
    """
    suffixes = [suffix.lower() for suffix in path.suffixes[-2:]]
    compressed = bool(suffixes) and suffixes[-1] == ".gz"
    suffix = (
        (suffixes[-2] if len(suffixes) == 2 else "") if compressed else (suffixes[-1] if suffixes else "")
    )
    if suffix in _UNREAD_SUFFIXES:
        _refuse_container(path, what, _UNREAD_SUFFIXES[suffix])
    container = _SUFFIX_CONTAINERS.get(suffix) or _sniffed_container(path, what, compressed)
    if container == PARQUET and compressed:
        _refuse_container(path, what, "gzip-compressed parquet (parquet compresses itself: drop the .gz)")
    if container not in ACCEPTED_CONTAINERS[what]:  # parquet qrels
        _refuse_container(path, what, container)
    return container


def _sniffed_container(path: Path, what: str, compressed: bool) -> str:
    try:
        with gzip.open(path, "rb") if compressed else open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except (OSError, EOFError):
        return TEXT  # the text reader names the problem (missing, unreadable, a broken .gz)
    if head.startswith(b"PAR1"):
        return PARQUET
    if head.startswith(_GZIP_MAGIC) and not compressed:
        _refuse_container(
            path, what, f"gzip-compressed, but its name does not end in .gz (rename it {path}.gz)"
        )
    for magic, name in _UNREAD_MAGIC.items():
        if head.startswith(magic):
            _refuse_container(path, what, name)
    if b"\x00" in head:
        _refuse_container(path, what, "binary data (it holds NUL bytes)")
    return JSON if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{") else TEXT


def _refuse_container(path: Path, what: str, found: str) -> None:
    raise HarnessError(
        f"{what} file {path} is {found}, which the harness does not read; give {ACCEPTED_CONTAINERS[what]}"
    )


def _json_grade(path: Path, qid: str, docid: str, grade: Any) -> int:
    """A ranx JSON grade as an int: a whole JSON number fitting a C long; anything else names the pair."""
    whole = isinstance(grade, int) or (
        isinstance(grade, float) and math.isfinite(grade) and grade.is_integer()
    )
    if isinstance(grade, bool) or not whole:
        shown_grade = grade if isinstance(grade, int | float) else f"{json_kind(grade)} {grade!r}"
        raise InputError(
            path,
            None,
            f"query {shown(qid)}, document {shown(docid)}: grade {shown_grade} is not a whole number",
            GRADE_FIX,
        )
    if not -GRADE_LIMIT <= int(grade) < GRADE_LIMIT:
        raise InputError(
            path,
            None,
            f"query {shown(qid)}, document {shown(docid)}: grade {grade} does not fit a 64-bit integer",
            GRADE_FIX,
        )
    return int(grade)


def _read_json_qrels(path: Path) -> QrelsFile:
    """ranx's JSON qrels ``{qid: {docid: grade}}``; a query with none is dropped (TREC cannot list it).

    A pair can be listed once only: JSON has one value per key (a repeated key keeps its last value, as
    Python's and ranx's JSON readers do).
    """
    payload = read_json(path)
    if not isinstance(payload, dict):
        raise InputError(
            path,
            None,
            f"ranx JSON qrels are one object {{qid: {{docid: grade}}}}, found {json_kind(payload)}",
        )
    result = QrelsFile(qrels={}, rows=0, duplicate_rows=0, path=path)
    for qid, judged in payload.items():
        if not isinstance(judged, dict):
            raise InputError(
                path, None, f"query {shown(qid)} holds {json_kind(judged)}, not {{docid: grade}}"
            )
        if judged:
            result.qrels[qid] = {
                docid: _json_grade(path, qid, docid, grade) for docid, grade in judged.items()
            }
            result.rows += len(judged)
    if result.rows == 0:
        raise InputError(path, None, "no judgments in file (an empty object?)")
    return result


IRDS_PREFIX = "irds:"
_IRDS_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9._-]+)*")
IRDS_EXAMPLE = "irds:beir/scifact/test"


def irds_dataset_id(source: str | os.PathLike) -> str | None:
    """The ir_datasets id ``source`` names as ``irds:<dataset-id>``, None when it names a file instead."""
    text = os.fspath(source)
    if not text.startswith(IRDS_PREFIX):
        return None
    dataset_id = text[len(IRDS_PREFIX) :]
    if not _IRDS_ID.fullmatch(dataset_id):
        raise HarnessError(
            f"{text!r} does not name an ir_datasets dataset; write irds:<dataset-id>, e.g. {IRDS_EXAMPLE}"
        )
    return dataset_id


def load_irds(dataset_id: str, part: str) -> Any:
    """The ir_datasets dataset ``dataset_id``, which must have ``part`` (``qrels`` or ``scoreddocs``).

    ir_datasets is optional: without it, or for an unknown id or a missing part, one ``HarnessError`` line.
    """
    try:
        import ir_datasets
    except ImportError:
        raise HarnessError(
            f"irds:{dataset_id} needs the ir_datasets package, which is not installed "
            "(pip install ir_datasets)"
        ) from None
    try:
        dataset = ir_datasets.load(dataset_id)
    except KeyError:
        raise HarnessError(
            f"ir_datasets has no dataset {dataset_id!r} (ids are listed at ir-datasets.com)"
        ) from None
    has_part = getattr(dataset, f"has_{part}", None)
    if has_part is None or not has_part():
        raise HarnessError(f"ir_datasets dataset {dataset_id!r} has no {part}")
    return dataset


def irds_rows(dataset_id: str, rows: Iterator[Any], part: str) -> Iterator[Any]:
    """``rows`` of an ir_datasets iterator, a failed download or read ending in one ``HarnessError`` line."""
    try:
        yield from rows
    except (OSError, EOFError, ValueError) as error:
        raise HarnessError(f"ir_datasets could not read {part} of {dataset_id!r}: {error}") from None


def _read_irds_qrels(dataset_id: str, duplicates: str) -> QrelsFile:
    """An ir_datasets dataset's qrels (``query_id``, ``doc_id``, ``relevance``) under ``duplicates``."""
    dataset = load_irds(dataset_id, "qrels")
    source = Path(IRDS_PREFIX + dataset_id)
    result = QrelsFile(qrels={}, rows=0, duplicate_rows=0, path=source)
    for row in irds_rows(dataset_id, dataset.qrels_iter(), "qrels"):
        judged = result.qrels.setdefault(str(row.query_id), {})
        doc_id = str(row.doc_id)
        if doc_id in judged:
            if duplicates == "error":
                raise HarnessError(
                    f"{source}: duplicate judgment for query {shown(str(row.query_id))}, "
                    f"document {shown(doc_id)} "
                    f"({DUPLICATES_FIX})"
                )
            result.duplicate_rows += 1
        judged[doc_id] = _json_grade(source, str(row.query_id), doc_id, row.relevance)
        result.rows += 1
    if result.rows == 0:
        raise HarnessError(f"{source}: ir_datasets lists no qrels")
    return result


def read_strictly(rules: str, source: str | Path, what: str) -> None:
    """Refuse lenient ``rules`` for ``source``, which is ``what`` (ranx JSON, parquet...), not TREC text."""
    if rules != DEFAULT_INPUT_RULES:
        raise HarnessError(
            f"input rules {rules!r} read TREC text; {source} is {what}, which is read strictly"
        )


def read_qrels(
    path: str | os.PathLike,
    *,
    duplicates: str = DEFAULT_DUPLICATES,
    layout: str = "auto",
    rules: str = DEFAULT_INPUT_RULES,
) -> QrelsFile:
    """Read a qrels file (``.gz``, BOM and CRLF accepted) under the ``duplicates`` policy.

    ``layout="auto"`` takes TREC qrels, a BEIR TSV (header optional) or ranx's JSON, and ``irds:<id>`` reads
    an ir_datasets dataset's qrels (where ir_datasets is installed); ``layout="beir"`` insists on
    BEIR's three tab-separated columns, as a dataset folder's ``qrels/<split>.tsv`` has. ``rules``
    other than ``strict`` read TREC qrels as that tool does (layout ``auto`` only); ``ultrarag`` keeps
    the last line of a pair judged twice, as UltraRAG does, whatever ``duplicates`` says.
    """
    check_duplicates_policy(duplicates)
    check_input_rules(rules)
    if layout not in QRELS_LAYOUTS:
        raise HarnessError(f"unknown qrels layout {layout!r}; choose one of {', '.join(QRELS_LAYOUTS)}")
    if layout != "auto" and rules != DEFAULT_INPUT_RULES:
        raise HarnessError(f"input rules {rules!r} read TREC qrels; the {layout!r} layout is read strictly")
    if rules == "ultrarag":
        duplicates = "last"
    dataset_id = irds_dataset_id(path)
    if dataset_id is not None:
        read_strictly(rules, f"irds:{dataset_id}", "an ir_datasets source")
        return _read_irds_qrels(dataset_id, duplicates)
    path = Path(path)
    if path.is_dir():
        inside = sorted(path.glob("*.tsv")) or sorted(path.glob("qrels/*.tsv"))
        hint = f"; did you mean {inside[0]}?" if inside else ""
        raise HarnessError(f"qrels file {path} is a folder; expected a qrels file{hint}")
    if not path.is_file():
        raise HarnessError(f"qrels file not found: {path}")
    if layout == "auto" and file_container(path, "qrels") == JSON:
        read_strictly(rules, path, "ranx JSON")
        return _read_json_qrels(path)
    lenient = _LENIENT_ROWS[rules]() if rules in _LENIENT_ROWS else None
    parse: RowParser = lenient or (_AutoRows() if layout == "auto" else _beir_row)
    result = QrelsFile(qrels={}, rows=0, duplicate_rows=0, path=path)
    first_line: dict[tuple[str, str], int] = {}
    number = 0
    for number, line in rule_lines(path, rules):
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
    if lenient:
        result.notes = lenient.finish(path, number)
        if result.duplicate_rows:
            result.notes.append(
                f"{result.duplicate_rows} repeated (query, document) pairs: the last line kept"
            )
    if result.rows == 0:
        problem = "no judgments in file (empty file?)"
        raise InputError(path, max(number, 1), problem, QRELS_LINE_HELP if layout == "auto" else None)
    return result
