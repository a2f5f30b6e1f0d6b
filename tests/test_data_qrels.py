"""The one qrels reader (harness.datasets.qrels): TREC and BEIR layouts, located errors, real files.

Moved from test_runfile.py with the reader; the duplicates policy end to end: test_data_qrels_duplicates.py.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from harness.core.errors import InputError
from harness.datasets.qrels import read_qrels


def _write(path: Path, text: str, newline: str = "\n") -> Path:
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


# --- qrels ---------------------------------------------------------------------------------------------


def test_read_qrels_trec_and_beir_formats(tmp_path: Path) -> None:
    trec = _write(tmp_path / "qrels.trec", "q1 0 d1 1\nq1 0 d2 0\nq2\t0  d1 2\n\n")
    beir = _write(
        tmp_path / "qrels.tsv", "\ufeffquery-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td1\t2\n", "\r\n"
    )
    expected = {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    assert read_qrels(trec).qrels == expected
    assert read_qrels(beir).qrels == expected
    with gzip.open(tmp_path / "qrels.tsv.gz", "wb") as handle:
        handle.write(beir.read_bytes())
    assert read_qrels(tmp_path / "qrels.tsv.gz").qrels == expected
    assert read_qrels(_write(tmp_path / "neg.trec", "q 0 d -1\n")).qrels == {"q": {"d": -1}}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("q1 0 d1 1\nq1 0 d2\n", 2, "found 3 columns, earlier lines have 4"),
        ("q1 0 d1 1 x\n", 1, "found 5 columns"),
        ("q1 0 d1 1\nq1 0 d2 yes\n", 2, "relevance 'yes' is not an integer"),
        ("q1 0 d1 1\nq1 0 d2 0x1\n", 2, "relevance '0x1' is not an integer"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t1\n", 3, "duplicate judgment"),
        ("", 1, "no judgments"),
    ],
)
def test_bad_qrels_lines_are_located(tmp_path: Path, content: str, line: int, problem: str) -> None:
    path = _write(tmp_path / "bad.qrels", content)
    with pytest.raises(InputError) as caught:
        read_qrels(path)
    assert str(caught.value).startswith(f"{path}:{line}: {problem}")


def test_real_beir_qrels(beir_mirror: Path) -> None:
    scifact = read_qrels(beir_mirror / "scifact" / "qrels" / "test.tsv").qrels
    assert len(scifact) == 300
    assert sum(len(judged) for judged in scifact.values()) == 339
    assert scifact["1"] == {"31715818": 1}
    nfcorpus = read_qrels(beir_mirror / "nfcorpus" / "qrels" / "test.tsv").qrels
    assert sum(len(judged) for judged in nfcorpus.values()) == 12334
    assert {rel for judged in nfcorpus.values() for rel in judged.values()} == {1, 2}
    assert nfcorpus["PLAIN-2"]["MED-2427"] == 2
