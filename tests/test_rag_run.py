"""The rag-eval / rag-compare stages called without argparse (as ``harness run`` does): same reports as the CLI."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from test_qa_cli import run_cli, write_jsonl

from harness.core.errors import HarnessError
from harness.evaluation.comparison import SignificanceSettings
from harness.qa.rag.judge_client import REPEAT_TEMPERATURE, SINGLE_TEMPERATURE
from harness.qa.rag.rag_stage import Notice, RAGRunSettings, compare_rag_files, evaluate_rag_file
from harness.qa.rag.rows import RAGKeys

ROWS_A = [
    {"id": "q1", "answer": "one", "context_ids": ["d1", "x"], "reference_context_ids": ["d1"]},
    {"id": "q2", "answer": "", "context_ids": ["x", "d2"], "reference_context_ids": ["d2", "d3"]},
    {"id": "q2", "answer": "again", "context_ids": ["d2"], "reference_context_ids": ["d2"]},
    {"id": "q3", "answer": "three", "context_ids": ["x"], "reference_context_ids": []},
]
ROWS_B = [
    {"qid": "q1", "answer": "one", "context_ids": ["d1"], "reference_context_ids": ["d1"]},
    {"qid": "q2", "answer": "two", "context_ids": ["d2", "d3"], "reference_context_ids": ["d2", "d3"]},
    {"qid": "q4", "answer": "four", "context_ids": ["d9"], "reference_context_ids": ["d9"]},
]


def _settings(tmp_path: Path, **options) -> RAGRunSettings:
    return RAGRunSettings(metrics=["ids"], cache_dir=tmp_path / "cache", **options)


def test_evaluate_without_argparse_matches_the_cli_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_jsonl(tmp_path / "a.jsonl", ROWS_A)
    notices: list[Notice] = []
    report = evaluate_rag_file(data, _settings(tmp_path), per_question=True, notify=notices.append)

    # q1: 1 of 2 retrieved relevant, all of 1 reference; q2 (first line kept): 1/2, 1/2; q3: 0, undefined.
    aggregate = report.to_json()["aggregate"]
    assert aggregate["context_precision_id"]["mean"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert aggregate["context_recall_id"]["mean"] == pytest.approx((1.0 + 0.5) / 2)
    assert aggregate["context_recall_id"]["undefined_reasons"] == {"empty reference": 1}
    assert (
        [str(n) for n in notices]
        == [str(n) for n in report.notices]
        == [
            f"warning: {data}: 1 empty answer(s), scored 0",
            f"warning: {data}: 1 repeated id(s), e.g. 'q2' on lines 2 and 3; kept each id's first line",
        ]
    )
    assert report.summary_line().startswith(f"{data}: 3 questions, 1 empty answers, 1 repeated ids")

    output = tmp_path / "cli.json"
    argv = ["rag-eval", str(data), "--metrics", "ids", "--per-question", "--output", str(output)]
    code, _, err = run_cli([*argv, "--cache-dir", str(tmp_path / "cache")], capsys)
    assert code == 0
    assert json.loads(output.read_text()) == json.loads(json.dumps(report.to_json()))
    assert err.splitlines() == [str(n) for n in notices]


def test_compare_without_argparse_matches_the_cli_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file_a = write_jsonl(tmp_path / "a.jsonl", [{**row, "qid": row["id"]} for row in ROWS_A])
    file_b = write_jsonl(tmp_path / "b.jsonl", ROWS_B)
    settings = _settings(tmp_path, keys=RAGKeys(id="qid"))
    significance = SignificanceSettings(n_resamples=200, seed=7)
    report = compare_rag_files(file_a, file_b, settings, significance, notify=lambda notice: None)

    result = report.to_json()
    assert result["only_in_a"] == ["q3"] and result["only_in_b"] == ["q4"]
    # Context precision over q1..q4, a missing question scoring 0: A (0.5 + 0.5 + 0 + 0) / 4, B 3 / 4.
    precision = result["results"]["context_precision_id"]
    assert precision["mean_baseline"] == pytest.approx(0.25)
    assert precision["mean_system"] == pytest.approx(0.75)
    assert len(report.notices) == 2 and report.table_rows()[0][-2] == "p (holm)"

    output = tmp_path / "cli.json"
    argv = ["rag-compare", str(file_a), str(file_b), "--metrics", "ids", "--id-key", "qid", "--seed", "7"]
    argv += ["--n-resamples", "200", "--output", str(output), "--cache-dir", str(tmp_path / "cache")]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    assert json.loads(output.read_text()) == json.loads(json.dumps(result))
    assert out.splitlines()[: len(report.summary_lines())] == report.summary_lines()


def test_notices_come_before_an_error_and_default_to_logging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file_a = write_jsonl(tmp_path / "a.jsonl", ROWS_A)
    file_b = write_jsonl(tmp_path / "b.jsonl", [{**row, "id": "z" + row["qid"]} for row in ROWS_B])
    settings, significance = _settings(tmp_path), SignificanceSettings(n_resamples=100)
    with (
        caplog.at_level(logging.WARNING, logger="harness.qa.rag.rag_stage"),
        pytest.raises(HarnessError, match="share no question id"),
    ):
        compare_rag_files(file_a, file_b, settings, significance)
    assert [record.getMessage() for record in caplog.records] == [
        f"warning: {file_a}: 1 empty answer(s), scored 0",
        f"warning: {file_a}: 1 repeated id(s), e.g. 'q2' on lines 2 and 3; kept each id's first line",
    ]


def test_judge_settings_from_options_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HARNESS_JUDGE_BASE_URL", "OPENAI_BASE_URL", "HARNESS_JUDGE_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(HarnessError, match="--judge needs the server's base URL"):
        RAGRunSettings(judge=True).judge_settings()
    monkeypatch.setenv("HARNESS_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("HARNESS_JUDGE_MODEL", "from-env")
    single = RAGRunSettings(judge=True).judge_settings()
    assert (single.base_url, single.model, single.temperature) == (
        "http://127.0.0.1:9/v1",
        "from-env",
        SINGLE_TEMPERATURE,
    )
    repeated = RAGRunSettings(judge=True, judge_model="opt", judge_repeats=3).judge_settings()
    assert (repeated.model, repeated.temperature) == ("opt", REPEAT_TEMPERATURE)
    assert RAGRunSettings(judge_model="m", judge_temperature=0.7).judge_settings().temperature == 0.7
