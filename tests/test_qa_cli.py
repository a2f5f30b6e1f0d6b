"""``harness qa-eval`` and ``harness qa-compare`` through the real CLI: reports, bad input, pairing."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from harness.cli import main
from harness.core.fileio import file_digest
from harness.evaluation.comparison import QA_PAIRING_RULE

MOON = {"golden_answers": ["14 December 1972 UTC", "December 1972"]}
SEED_ROWS = [
    {"id": 0, "question": "When was the last moon landing?", **MOON, "pred_answer": "December 14, 1973"},
    {"id": 1, "question": "When was the last moon landing?", **MOON, "pred_answer": "in December 1972"},
    {"id": 2, "question": "q", **MOON, "pred_answer": "The documents do not provide this information."},
    {
        "id": 3,
        "question": "ASQA-style",
        "golden_answers": [["Paris"], ["Lyon", "Lyons"]],
        "pred_answer": "Lyons",
    },
]


def write_jsonl(path: Path, rows: list) -> Path:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_qa_eval_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    predictions = write_jsonl(tmp_path / "preds.jsonl", SEED_ROWS)
    output = tmp_path / "out" / "report.json"
    code, out, err = run_cli(["qa-eval", str(predictions), "--per-question", "--output", str(output)], capsys)
    assert code == 0, err
    report = json.loads(output.read_text())
    assert report["predictions"]["questions"] == 4
    assert report["predictions"]["sha256"] == file_digest(predictions)
    per_question = {row["id"]: row for row in report["per_question"]}
    assert per_question["0"]["em"] == 0.0 and per_question["0"]["f1"] == pytest.approx(4 / 7)
    assert per_question["1"]["acc"] == 1.0 and per_question["1"]["em"] == 0.0
    assert all(
        value == 0.0 for key, value in per_question["2"].items() if key.startswith(("em", "f1", "rouge"))
    )
    assert per_question["3"]["em"] == 1.0 and per_question["3"]["string_em"] == 0.5
    # Hand-worked means: EM 1/4; Acc (ids 1, 3) 2/4; F1: "in december 1972" vs "december 1972" has
    # P = 2/3, R = 1 -> 0.8, so (4/7 + 0.8 + 0 + 1) / 4.
    assert report["aggregate"]["em"] == pytest.approx(0.25)
    assert report["aggregate"]["acc"] == pytest.approx(0.5)
    assert report["aggregate"]["f1"] == pytest.approx((4 / 7 + 0.8 + 0 + 1) / 4)
    assert "SQuAD" in report["settings"]["normalisation"]
    assert report["settings"]["meteor"]["stages"] == ["exact", "stem", "synonym"]
    # Corpus unigram precision (13a tokens, lower-cased): "december 14 , 1973" 2 of 4, "in december 1972"
    # 2 of 3, the 8 tokens of the no-answer sentence 0, "lyons" 1 of 1 -> 5 of 16.
    assert report["bleu_corpus"]["precisions"][0] == pytest.approx(5 / 16)
    assert "em " in out and "corpus_bleu_4" in out and "METEOR stages: exact, stem, synonym" in out
    assert "normalisation: SQuAD" in out


def test_qa_eval_metrics_subset_and_custom_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"qid": "a", "answers": ["Paris"], "output": "paris"},
        {"qid": "b", "answers": "Rome", "output": "Milan"},
    ]
    predictions = write_jsonl(tmp_path / "custom.jsonl", rows)
    output = tmp_path / "report.json"
    argv = ["qa-eval", str(predictions), "--id-key", "qid", "--gold-key", "answers", "--pred-key", "output"]
    code, out, err = run_cli([*argv, "--metrics", "em,rouge_l", "--output", str(output)], capsys)
    assert code == 0, err
    report = json.loads(output.read_text())
    assert report["metrics"] == ["em", "rouge_l"]
    assert report["aggregate"] == {"em": 0.5, "rouge_l": 0.5}
    assert "METEOR" not in out


def test_qa_eval_multiple_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"id": 1, "choices": ["red", "green", "blue"], "golden_answers": [2], "pred_answer": "Blue."},
        {"id": 2, "choices": ["red", "green", "blue"], "golden_answers": 0, "pred_answer": "green"},
    ]
    output = tmp_path / "report.json"
    code, _, err = run_cli(
        [
            "qa-eval",
            str(write_jsonl(tmp_path / "mc.jsonl", rows)),
            "--metrics",
            "em",
            "--output",
            str(output),
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads(output.read_text())["aggregate"]["em"] == 0.5


def test_qa_eval_reads_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "preds.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(row) for row in SEED_ROWS) + "\n")
    code, out, err = run_cli(["qa-eval", str(path), "--metrics", "em"], capsys)
    assert code == 0, err
    assert "4 questions" in out


def test_empty_predictions_are_scored_zero_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {"id": "a", **MOON, "pred_answer": "December 1972"},
        {"id": "b", **MOON, "pred_answer": ""},
        {"id": "c", **MOON, "pred_answer": None},
    ]
    output = tmp_path / "report.json"
    code, out, err = run_cli(
        ["qa-eval", str(write_jsonl(tmp_path / "p.jsonl", rows)), "--per-question", "--output", str(output)],
        capsys,
    )
    assert code == 0
    assert "2 empty prediction(s), scored 0" in err
    report = json.loads(output.read_text())
    assert report["predictions"]["empty_predictions"] == 2
    assert report["aggregate"]["em"] == pytest.approx(1 / 3)
    empty_rows = [row for row in report["per_question"] if row["id"] in ("b", "c")]
    assert all(value == 0.0 for row in empty_rows for key, value in row.items() if key not in ("id", "line"))


def test_duplicate_ids_are_counted_and_first_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"id": 7, **MOON, "pred_answer": "December 1972"},
        {"id": 8, **MOON, "pred_answer": "no idea"},
        {"id": 7, **MOON, "pred_answer": "wrong"},
    ]
    output = tmp_path / "report.json"
    code, out, err = run_cli(
        ["qa-eval", str(write_jsonl(tmp_path / "d.jsonl", rows)), "--metrics", "em", "--output", str(output)],
        capsys,
    )
    assert code == 0
    assert "1 repeated id(s), e.g. '7' on lines 1 and 3" in err
    report = json.loads(output.read_text())
    assert report["predictions"]["duplicate_ids"] == 1
    assert report["predictions"]["duplicate_examples"] == [{"id": "7", "first_line": 1, "repeated_line": 3}]
    assert report["predictions"]["questions"] == 2
    assert report["aggregate"]["em"] == 0.5  # the first line of id 7 (an exact match) was kept


@pytest.mark.parametrize(
    ("rows", "fragments"),
    [
        ([SEED_ROWS[0], "{not json"], [":2: not valid JSON"]),
        ([SEED_ROWS[0], {"id": 1, **MOON}], [":2: missing key 'pred_answer'", "--pred-key"]),
        ([{"id": 1, "pred_answer": "x"}], [":1: missing key 'golden_answers'"]),
        ([{**SEED_ROWS[0]}, {"pred_answer": "x", **MOON}], [":2: missing key 'id'"]),
        (["[1, 2]"], [":1: expected a JSON object"]),
        (
            [{"id": 1, "golden_answers": [], "pred_answer": "x"}],
            [":1: 'golden_answers' has no non-empty gold"],
        ),
        ([{"id": 1, "golden_answers": ["a", ["b"]], "pred_answer": "x"}], [":1: 'golden_answers' mixes"]),
        ([{"id": 1, "golden_answers": {"text": "a"}, "pred_answer": "x"}], [":1: 'golden_answers' holds"]),
        ([{"id": 1, **MOON, "pred_answer": ["x"]}], [":1: 'pred_answer' is list, not a string"]),
        ([{"id": 1, "choices": ["a"], "golden_answers": 3, "pred_answer": "a"}], [":1:", "not an index"]),
        ([""], ["no predictions in the file"]),
    ],
)
def test_bad_input_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list, fragments: list[str]
) -> None:
    predictions = write_jsonl(tmp_path / "bad.jsonl", rows)
    code, _, err = run_cli(["qa-eval", str(predictions)], capsys)
    assert_one_line_error(code, err, str(predictions), *fragments)


def test_bad_options_are_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["qa-eval", str(tmp_path / "missing.jsonl")], capsys)
    assert_one_line_error(code, err, "predictions file not found")
    predictions = write_jsonl(tmp_path / "ok.jsonl", SEED_ROWS)
    code, _, err = run_cli(["qa-eval", str(predictions), "--metrics", "bleurt"], capsys)
    assert_one_line_error(code, err, "unknown metric 'bleurt'")


def test_not_utf8_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"id": 1, "golden_answers": "café", "pred_answer": "x"}\n'.encode("latin-1"))
    code, _, err = run_cli(["qa-eval", str(path)], capsys)
    assert_one_line_error(code, err, "not UTF-8")


def test_qa_eval_end_to_end_subprocess(tmp_path: Path) -> None:
    predictions = write_jsonl(tmp_path / "preds.jsonl", SEED_ROWS)
    harness = Path(sys.executable).parent / "harness"
    done = subprocess.run(
        [str(harness), "qa-eval", str(predictions), "--metrics", "em,f1,meteor"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "f1" in done.stdout and "METEOR stages:" in done.stdout
    bad = write_jsonl(tmp_path / "bad.jsonl", ["{oops"])
    done = subprocess.run([str(harness), "qa-eval", str(bad)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {bad}:1: not valid JSON")
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------------------------------------------
# qa-compare
# ---------------------------------------------------------------------------------------------------------


def answers(n: int, correct: set[int], start: int = 0) -> list[dict]:
    """n questions with gold "December 1972"; the ids in ``correct`` are answered exactly, the rest wrongly."""
    return [
        {"id": i, **MOON, "pred_answer": "December 1972" if i in correct else "June 1969"}
        for i in range(start, start + n)
    ]


def test_qa_compare_pairs_by_id_and_tests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A answers ids 0..29 wrongly; B answers ids 2..31 rightly: 32 ids paired, an id missing from a file
    # scores 0 for that system (the pairing rule of `harness compare`), so B is better on 30 of them.
    file_a = write_jsonl(tmp_path / "a.jsonl", answers(30, set()))
    file_b = write_jsonl(tmp_path / "b.jsonl", answers(30, set(range(40)), start=2))
    output = tmp_path / "cmp.json"
    code, out, err = run_cli(["qa-compare", str(file_a), str(file_b), "--output", str(output)], capsys)
    assert code == 0, err
    assert f"2 id(s) only in {file_a}" in err and f"2 id(s) only in {file_b}" in err
    report = json.loads(output.read_text())
    assert report["paired_questions"] == 32
    assert report["pairing_rule"] == QA_PAIRING_RULE
    assert report["only_in_a"] == {"count": 2, "examples": ["0", "1"]}
    assert report["only_in_b"] == {"count": 2, "examples": ["30", "31"]}
    assert list(report["results"]) == ["em", "acc", "f1"]
    em = report["results"]["em"]
    assert em["n_queries"] == 32
    assert (em["mean_baseline"], em["mean_system"], em["difference"]) == (0.0, 30 / 32, 30 / 32)
    assert em["ci_high"] == 1.0 and 0.75 < em["ci_low"] < em["difference"]
    # Every one of 10000 random sign flips is less extreme than the observed all-positive difference.
    assert em["p_value"] == pytest.approx(1 / 10001)
    assert em["p_value_adjusted"] >= em["p_value"] and em["significant"] is True
    assert report["significance"]["n_resamples"] == 10000
    assert "paired questions: 32" in out and "METEOR" not in out
    assert f"pairing: {QA_PAIRING_RULE}" in out


def test_qa_compare_identical_systems_not_significant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = answers(12, {0, 3, 5, 7})
    file_a, file_b = write_jsonl(tmp_path / "a.jsonl", rows), write_jsonl(tmp_path / "b.jsonl", rows)
    output = tmp_path / "cmp.json"
    code, _, err = run_cli(
        ["qa-compare", str(file_a), str(file_b), "--metrics", "em,meteor", "--output", str(output)], capsys
    )
    assert code == 0, err
    results = json.loads(output.read_text())["results"]
    assert set(results) == {"em", "meteor"}
    assert all(
        row["p_value"] == 1.0 and not row["significant"] and row["difference"] == 0.0
        for row in results.values()
    )


def test_qa_compare_ttest_uses_per_question_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scipy import stats

    correct_a, correct_b = {0, 1, 2, 5}, {0, 1, 2, 3, 4, 6, 7}
    file_a = write_jsonl(tmp_path / "a.jsonl", answers(10, correct_a))
    file_b = write_jsonl(tmp_path / "b.jsonl", answers(10, correct_b))
    output = tmp_path / "cmp.json"
    argv = [
        "qa-compare",
        str(file_a),
        str(file_b),
        "--metrics",
        "em",
        "--test",
        "ttest",
        "--correction",
        "none",
    ]
    code, _, err = run_cli([*argv, "--output", str(output)], capsys)
    assert code == 0, err
    em = json.loads(output.read_text())["results"]["em"]
    em_a = [float(i in correct_a) for i in range(10)]
    em_b = [float(i in correct_b) for i in range(10)]
    assert em["p_value"] == pytest.approx(stats.ttest_rel(em_a, em_b).pvalue)
    assert em["p_value_adjusted"] == em["p_value"]
    assert em["difference"] == pytest.approx(0.3)  # system (B) - baseline (A)


def test_qa_compare_counts_gold_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows_b = answers(5, {0})
    rows_b[3]["golden_answers"] = ["June 1969"]
    file_a = write_jsonl(tmp_path / "a.jsonl", answers(5, {0}))
    file_b = write_jsonl(tmp_path / "b.jsonl", rows_b)
    output = tmp_path / "cmp.json"
    code, _, err = run_cli(["qa-compare", str(file_a), str(file_b), "--output", str(output)], capsys)
    assert code == 0, err
    assert "gold answers differ for 1 shared id(s), e.g. '3'" in err
    report = json.loads(output.read_text())
    assert report["gold_differs"] == {"count": 1, "examples": ["3"]}
    assert report["results"]["em"]["mean_system"] == pytest.approx(
        2 / 5
    )  # id 3 is right against B's own gold


def test_qa_compare_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file_a = write_jsonl(tmp_path / "a.jsonl", answers(3, {0}))
    disjoint = write_jsonl(tmp_path / "b.jsonl", answers(3, {0}, start=10))
    code, _, err = run_cli(["qa-compare", str(file_a), str(disjoint)], capsys)
    assert_one_line_error(code, err, "share no question id")
    broken = write_jsonl(tmp_path / "d.jsonl", [answers(1, set())[0], '{"id": 2,'])
    code, _, err = run_cli(["qa-compare", str(file_a), str(broken)], capsys)
    assert_one_line_error(code, err, f"{broken}:2: not valid JSON")
    code, _, err = run_cli(["qa-compare", str(file_a), str(file_a), "--alpha", "1.5"], capsys)
    assert_one_line_error(code, err, "--alpha", "must be between 0 and 1")


def test_cli_choices_match_the_toolkit() -> None:
    """The CLI lists the choices without importing numpy; they must be the toolkit's own."""
    from types import SimpleNamespace

    from harness.api.qa_commands import QACompareOptions
    from harness.core.options import cli_spec
    from harness.evaluation import significance as significance

    # The choices qa-compare's parser is generated from (harness.cli.common is gone).
    spec = {name: cli_spec(QACompareOptions.model_fields[name]).choices for name in ("test", "correction")}
    common = SimpleNamespace(PAIRED_TESTS=spec["test"], CORRECTIONS=spec["correction"])

    assert common.PAIRED_TESTS == significance.TESTS
    assert common.CORRECTIONS == significance.CORRECTIONS
