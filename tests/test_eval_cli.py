"""`harness eval` on bad input: one clear line, non-zero exit, nothing written to results."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import main


def _eval(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--results-dir",
        str(tmp_path / "results"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--data-dir",
        str(tmp_path / "data"),
        "--no-progress",
        *extra,
    ]


def _assert_one_line_error(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> str:
    captured = capsys.readouterr()
    assert code != 0
    error_lines = [
        line for line in captured.err.splitlines() if line.startswith("error:") or "error:" in line
    ]
    assert len(error_lines) == 1, captured.err
    assert "Traceback" not in captured.err
    for needle in needles:
        assert needle in error_lines[0], error_lines[0]
    return error_lines[0]


def test_unknown_dataset_suggests_close_match(tmp_path: Path, capsys) -> None:
    code = main(_eval(tmp_path, "--dataset", "scifcat", "--model", "bm25"))
    _assert_one_line_error(capsys, code, "scifcat", "scifact")
    assert not (tmp_path / "results").exists()


def test_unknown_model_suggests_close_match(tmp_path: Path, capsys) -> None:
    code = main(_eval(tmp_path, "--dataset", "scifact", "--model", "all-MiniLM-L6-v3"))
    _assert_one_line_error(capsys, code, "all-MiniLM-L6-v3", "all-MiniLM-L6-v2")
    assert not (tmp_path / "results").exists()


def test_model_folder_without_weights(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    code = main(_eval(tmp_path, "--dataset", "scifact", "--model", str(folder)))
    _assert_one_line_error(capsys, code, str(folder))
    assert not (tmp_path / "results").exists()


def test_index_spec_faiss_rejects(tmp_path: Path, capsys) -> None:
    code = main(_eval(tmp_path, "--dataset", "scifact", "--model", "bm25", "--index", "IVFnonsense"))
    _assert_one_line_error(capsys, code, "IVFnonsense")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("top_k", ["0", "-5"])
def test_top_k_must_be_positive(tmp_path: Path, capsys, top_k: str) -> None:
    code = main(_eval(tmp_path, "--dataset", "scifact", "--model", "bm25", "--top-k", top_k))
    line = _assert_one_line_error(capsys, code, "--top-k", top_k)
    assert line.startswith("error: harness eval:") and "usage" not in line
    assert not (tmp_path / "results").exists()


def test_bm25_eval_end_to_end_and_reuse(tmp_path: Path, capsys, beir_mirror: Path) -> None:
    """The real pipeline on real scifact (BM25 is fast): files, summary row, then an unchanged rerun is reused."""
    args = _eval(tmp_path, "--dataset", "scifact", "--model", "bm25", "--mirror", str(beir_mirror))
    assert main(args) == 0
    first = capsys.readouterr().out
    row = next(re.split(r"\s{2,}", line) for line in first.splitlines() if line.startswith("scifact"))
    # MTEB's bm25s baseline on scifact: nDCG@10 0.68736, Recall@100 0.91267; Judged@10 beside nDCG@10
    # (scifact judges about 1.1 documents per query, so about a tenth of a top 10 is judged).
    assert row[1:6] == ["bm25", "bm25s", "0.6874", "0.09", "0.9127"]
    folder = tmp_path / "results" / "scifact" / "bm25"
    assert {p.name for p in folder.iterdir()} == {"run.trec", "metrics.json", "provenance.json"}
    stamp = (folder / "metrics.json").stat().st_mtime_ns
    assert main(args) == 0
    assert "(reused)" in capsys.readouterr().out
    assert (folder / "metrics.json").stat().st_mtime_ns == stamp
    # A setting that moves numbers (top-k) is not reused, and keeps its own folder beside the default one.
    assert main([*args, "--top-k", "100"]) == 0
    assert "(reused)" not in capsys.readouterr().out
    assert (folder / "metrics.json").stat().st_mtime_ns == stamp
    assert (folder.parent / "bm25@top_k=100" / "metrics.json").is_file()
