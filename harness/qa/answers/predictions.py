"""Reading a JSONL file of RAG answers: one question per line, its gold answers and the system's prediction.

Every problem is reported with the file and line it comes from. Structural problems (a line that is not
JSON, a missing key, a gold answer of an unusable shape) stop the run with an ``InputError``; problems a
run can survive are counted instead: empty predictions are kept and scored 0, and a repeated id keeps its
first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import iter_lines, json_kind, json_text, parse_json

# How many duplicate ids a report lists by name; the count is always complete.
MAX_LISTED_DUPLICATES = 10
# The JSON keys read by default (FlashRAG's and UltraRAG's field names); ``--gold-key`` etc. name others.
GOLD_KEY = "golden_answers"
PRED_KEY = "pred_answer"
ID_KEY = "id"
CHOICES_KEY = "choices"


@dataclass(frozen=True)
class QARecord:
    """One question: gold answers as groups of aliases, and the prediction (``""`` when empty)."""

    qid: str
    line: int
    gold_groups: tuple[tuple[str, ...], ...]
    prediction: str

    @property
    def golds(self) -> list[str]:
        """Every alias of every group, in order, without repeats: the candidates "max over golds" ranges over."""
        return list(dict.fromkeys(alias for group in self.gold_groups for alias in group))

    @property
    def is_empty(self) -> bool:
        return not self.prediction.strip()


@dataclass
class QAFile:
    """The questions of one predictions file and what was counted while reading it."""

    path: Path
    records: list[QARecord]
    empty_predictions: int = 0
    # (id, first line, repeated line) for each dropped repeat.
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)

    def by_id(self) -> dict[str, QARecord]:
        return {record.qid: record for record in self.records}

    def warnings(self) -> dict[str, Any]:
        """The counted problems, in the shape the JSON report stores them."""
        return {
            "empty_predictions": self.empty_predictions,
            "duplicate_ids": len(self.duplicates),
            "duplicate_examples": [
                {"id": qid, "first_line": first, "repeated_line": repeated}
                for qid, first, repeated in self.duplicates[:MAX_LISTED_DUPLICATES]
            ],
        }


def iter_json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` per non-blank line of a JSONL file; anything but a JSON object there is
    one ``InputError`` naming the file and line."""
    for number, text in iter_lines(path):
        if not text.strip():
            continue
        row = parse_json(text, path, number, fix="one JSON object per line")
        if not isinstance(row, dict):
            raise InputError(path, number, f"expected a JSON object, got {type(row).__name__}")
        yield number, row


# NaN and Infinity are not standard JSON; Python's json reads them as numbers, never as answers or ids.
_NON_FINITE = ("NaN", "Infinity", "-Infinity")
QUOTE_FIX = 'NaN and Infinity are not text: quote them ("NaN") if that is the answer'


def _shown(value: Any) -> str:
    """A value for an error line: NaN/Infinity as written in the file, anything else as its repr."""
    kind = json_kind(value)
    if kind in _NON_FINITE:
        return kind
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."  # one readable line, whatever the file holds


def not_text(key: str, value: Any, fix: str) -> tuple[str, str]:
    """``(problem, fix)`` for a value of ``key`` that must be text and is not; NaN/Infinity get their own fix."""
    kind = json_kind(value)
    if kind in _NON_FINITE:
        return f"{key!r} is {kind}, not text", QUOTE_FIX
    return f"{key!r} is {type(value).__name__}, not a string", fix


def _choice_text(index: int, choices: list[Any], path: Path, line: int, gold_key: str) -> str:
    """Multiple-choice gold: an integer index into the record's choices."""
    if not 0 <= index < len(choices):
        raise InputError(
            path,
            line,
            f"{gold_key!r} holds {index!r}, which is not an index into the {len(choices)} choices",
            "with choices, gold answers are 0-based choice indices",
        )
    text = json_text(choices[index])
    if text is None:
        raise InputError(path, line, *not_text(f"choice {index}", choices[index], "store the choice text"))
    return text


def parse_gold(
    value: Any, path: Path, line: int, gold_key: str, choices: list[Any] | None = None
) -> tuple[tuple[str, ...], ...]:
    """Gold answers as groups of aliases.

    - ``"a"`` -> one group ``("a",)``;
    - ``["a", "b"]`` -> one group of aliases ``("a", "b")`` (the usual NQ/TriviaQA form);
    - ``[["a", "b"], ["c"]]`` -> two groups, each a distinct answer with its aliases (ASQA's form);
    - with ``choices``, integers are 0-based indices into them (multiple choice); strings stay answers.
    Aliases that are blank are dropped; a gold with no alias left is an error.
    """

    def alias(item: Any) -> str:
        if choices and isinstance(item, int) and not isinstance(item, bool):
            return _choice_text(item, choices, path, line, gold_key)
        text = json_text(item)
        if text is None:
            raise InputError(
                path,
                line,
                f"{gold_key!r} holds {_shown(item)}, which is not an answer string",
                "gold answers are a string, a list of strings or a list of lists of strings",
            )
        return text

    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        raw_groups = [[alias(item) for item in group] for group in value]
    elif isinstance(value, list):
        if any(isinstance(item, list) for item in value):
            raise InputError(
                path,
                line,
                f"{gold_key!r} mixes strings and lists",
                "use a flat list of aliases, or a list of alias lists (one per answer)",
            )
        raw_groups = [[alias(item) for item in value]]
    else:
        raw_groups = [[alias(value)]]
    groups = tuple(
        tuple(text for text in group if text.strip()) for group in raw_groups if any(t.strip() for t in group)
    )
    if not groups:
        raise InputError(path, line, f"{gold_key!r} has no non-empty gold answer", "every question needs one")
    return groups


def _prediction_text(value: Any, path: Path, line: int, pred_key: str) -> str:
    if value is None:
        return ""
    text = json_text(value)
    if text is None:
        raise InputError(path, line, *not_text(pred_key, value, "store the answer text"))
    return text


def read_predictions(
    path: str | Path,
    *,
    gold_key: str = GOLD_KEY,
    pred_key: str = PRED_KEY,
    id_key: str = ID_KEY,
    choices_key: str = CHOICES_KEY,
) -> QAFile:
    """Read a predictions JSONL file; raise ``InputError`` (``path:line: ...``) on the first structural problem."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"{path}: predictions file not found")
    records: list[QARecord] = []
    first_line: dict[str, int] = {}
    result = QAFile(path=path, records=records)
    for number, row in iter_json_objects(path):
        for key, option in ((id_key, "--id-key"), (gold_key, "--gold-key"), (pred_key, "--pred-key")):
            if key not in row:
                present = ", ".join(map(str, row)) or "none"
                raise InputError(
                    path,
                    number,
                    f"missing key {key!r}",
                    f"keys on this line: {present}; {option} names another",
                )
        qid = json_text(row[id_key])
        if qid is None:
            raise InputError(path, number, *not_text(id_key, row[id_key], "ids are strings or numbers"))
        choices = row.get(choices_key)
        if choices is not None and not isinstance(choices, list):
            raise InputError(path, number, f"{choices_key!r} is not a list")
        groups = parse_gold(row[gold_key], path, number, gold_key, choices or None)
        prediction = _prediction_text(row[pred_key], path, number, pred_key)
        if qid in first_line:
            result.duplicates.append((qid, first_line[qid], number))
            continue
        first_line[qid] = number
        record = QARecord(qid=qid, line=number, gold_groups=groups, prediction=prediction)
        result.empty_predictions += record.is_empty
        records.append(record)
    if not records:
        raise HarnessError(f"{path}: no predictions in the file")
    return result
