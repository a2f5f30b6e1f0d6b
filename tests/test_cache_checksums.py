"""Cached re-rank scores are checked like the embedding shards: an edited, damaged or unchecked score file
is never used; its pairs are scored again with one warning naming the file and the fix (issue 33)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fault_snapshot import assert_unchanged, snapshot
from test_integrity import eval_args, toy_dataset

from harness.cli import main
from harness.evaluation.trec import read_run
from harness.retrieval.rerank import CrossEncoderReranker, RerankSettings, resolve_cross_encoder

RUN = {"q1": {"d0": 3.0, "d1": 2.0, "d2": 1.0}, "q2": {"d3": 2.0, "d4": 1.0}}
QUERIES = {"q1": "immune cells in cancer", "q2": "protein levels in mouse brain"}
PASSAGES = {
    "d0": "immune cells and tumor growth",
    "d1": "gene expression in human blood",
    "d2": "mouse brain protein study",
    "d3": "cancer risk increase in patients",
    "d4": "rna virus analysis method",
}


def _reranker(model_dir: Path, cache: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(
        resolve_cross_encoder(str(model_dir)), RerankSettings(depth=3, device="cpu"), cache
    )


def _edit_a_score(payload: dict) -> None:
    key = sorted(payload["scores"])[0]
    payload["scores"][key] = payload["scores"][key] + 100.0  # a plausible number, silently wrong


def _non_numeric_score(payload: dict) -> None:
    payload["scores"][sorted(payload["scores"])[0]] = "high"


def _no_checksum(payload: dict) -> None:
    del payload["sha256"]  # as the files written before checksums existed


def _non_finite_score_with_matching_checksum(payload: dict) -> None:
    from harness.retrieval.rerank import score_file_payload

    scores = dict(payload["scores"])
    scores[sorted(scores)[0]] = float("inf")
    payload.clear()
    payload.update(json.loads(json.dumps(score_file_payload(scores, []))))


DAMAGES = {
    "edited score": (_edit_a_score, "changed since it was written (sha256 differs)"),
    "non-numeric score": (_non_numeric_score, "changed since it was written (sha256 differs)"),
    "no checksum": (_no_checksum, "has no checksum"),
    "checksummed inf": (_non_finite_score_with_matching_checksum, "not a finite number"),
}


@pytest.mark.parametrize("damage", [*DAMAGES, "truncated file", "not JSON"])
def test_a_damaged_rerank_score_file_is_scored_again_with_a_warning(
    tmp_path: Path,
    tiny_cross_encoder: Path,
    predict_calls: list[int],
    caplog: pytest.LogCaptureFixture,
    damage: str,
):
    cache = tmp_path / "cache"
    first = _reranker(tiny_cross_encoder, cache).rerank(RUN, QUERIES, PASSAGES)
    (score_file,) = cache.glob("rerank/*/scores-*.json")
    text = score_file.read_text(encoding="utf-8")
    if damage == "truncated file":
        score_file.write_text(text[: len(text) // 2], encoding="utf-8")
        expected = "is unreadable"
    elif damage == "not JSON":
        score_file.write_bytes(b"\xff\xfe garbage")
        expected = "is unreadable"
    else:
        edit, expected = DAMAGES[damage]
        payload = json.loads(text)
        edit(payload)
        score_file.write_text(json.dumps(payload, allow_nan=True), encoding="utf-8")
    predict_calls.clear()

    with caplog.at_level(logging.WARNING, logger="harness"):
        again = _reranker(tiny_cross_encoder, cache)
        reranked = again.rerank(RUN, QUERIES, PASSAGES)

    assert reranked == first  # the damaged score was not used: every pair scored afresh
    assert predict_calls == [5] and again.pairs_cached == 0 and again.pairs_scored == 5
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(score_file) in warnings[0] and expected in warnings[0], warnings[0]
    assert "scored again" in warnings[0] and "harness cache clear --kind rerank" in warnings[0]
    # The damaged file is gone; the new one is checked and used by the next run, which scores nothing.
    assert not score_file.exists()
    caplog.clear()
    third = _reranker(tiny_cross_encoder, cache)
    assert third.rerank(RUN, QUERIES, PASSAGES) == first and third.pairs_cached == 5
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_an_untouched_score_file_is_used_as_written(tmp_path: Path, tiny_cross_encoder: Path, predict_calls):
    cache = tmp_path / "cache"
    _reranker(tiny_cross_encoder, cache).rerank(RUN, QUERIES, PASSAGES)
    (score_file,) = cache.glob("rerank/*/scores-*.json")
    payload = json.loads(score_file.read_text(encoding="utf-8"))
    assert set(payload) == {"format", "sha256", "scores", "truncated"} and len(payload["scores"]) == 5
    before = snapshot(cache)
    predict_calls.clear()
    again = _reranker(tiny_cross_encoder, cache)
    again.rerank(RUN, QUERIES, PASSAGES)
    assert predict_calls == [] and again.pairs_cached == 5
    assert_unchanged(before, cache)


def test_eval_with_an_edited_rerank_cache_gives_the_true_result(
    tmp_path: Path,
    tiny_cross_encoder: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
):
    """Through the command line: the edited score changes nothing in the result, and nothing else is touched."""
    inputs = toy_dataset(tmp_path / "toy")
    args = eval_args(tmp_path, inputs, "bm25", "--rerank", str(tiny_cross_encoder), "--rerank-depth", "5")
    args += ["--device", "cpu"]
    assert main(args) == 0, capsys.readouterr().err
    (result,) = (tmp_path / "results").glob("*/*")
    truth = read_run(result / "run.trec")
    for score_file in (tmp_path / "cache").glob("rerank/*/scores-*.json"):
        payload = json.loads(score_file.read_text(encoding="utf-8"))
        payload["scores"] = {key: -value for key, value in payload["scores"].items()}  # reverse every order
        score_file.write_text(json.dumps(payload), encoding="utf-8")
    before = snapshot(inputs, tmp_path / "data")
    caplog.clear()

    assert main([*args, "--force"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert read_run(result / "run.trec") == truth
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "sha256 differs" in warnings[0] and "scored again" in warnings[0], warnings
    assert_unchanged(before, inputs, tmp_path / "data")
