"""One output guard: no command writes over one of its inputs, a harness result, or a file inside a result.

An ``--output`` (evaluate, compare, fuse, qa-eval, qa-compare, rag-eval, rag-compare, table, report, diff) or
an UltraRAG ``save_path`` that names an input (its own path, ``./x/../x``, a symlink or a hard link to it), a
result's ``metrics.json``/``run.trec``/``provenance.json``, or any path inside a result folder (also through a
symlinked folder) is refused before anything is computed: one ``error:`` line naming the path, the option
and the fix, exit 2, no traceback, and the sha256 of every file under results, cache, data and the inputs
unchanged. The same record check serves the command line, the Python API and experiment steps; the write
path (:meth:`CommandResult.write_payload`) refuses a result file again.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import yaml
from fault_snapshot import assert_unchanged, snapshot
from report_fixtures import make_result

import harness
from harness.api.command_result import CommandResult
from harness.cli import main
from harness.core.errors import HarnessError, OutputError
from harness.core.output_guard import check_output, result_folder_holding

QRELS = {f"q{n}": {f"d{n}": 1, f"d{n + 1}": 2} for n in range(6)}


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """results/ with two real result folders, cache/, data/, inputs/ (qrels, runs, QA and RAG files); cwd."""
    root = {name: tmp_path / name for name in ("results", "cache", "data", "inputs")}
    for name, folder in root.items():
        folder.mkdir()
        monkeypatch.setenv(f"HARNESS_{name.upper()}_DIR", str(folder))
    monkeypatch.chdir(tmp_path)
    rng = random.Random(5)
    docs = [f"d{n}" for n in range(12)]
    for model in ("bm25", "dense"):
        run = {qid: {doc: rng.random() for doc in docs} for qid in QRELS}
        make_result(root["results"], "tiny", model, run, QRELS, {"qrels": "x"})
    inputs = root["inputs"]
    (inputs / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {r}\n" for q, row in QRELS.items() for d, r in row.items())
    )
    for name in ("run_a", "run_b"):
        lines = [
            f"{q} Q0 {d} {rank} {rng.random():.5f} {name}\n" for q in QRELS for rank, d in enumerate(docs, 1)
        ]
        (inputs / f"{name}.trec").write_text("".join(lines))
    answers = [{"id": n, "question": "q", "golden_answers": ["a"], "pred_answer": "a"} for n in range(3)]
    for name in ("preds_a", "preds_b"):
        (inputs / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in answers))
    rows = [
        {"id": n, "question": "q", "answer": "a", "contexts": ["c"], "ground_truth": "a"} for n in range(3)
    ]
    for name in ("rag_a", "rag_b"):
        (inputs / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.symlink("run_a.trec", inputs / "link_to_run.trec")
    os.link(inputs / "qrels.txt", inputs / "hard_qrels.txt")
    os.symlink(Path("..") / "results" / "tiny" / "bm25" / "metrics.json", inputs / "link_to_metrics.json")
    os.symlink(Path("..") / "results" / "tiny" / "bm25", inputs / "linked_result")
    return root


def refused(
    work: dict[str, Path], capsys: pytest.CaptureFixture[str], argv: list[str], *fragments: str
) -> None:
    """The command is one error line naming ``fragments``, exit 2, and nothing under the folders changed."""
    before = snapshot(*work.values())
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err
    assert_unchanged(before, *work.values())


EVALUATE = ["evaluate", "inputs/qrels.txt", "inputs/run_a.trec"]
COMPARE = ["compare", "inputs/qrels.txt", "inputs/run_a.trec", "inputs/run_b.trec"]
RESULT = "results/tiny/bm25"
INPUT_FIX = "an input of this command; write the output to another file"
RESULT_FIX = "write the output outside the result folders"

# (command line, what the error line must name): each an output the audit found silently replaced.
CLI_CASES = [
    ([*EVALUATE, "-o", "inputs/run_a.trec"], ["inputs/run_a.trec", "--output", "RUN", INPUT_FIX]),
    ([*EVALUATE, "-o", "inputs/qrels.txt"], ["--output", "QRELS", INPUT_FIX]),
    ([*EVALUATE, "-o", "inputs/../inputs/run_a.trec"], ["--output", "RUN", INPUT_FIX]),
    ([*EVALUATE, "-o", "inputs/link_to_run.trec"], ["--output", "RUN (inputs/run_a.trec)", INPUT_FIX]),
    ([*EVALUATE, "-o", "inputs/hard_qrels.txt"], ["--output", "QRELS (inputs/qrels.txt)", INPUT_FIX]),
    ([*EVALUATE, "-o", f"{RESULT}/metrics.json"], ["--output", "harness result", RESULT_FIX]),
    ([*EVALUATE, "-o", f"{RESULT}/run.trec"], ["--output", "harness result", RESULT_FIX]),
    ([*EVALUATE, "-o", f"{RESULT}/notes.json"], ["--output", "lies inside the harness result", RESULT_FIX]),
    ([*EVALUATE, "-o", "inputs/link_to_metrics.json"], ["--output", "harness result", RESULT_FIX]),
    ([*EVALUATE, "-o", "inputs/linked_result/new.json"], ["--output", "harness result", RESULT_FIX]),
    (["evaluate", "inputs/qrels.txt", f"{RESULT}/run.trec", "-o", f"{RESULT}/run.trec"], ["RUN", INPUT_FIX]),
    ([*COMPARE, "-o", "inputs/run_b.trec"], ["--output", "RUN_B", INPUT_FIX]),
    ([*COMPARE, "-o", "inputs/qrels.txt"], ["--output", "QRELS", INPUT_FIX]),
    ([*COMPARE, "-o", f"{RESULT}/provenance.json"], ["--output", "harness result", RESULT_FIX]),
    (["table", "results", "--output", f"{RESULT}/metrics.json"], ["--output", "harness result", RESULT_FIX]),
    (["table", "results", "--format", "png", "--output", f"{RESULT}/charts"], ["--output", RESULT_FIX]),
    (["table", RESULT, "--format", "png"], ["the default --output", f"{RESULT}/charts", RESULT_FIX]),
    (
        ["report", "results", "--output", f"{RESULT}/provenance.json"],
        ["--output", "harness result", RESULT_FIX],
    ),
    (["report", RESULT], ["the default --output", "report.html", RESULT_FIX]),
    (
        ["diff", RESULT, "results/tiny/dense", "-o", "results/tiny/dense/metrics.json"],
        ["--output", RESULT_FIX],
    ),
    (["qa-eval", "inputs/preds_a.jsonl", "--output", "inputs/preds_a.jsonl"], ["--output", INPUT_FIX]),
    (
        ["qa-compare", "inputs/preds_a.jsonl", "inputs/preds_b.jsonl", "--output", "inputs/preds_b.jsonl"],
        ["B.jsonl"],
    ),
    (["qa-eval", "inputs/preds_a.jsonl", "--output", f"{RESULT}/metrics.json"], ["--output", RESULT_FIX]),
]
# Refused once the lead marks these outputs role="output" (harness/api/run_file_commands.py: FuseOptions.output;
# harness/api/qa_commands.py: RAGEvalOptions.output, RAGCompareOptions.output).
CLI_CASES_NEEDING_ROLES = [
    (
        ["fuse", "inputs/run_a.trec", "inputs/run_b.trec", "--method", "rrf", "-o", "inputs/run_a.trec"],
        ["RUN", INPUT_FIX],
    ),
    (
        ["fuse", "inputs/run_a.trec", "inputs/run_b.trec", "--method", "rrf", "-o", f"{RESULT}/run.trec"],
        [RESULT_FIX],
    ),
    (["rag-eval", "inputs/rag_a.jsonl", "--output", "inputs/rag_a.jsonl"], ["--output", INPUT_FIX]),
    (
        ["rag-compare", "inputs/rag_a.jsonl", "inputs/rag_b.jsonl", "--output", "inputs/rag_b.jsonl"],
        [INPUT_FIX],
    ),
]


@pytest.mark.parametrize(
    ("argv", "fragments"),
    CLI_CASES + CLI_CASES_NEEDING_ROLES,
    ids=[" ".join(argv) for argv, _ in CLI_CASES + CLI_CASES_NEEDING_ROLES],
)
def test_an_output_naming_an_input_or_a_result_is_refused_before_any_work(work, capsys, argv, fragments):
    refused(work, capsys, argv, *fragments)


def _ultrarag_file(folder: Path, save_path: str) -> Path:
    section = {
        "ir_metrics": ["ndcg"],
        "ks": [5],
        "qrels_path": "inputs/qrels.txt",
        "run_path": "inputs/run_a.trec",
    }
    path = folder / "eval_trec_parameter.yaml"
    path.write_text(yaml.safe_dump({"evaluation": {**section, "save_path": save_path}}), encoding="utf-8")
    return path


# Refused once the lead marks ultrarag_save_path role="output" (run_file_commands.py: EvaluateOptions,
# CompareOptions; qa_commands.py: QAEvalOptions).
@pytest.mark.parametrize("save_path", ["inputs/run_a.trec", "inputs/qrels.txt", f"{RESULT}/metrics.json"])
def test_an_ultrarag_save_path_naming_an_input_or_a_result_is_refused(work, capsys, tmp_path, save_path):
    parameters = _ultrarag_file(tmp_path, save_path)
    refused(
        work, capsys, ["run", str(parameters), "--set", "output=inputs/exp"], save_path, "ultrarag_save_path"
    )
    assert not (work["inputs"] / "exp").exists()


def test_an_ultrarag_save_path_with_a_set_override_is_refused_too(work, capsys, tmp_path):
    parameters = _ultrarag_file(tmp_path, "inputs/out.json")
    argv = [
        "run",
        str(parameters),
        "--set",
        "output=inputs/exp",
        "--set",
        "evaluation.save_path=inputs/run_a.trec",
    ]
    refused(work, capsys, argv, "inputs/run_a.trec", INPUT_FIX)


# (function, its options) through the Python API: the same record check, one HarnessError line.
PYTHON_CASES = [
    ("evaluate", {"qrels": "inputs/qrels.txt", "run": "inputs/run_a.trec", "output": "inputs/run_a.trec"}),
    ("evaluate", {"qrels": "inputs/qrels.txt", "run": "inputs/run_a.trec", "output": f"{RESULT}/run.trec"}),
    (
        "compare",
        {
            "qrels": "inputs/qrels.txt",
            "baseline": "inputs/run_a.trec",
            "others": ["inputs/run_b.trec"],
            "output": "inputs/hard_qrels.txt",
        },
    ),
    ("table", {"results_dir": "results", "output": f"{RESULT}/metrics.json"}),
    ("report", {"results_dir": "results", "output": f"{RESULT}/provenance.json"}),
    ("report", {"results_dir": RESULT}),
    ("diff", {"a": RESULT, "b": "results/tiny/dense", "output": f"{RESULT}/metrics.json"}),
    ("qa_eval", {"predictions": "inputs/preds_a.jsonl", "output": "inputs/preds_a.jsonl"}),
]
PYTHON_CASES_NEEDING_ROLES = [
    (
        "evaluate",
        {"qrels": "inputs/qrels.txt", "run": "inputs/run_a.trec", "ultrarag_save_path": "inputs/run_a.trec"},
    ),
    (
        "evaluate",
        {
            "qrels": "inputs/qrels.txt",
            "run": "inputs/run_a.trec",
            "output": "inputs/o.json",
            "ultrarag_save_path": "inputs/o.json",
        },
    ),
    (
        "fuse",
        {"runs": ["inputs/run_a.trec", "inputs/run_b.trec"], "fuse": "rrf", "output": "inputs/run_b.trec"},
    ),
    ("rag_eval", {"data": "inputs/rag_a.jsonl", "output": "inputs/rag_a.jsonl"}),
]


@pytest.mark.parametrize(("function", "values"), PYTHON_CASES + PYTHON_CASES_NEEDING_ROLES)
def test_the_python_api_refuses_the_same_outputs(work, function, values):
    before = snapshot(*work.values())
    with pytest.raises(HarnessError) as error:
        getattr(harness, function)(**values)
    assert error.value.exit_code == 2 and "\n" not in str(error.value)
    assert "cannot write" in str(error.value) and (
        "write the output" in str(error.value) or "twice" in str(error.value)
    )
    assert_unchanged(before, *work.values())


def test_the_write_path_refuses_a_result_file_no_record_checked(work):
    before = snapshot(*work.values())
    for target in (f"{RESULT}/metrics.json", f"{RESULT}/new.json", "inputs/link_to_metrics.json"):
        with pytest.raises(OutputError, match="harness result"):
            CommandResult().write_payload(Path(target))
    assert_unchanged(before, *work.values())


def test_a_result_folder_is_one_holding_metrics_and_provenance(work):
    result = work["results"] / "tiny" / "bm25"
    assert result_folder_holding(result / "run.trec") == result.resolve()
    assert result_folder_holding(work["inputs"] / "linked_result" / "x") == result.resolve()
    assert result_folder_holding(work["results"] / "report.html") is None
    own = work["inputs"] / "mine"
    own.mkdir()
    (own / "metrics.json").write_text("{}")  # a user's folder with a metrics.json is not a result
    assert result_folder_holding(own / "metrics.json") is None
    assert check_output(own / "metrics.json") == own / "metrics.json"


def test_legitimate_outputs_are_still_written(work, capsys):
    """The guard refuses only what it should: a new file, and rewriting one's own output, still work."""
    for _ in range(2):  # the second run replaces its own earlier output (a folder with a metrics.json)
        assert main([*EVALUATE, "-o", "inputs/mine/metrics.json"]) == 0
    assert json.loads((work["inputs"] / "mine" / "metrics.json").read_text())["inputs"]["run"]["path"]
    assert main([*COMPARE, "-o", "inputs/comparison.json"]) == 0
    assert main(["table", "results", "--output", "inputs/table.md"]) == 0
    assert main(["diff", RESULT, "results/tiny/dense", "-o", "inputs/diff.json"]) == 0
    assert all((work["inputs"] / name).is_file() for name in ("comparison.json", "table.md", "diff.json"))
