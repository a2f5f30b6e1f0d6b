"""Reading and writing TREC runs, and the trec_eval tie rule (qrels: test_data_qrels.py)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from harness.core.errors import HarnessError, InputError
from harness.evaluation.trec import read_run, sorted_ranking, top_k_ranking, write_run


def _write(path: Path, text: str, newline: str = "\n") -> Path:
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


def _random_run(seed: int, n_queries: int = 30, n_docs: int = 60) -> dict[str, dict[str, float]]:
    """Runs with heavy ties and numeric docids, whose string order differs from numeric order."""
    rng = random.Random(seed)
    run = {}
    for q in range(n_queries):
        docs = rng.sample(range(1, 400), n_docs)
        run[str(q * 7)] = {
            str(d): rng.choice([0.5, 0.25, 1.0, rng.random(), -rng.random() * 1e-9]) for d in docs
        }
    return run


# --- the tie rule -----------------------------------------------------------------------------------


def test_sorted_ranking_breaks_ties_by_docid_descending_as_strings() -> None:
    docs = {"2": 1.0, "10": 1.0, "9": 1.0, "1": 0.5, "100": 0.5, "3": 2.0}
    # As strings "9" > "2" > "10"; numerically it would be 10 > 9 > 2.
    assert [docid for docid, _ in sorted_ranking(docs)] == ["3", "9", "2", "10", "100", "1"]


def test_sorted_ranking_is_pytrec_evals_order() -> None:
    # Make one document relevant at a time: its reciprocal rank in pytrec_eval reveals its position.
    docs = {"1": 0.5, "2": 0.5, "10": 0.5, "11": 0.7, "9": 0.5, "100": 0.7, "a": 0.5, "B": 0.5, "0.5": 0.1}
    ours = [docid for docid, _ in sorted_ranking(docs)]
    for docid in docs:
        evaluator = pytrec_eval.RelevanceEvaluator({"q": {docid: 1}}, {"recip_rank"})
        reciprocal = evaluator.evaluate({"q": docs})["q"]["recip_rank"]
        assert ours.index(docid) + 1 == round(1 / reciprocal), docid


@pytest.mark.parametrize("seed", range(5))
def test_top_k_ranking_equals_the_head_of_the_full_sort(seed: int) -> None:
    run = _random_run(seed)
    for docs in run.values():
        full = sorted_ranking(docs)
        for k in (1, 2, 5, 10, 59, 60, 100):
            assert top_k_ranking(docs, k) == full[:k]


# --- runs ---------------------------------------------------------------------------------------------


def test_read_run_ignores_the_rank_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.trec", "q1 Q0 d1 7 0.5 tag\nq1 Q0 d2 1 0.9 tag\nq2 Q0 d1 1 -3 tag\n")
    assert read_run(path) == {"q1": {"d1": 0.5, "d2": 0.9}, "q2": {"d1": -3.0}}


@pytest.mark.parametrize("seed", range(3))
def test_write_then_read_gives_identical_numbers_and_trec_order(tmp_path: Path, seed: int) -> None:
    run = _random_run(seed)
    rng = np.random.default_rng(seed)
    # Awkward floats: float32-derived values, subnormal-ish, huge, negative zero.
    extra = [float(np.float32(x)) for x in rng.random(5)] + [5e-324, 1.7976931348623157e308, -0.0, 1 / 3]
    run["extra"] = {f"x{i}": value for i, value in enumerate(extra)}
    path = tmp_path / "run.trec"
    write_run(path, run, tag="sys")
    assert read_run(path) == run
    lines = path.read_text().splitlines()
    qids = [line.split()[0] for line in lines]
    assert qids == sorted(qids)
    for qid, docs in run.items():
        rows = [line.split() for line in lines if line.split()[0] == qid]
        assert [row[2] for row in rows] == [docid for docid, _ in sorted_ranking(docs)]
        assert [int(row[3]) for row in rows] == list(range(1, len(docs) + 1))
        assert all(row[1] == "Q0" and row[5] == "sys" for row in rows)


def test_write_run_top_k_keeps_the_best_documents(tmp_path: Path) -> None:
    run = _random_run(7)
    write_run(tmp_path / "run.trec", run, tag="t", top_k=5)
    back = read_run(tmp_path / "run.trec")
    assert back == {qid: dict(sorted_ranking(docs)[:5]) for qid, docs in run.items()}


def test_write_run_rejects_whitespace_in_ids(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="document id"):
        write_run(tmp_path / "run.trec", {"q": {"d 1": 1.0}}, tag="t")
    with pytest.raises(HarnessError, match="tag"):
        write_run(tmp_path / "run.trec", {"q": {"d": 1.0}}, tag="my tag")
    assert not (tmp_path / "run.trec").exists()  # atomic: nothing half-written


def test_any_whitespace_gz_crlf_and_bom_read_the_same(tmp_path: Path) -> None:
    run = _random_run(3)
    single = tmp_path / "single.trec"
    write_run(single, run, tag="t")
    text = single.read_text()
    expected = read_run(single)
    assert expected == run
    messy = "\ufeff" + "".join(
        "  " + "\t".join(line.split()[:3]) + "   " + " \t".join(line.split()[3:]) + " \n"
        for line in text.splitlines()
    )
    _write(tmp_path / "messy.trec", messy, newline="\r\n")
    assert read_run(tmp_path / "messy.trec") == expected
    with gzip.open(tmp_path / "run.trec.gz", "wt", encoding="utf-8") as handle:
        handle.write(text)
    assert read_run(tmp_path / "run.trec.gz") == expected


def test_queries_need_not_be_contiguous(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.trec", "b Q0 1 1 1 t\na Q0 1 1 2 t\nb Q0 2 2 3 t\na Q0 3 2 4 t\n")
    assert read_run(path) == {"a": {"1": 2.0, "3": 4.0}, "b": {"1": 1.0, "2": 3.0}}


def test_ids_that_look_like_numbers_or_null_stay_strings(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.trec", "001 Q0 NA 1 1.5 t\n001 Q0 null 2 1 t\n2 Q0 0.10 1 0 t\n")
    assert read_run(path) == {"001": {"NA": 1.5, "null": 1.0}, "2": {"0.10": 0.0}}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", 2, "found 5 columns"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 high t\n", 2, "score 'high' is not a number"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 nan t\n", 2, "score is NaN"),
        (
            "q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n",
            3,
            "duplicate document 'd1' for query 'q1'",
        ),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4abc t\n", 2, "score '0.4abc' is not a number"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 1_000 t\n", 2, "score '1_000' is not a number"),
    ],
)
def test_bad_run_lines_are_located(tmp_path: Path, content: str, line: int, problem: str) -> None:
    path = _write(tmp_path / "bad.trec", content)
    with pytest.raises(InputError) as caught:
        read_run(path)
    assert str(caught.value).startswith(f"{path}:{line}: {problem}")


def test_empty_run_file_is_an_error(tmp_path: Path) -> None:
    for content in ("", "\n\n"):
        path = _write(tmp_path / "empty.trec", content)
        with pytest.raises(InputError, match=rf"^{path}:\d+: no run lines \(empty file\)"):
            read_run(path)


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="run file not found"):
        read_run(tmp_path / "nope.trec")
    (tmp_path / "broken.trec.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(HarnessError, match="cannot read"):
        read_run(tmp_path / "broken.trec.gz")
    (tmp_path / "latin1.trec").write_bytes("q1 Q0 d1 1 0.5 t\nq1 Q0 caf\xe9 2 0.4 t\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        read_run(tmp_path / "latin1.trec")


def test_single_space_runs_take_the_columnar_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.evaluation.trec as runfile

    run = _random_run(11)
    write_run(tmp_path / "run.trec", run, tag="t")

    def refuse(path: Path) -> None:
        raise AssertionError("the line-by-line reader should not be needed")

    monkeypatch.setattr(runfile, "_read_run_careful", refuse)
    assert read_run(tmp_path / "run.trec") == run
    _write(tmp_path / "tabs.trec", "q\tQ0\td\t1\t0.5\tt\n")
    with pytest.raises(AssertionError, match="should not be needed"):
        read_run(tmp_path / "tabs.trec")


def test_fields_split_on_c_whitespace_only_as_trec_eval(tmp_path: Path) -> None:
    # A no-break space or \x1c is part of an id for trec_eval (C isspace); tabs and \v split.
    path = _write(tmp_path / "run.trec", "q1 Q0 d\u00a01 1 0.5 t\nq1\tQ0\vd\x1c2 2\f0.25 t\n")
    assert read_run(path) == {"q1": {"d\u00a01": 0.5, "d\x1c2": 0.25}}


def test_extra_columns_comments_and_c_numbers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = (
        "# a comment line\n"
        "q1 Q0 d1 1 0x1p-1 STANDARD more junk at end of lines\n"
        "   # an indented comment\n"
        "q1 Q0 CR#9 2 -INF t extra\n"
        "q1 Q0 d3 3 1e400 t\n"
    )
    with caplog.at_level("WARNING"):
        assert read_run(_write(tmp_path / "run.trec", text)) == {
            "q1": {"d1": 0.5, "CR#9": float("-inf"), "d3": float("inf")}
        }
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "2 lines have columns after the run tag" in warnings[0]


def test_queries_spanning_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.evaluation.trec as runfile

    run = _random_run(12)
    write_run(tmp_path / "run.trec", run, tag="t")
    lines = (tmp_path / "run.trec").read_text().splitlines(keepends=True)
    random.Random(0).shuffle(lines)  # queries interleaved all over the file
    (tmp_path / "shuffled.trec").write_text("".join(lines))
    monkeypatch.setattr(runfile, "_BLOCK_BYTES", 300)  # a few lines per batch
    monkeypatch.setattr(runfile, "_read_run_careful", None)  # must not be needed
    assert read_run(tmp_path / "run.trec") == run
    assert read_run(tmp_path / "shuffled.trec") == run
