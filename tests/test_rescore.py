"""``harness rescore``: one run scored as other tools would, the waterfall of settings, the queries named."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.cli import main
from harness.core.errors import HarnessError
from harness.evaluation.metrics import evaluate, parse_metric_specs
from harness.evaluation.tool_protocols import TOOLS, score_under, tool_protocol
from harness.evaluation.trec import read_run_columns, write_run

HARNESS = Path(sys.executable).parent / "harness"


def _files(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """Graded TREC qrels and a tied run: queries answered with self-hits, one judged query unanswered."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    qrels, run = {}, {}
    for q in range(12):
        qid = f"q{q}"
        qrels[qid] = {f"d{d}": rng.choice([0, 1, 2, 3]) for d in rng.sample(range(60), 6)}
        if q != 11:
            docs = {
                f"d{d}": rng.choice([0.5, 0.25, 1.0, 0.1, 0.1 + 1e-12]) for d in rng.sample(range(60), 40)
            }
            docs[qid] = 2.0  # the query's own document, ranked first
            run[qid] = docs
    qrels["q0"]["q0"] = 1  # a self-hit judged relevant, as a duplicate question can be
    qrels_path = folder / "qrels" / "test.tsv"
    qrels_path.parent.mkdir(exist_ok=True)
    rows = [f"{qid}\t{docid}\t{grade}" for qid, judged in qrels.items() for docid, grade in judged.items()]
    qrels_path.write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    run_path = folder / "run.trec"
    write_run(run_path, run, tag="test")
    return qrels_path, run_path


def test_each_tool_is_its_protocol_and_the_steps_add_up(tmp_path: Path) -> None:
    qrels, run = _files(tmp_path / "collection")
    result = harness.rescore(run=run, qrels=qrels, metric="ndcg@5", top_queries=3)
    assert [fall.tool.name for fall in result.waterfalls] == list(TOOLS)
    assert result.trec_eval == evaluate(qrels, run, ["ndcg@5"]).aggregate["ndcg@5"]  # harness evaluate
    spec = parse_metric_specs(["ndcg@5"])[0]
    columns = read_run_columns(run)
    from harness.datasets.qrels import read_qrels

    judged = read_qrels(qrels).qrels
    for fall in result.waterfalls:
        expected = score_under(fall.tool.protocol, judged, columns, spec).mean
        assert fall.value == expected, fall.tool.name
        assert math.isclose(
            result.trec_eval + sum(step.change for step in fall.steps), fall.value, abs_tol=1e-12
        )
        assert all(len(step.queries) <= 3 for step in fall.steps)
    by_tool = {fall.tool.name: fall for fall in result.waterfalls}
    # pyserini's --remove-query drops every self-hit ranked first: the step moves, query q0 (judged) among others
    removal = next(step for step in by_tool["pyserini"].steps if step.setting == "self-hits")
    assert removal.change != 0 and removal.queries
    # sentence-transformers averages the judged query the run lacks (q11) as 0
    averaging = next(step for step in by_tool["st-ir"].steps if step.setting == "averaging")
    assert averaging.change < 0
    text = result.render()
    assert "st-ir: nDCG@5" in text and "self-hits: kept -> removed" in text
    assert "tie order: docid desc -> docid asc" in text


def test_the_dataset_of_a_qrels_path_sets_mteb_identical_id_rule(tmp_path: Path) -> None:
    qrels, run = _files(tmp_path / "arguana")
    result = harness.rescore(run=run, qrels=qrels, tools=["mteb"], metric="ndcg@10")
    assert result.dataset == "arguana"
    steps = {step.setting: step for step in result.waterfalls[0].steps}
    assert steps["self-hits"].change != 0
    assert "task ArguAna: ignore_identical_ids=True" in result.render()
    kept = harness.rescore(run=run, qrels=qrels, tools=["mteb"], dataset="scifact")
    assert "self-hits" not in {step.setting for step in kept.waterfalls[0].steps}


def test_bright_removes_the_excluded_ids(tmp_path: Path) -> None:
    qrels, run = _files(tmp_path / "collection")
    excluded = tmp_path / "excluded.json"
    excluded.write_text(json.dumps({"q1": ["q1"], "q2": ["N/A"]}))  # q1 ranks itself first, unjudged
    result = harness.rescore(
        run=run, qrels=qrels, tools=["bright"], metric="map@100", excluded_ids=excluded, top_queries=5
    )
    step = next(step for step in result.waterfalls[0].steps if step.setting == "excluded ids")
    assert [qid for qid, _ in step.queries] == ["q1"] and step.change > 0
    assert "excluded_ids" in result.inputs


def test_json_output_holds_every_waterfall(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels, run = _files(tmp_path / "collection")
    out = tmp_path / "rescore.json"
    code = main(["rescore", str(run), "--qrels", str(qrels), "--as", "st-ir", "ranx", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    payload = json.loads(out.read_text())
    assert set(payload["tools"]) == {"st-ir", "ranx"}
    st = payload["tools"]["st-ir"]
    assert st["value"] == pytest.approx(
        st["trec_eval"] + sum(step["change"] for step in st["steps"]), abs=1e-12
    )
    assert st["settings"]["tie_order"] == "docid asc" and payload["inputs"]["run"]["path"] == str(run)
    assert f"{st['value']:.6f}" in printed and f"wrote {out}" in printed


def test_a_tool_not_emulated_is_one_line_listing_the_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    qrels, run = _files(tmp_path / "collection")
    assert main(["rescore", str(run), "--qrels", str(qrels), "--as", "trec-tools"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "invalid choice: 'trec-tools'" in error and all(tool in error for tool in TOOLS)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--as", "st-ir", "--metric", "bpref"], "--metric bpref: st-ir does not compute it; it computes"),
        (["--as", "bright", "--metric", "mrr@10"], "--metric mrr@10: bright does not compute it"),
        (["--metric", "ndcg@x"], "unknown metric 'ndcg@x'"),
        (["--dataset", "arguanna"], "--dataset arguanna: not a known dataset; did you mean arguana"),
    ],
)
def test_bad_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, arguments: list[str], message: str
) -> None:
    qrels, run = _files(tmp_path / "collection")
    assert main(["rescore", str(run), "--qrels", str(qrels), *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and message in error


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('["q1"]', "expected a JSON object"),
        ('{"q1": "d1"}', "query 'q1': not a list of document ids"),
        ('{"q1": [1]}', "query 'q1': not a list of document ids"),
        ("{", "not valid JSON"),
    ],
)
def test_a_bad_excluded_ids_file_is_one_line_naming_it(tmp_path: Path, content: str, message: str) -> None:
    qrels, run = _files(tmp_path / "collection")
    excluded = tmp_path / "excluded.json"
    excluded.write_text(content)
    with pytest.raises(HarnessError, match=message) as raised:
        harness.rescore(run=run, qrels=qrels, tools=["bright"], excluded_ids=excluded)
    assert str(excluded) in str(raised.value) and "\n" not in str(raised.value)


def test_a_cutoff_the_tool_does_not_report_by_default_is_noted(tmp_path: Path) -> None:
    qrels, run = _files(tmp_path / "collection")
    result = harness.rescore(run=run, qrels=qrels, tools=["st-ir", "ranx"], metric="ndcg@100")
    notes = {fall.tool.name: fall.notes(result.spec) for fall in result.waterfalls}
    assert "st-ir reports ndcg at k = 10 by default; @100 is its value with k added" in notes["st-ir"]
    assert not any("by default" in note for note in notes["ranx"])


def test_the_mteb_note_says_when_no_dataset_is_known(tmp_path: Path) -> None:
    qrels, run = _files(tmp_path / "collection")
    result = harness.rescore(run=run, qrels=qrels, tools=["mteb"])
    assert result.dataset is None
    assert "ignore_identical_ids assumed False" in result.render()
    assert tool_protocol("mteb").protocol.drop_self_hits is False


@pytest.mark.slow
def test_a_real_scifact_run(tmp_path: Path, e2e_env: dict[str, str], beir_mirror: Path) -> None:
    """BM25 on scifact through the installed command: trec_eval's value is the run's recorded nDCG@10."""
    results = tmp_path / "results"
    done = subprocess.run(
        [str(HARNESS), "eval", "--dataset", "scifact", "--model", "bm25", "--results-dir", str(results)],
        env=e2e_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = results / "scifact" / "bm25" / "run.trec"
    qrels = beir_mirror / "scifact" / "qrels" / "test.tsv"
    out = tmp_path / "rescore.json"
    done = subprocess.run(
        [str(HARNESS), "rescore", str(run), "--qrels", str(qrels), "-o", str(out)],
        env=e2e_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(out.read_text())
    recorded = json.loads((results / "scifact" / "bm25" / "metrics.json").read_text())
    assert payload["trec_eval"] == pytest.approx(recorded["metrics"]["ndcg@10"], abs=1e-12)
    assert payload["dataset"] == "scifact" and set(payload["tools"]) == set(TOOLS)
    for tool in payload["tools"].values():
        assert tool["value"] == pytest.approx(
            payload["trec_eval"] + sum(s["change"] for s in tool["steps"]), abs=1e-12
        )
