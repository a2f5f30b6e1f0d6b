"""``harness evaluate`` and ``harness compare`` end to end: files in, exit code, stdout/stderr, JSON out."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import pytrec_eval

from harness.cli import main
from harness.datasets.qrels import read_qrels
from harness.evaluation.comparison import PAIRING_RULE
from harness.evaluation.metrics import evaluate
from harness.evaluation.trec import write_run

HARNESS = Path(sys.executable).parent / "harness"


def _collection(tmp_path: Path) -> tuple[Path, Path, dict, dict]:
    """A TREC qrels file and a tied run over numeric docids; judged query "q9" has no results."""
    rng = random.Random(0)
    qrels, run = {}, {}
    for q in range(10):
        qid = f"q{q}"
        qrels[qid] = {str(d): rng.choice([0, 1, 2]) for d in rng.sample(range(1, 200), 12)}
        if q != 9:
            run[qid] = {str(d): rng.choice([0.5, 0.25, 1.0]) for d in rng.sample(range(1, 200), 120)}
    run["extra"] = {"1": 1.0}
    qrels_path = tmp_path / "qrels.txt"
    qrels_path.write_text(
        "".join(f"{qid} 0 {docid} {rel}\n" for qid, judged in qrels.items() for docid, rel in judged.items())
    )
    run_path = tmp_path / "run.trec"
    write_run(run_path, run, tag="test")
    return qrels_path, run_path, qrels, run


def test_seed_use_case_writes_json_at_the_given_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels_path, run_path, qrels, run = _collection(tmp_path)
    output = tmp_path / "out" / "metrics.json"
    metrics = ["mrr", "map", "recall", "ndcg", "precision"]
    ks = ["1", "5", "10", "20", "50", "100"]
    code = main(
        ["evaluate", str(qrels_path), str(run_path), "--metrics", *metrics, "--ks", *ks, "-o", str(output)]
    )
    assert code == 0
    payload = json.loads(output.read_text())
    expected_names = [f"{family}@{k}" for family in ("mrr", "map", "recall", "ndcg", "p") for k in ks]
    assert list(payload["metrics"]) == expected_names
    assert payload["metrics"] == evaluate(qrels, run, expected_names).aggregate
    direct = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.10", "P.5", "recall.100", "map_cut.20"}
    ).evaluate(run)
    for ours, theirs in (
        ("ndcg@10", "ndcg_cut_10"),
        ("p@5", "P_5"),
        ("recall@100", "recall_100"),
        ("map@20", "map_cut_20"),
    ):
        mean = sum(values[theirs] for values in direct.values()) / len(direct)
        assert payload["metrics"][ours] == pytest.approx(mean, abs=1e-12)
    assert payload["inputs"]["run"]["path"] == str(run_path) and len(payload["inputs"]["run"]["sha256"]) == 64
    assert "per_query" not in payload
    out = capsys.readouterr().out
    assert "ndcg@10" in out and f"wrote {output}" in out


def test_default_versus_complete_states_both_counts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels_path, run_path, _, _ = _collection(tmp_path)
    payloads = {}
    for flag in ([], ["--complete"]):
        output = tmp_path / f"result{len(flag)}.json"
        assert (
            main(
                [
                    "evaluate",
                    str(qrels_path),
                    str(run_path),
                    "--metrics",
                    "ndcg@10",
                    "map",
                    "-o",
                    str(output),
                    *flag,
                ]
            )
            == 0
        )
        payloads[bool(flag)] = json.loads(output.read_text())
    out = capsys.readouterr().out
    assert "averaged over 9 queries; 1 judged queries without results, not averaged" in out
    assert "averaged over 10 queries; 1 judged queries without results, scored as 0 (--complete)" in out
    assert "1 run queries without judgments skipped" in out
    default, complete = payloads[False], payloads[True]
    assert (default["n_queries"], complete["n_queries"]) == (9, 10)
    for payload in (default, complete):
        assert payload["qrels_queries_without_results"]["qids"] == ["q9"]
        assert payload["run_queries_without_qrels"]["count"] == 1
    assert complete["metrics"]["map"] == pytest.approx(default["metrics"]["map"] * 9 / 10, rel=1e-12)


def test_per_query_values(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels_path, run_path, qrels, run = _collection(tmp_path)
    assert main(["evaluate", str(qrels_path), str(run_path), "--metrics", "mrr@10", "--per-query"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines() if "\t" in line]
    expected = evaluate(qrels, run, ["mrr@10"]).per_query
    assert {qid: float(value) for qid, _, value in lines} == pytest.approx(
        {qid: round(values["mrr@10"], 4) for qid, values in expected.items()}
    )
    output = tmp_path / "pq.json"
    assert (
        main(
            [
                "evaluate",
                str(qrels_path),
                str(run_path),
                "--metrics",
                "mrr@10",
                "--per-query",
                "-o",
                str(output),
            ]
        )
        == 0
    )
    assert json.loads(output.read_text())["per_query"] == expected


GOOD_RUN = "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.8 t\n"
GOOD_QRELS = "q1 0 d1 1\n"


@pytest.mark.parametrize(
    ("qrels_text", "run_text", "where", "problem"),
    [
        (GOOD_QRELS, GOOD_RUN + "q1 Q0 d3 3 0.7\n", "run:3", "found 5 columns"),
        (GOOD_QRELS, GOOD_RUN + "q1 Q0 d3 3 0,7 t\n", "run:3", "score '0,7' is not a number"),
        (GOOD_QRELS + "q1 0 d2 high\n", GOOD_RUN, "qrels:2", "relevance 'high' is not an integer"),
        (GOOD_QRELS + "q1 0 d2\n", GOOD_RUN, "qrels:2", "found 3 columns"),
        (GOOD_QRELS, GOOD_RUN + "q1 Q0 d1 3 0.7 t\n", "run:3", "duplicate document 'd1' for query 'q1'"),
        (GOOD_QRELS, "", "run:1", "no run lines (empty file)"),
        ("", GOOD_RUN, "qrels:1", "no judgments in file"),
    ],
)
def test_bad_input_is_one_line_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, qrels_text: str, run_text: str, where: str, problem: str
) -> None:
    (tmp_path / "qrels").write_text(qrels_text)
    (tmp_path / "run").write_text(run_text)
    code = main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {tmp_path / where}: {problem}")


def test_unknown_metric_lists_the_valid_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels_path, run_path, _, _ = _collection(tmp_path)
    code = main(["evaluate", str(qrels_path), str(run_path), "--metrics", "ndcg@10", "hits@10"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: unknown metric 'hits@10'; valid metrics: ndcg, ndcg@k, recall@k, p@k")
    assert "r_cap@k" in lines[0]


def test_compare_three_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels_path, run_path, qrels, run = _collection(tmp_path)
    rng = random.Random(1)
    shuffled = {qid: {docid: rng.random() for docid in docs} for qid, docs in run.items()}
    del shuffled["q3"]
    write_run(tmp_path / "shuffled.trec", shuffled, tag="b")
    perfect = {qid: {docid: float(rel) for docid, rel in judged.items()} for qid, judged in qrels.items()}
    write_run(tmp_path / "perfect.trec", perfect, tag="c")
    outputs = []
    for name in ("one.json", "two.json"):
        args = [
            "compare",
            str(qrels_path),
            str(run_path),
            str(tmp_path / "shuffled.trec"),
            str(tmp_path / "perfect.trec"),
        ]
        assert (
            main(
                [
                    *args,
                    "--metrics",
                    "ndcg@10",
                    "map",
                    "--n-resamples",
                    "500",
                    "--correction",
                    "bonferroni",
                    "-o",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
        outputs.append(json.loads((tmp_path / name).read_text()))
    first, second = outputs
    assert [row["p_value"] for row in first["comparisons"]] == [
        row["p_value"] for row in second["comparisons"]
    ]
    assert first["baseline"] == "run" and first["settings"]["correction"] == "bonferroni"
    assert first["pairing_rule"] == PAIRING_RULE
    assert [(row["metric"], row["system"]) for row in first["comparisons"]] == [
        ("ndcg@10", "shuffled"),
        ("ndcg@10", "perfect"),
        ("map", "shuffled"),
        ("map", "perfect"),
    ]
    # q9 is judged and answered only by the perfect run: it is paired, as 0 for the others.
    assert first["runs"]["shuffled"]["missing_queries_scored_as_empty"]["qids"] == ["q3", "q9"]
    assert first["runs"]["run"]["missing_queries_scored_as_empty"]["qids"] == ["q9"]
    perfect_map = next(
        row for row in first["comparisons"] if row["system"] == "perfect" and row["metric"] == "map"
    )
    # difference = system - baseline, so a better system has an interval above 0.
    assert perfect_map["mean_system"] == 1.0 and perfect_map["significant"] and perfect_map["ci_low"] > 0
    assert all(row["n_queries"] == 10 for row in first["comparisons"])
    assert set(first["inputs"]) == {"qrels", "run:run", "run:shuffled", "run:perfect"}
    out = capsys.readouterr().out
    assert "A = run (baseline); 10 paired queries; two-sided paired permutation test; bonferroni" in out
    assert "shuffled: 2 paired queries without results, counted as 0: q3, q9" in out
    assert f"pairing: {PAIRING_RULE}" in out
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert header.split() == [
        "metric",
        "B",
        "A_mean",
        "B_mean",
        "Diff(B-A)",
        "95%",
        "CI",
        "n",
        "p",
        "p_adj",
        "sig",
    ]


def test_compare_needs_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels_path, run_path, _, _ = _collection(tmp_path)
    assert main(["compare", str(qrels_path), str(run_path)]) == 2
    missing = capsys.readouterr().err.strip()
    assert missing.startswith("error: harness compare:") and "\n" not in missing
    assert main(["compare", str(qrels_path), str(run_path), str(run_path)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: the same run file is given twice"


def test_installed_command_on_real_scifact_qrels(tmp_path: Path, beir_mirror: Path) -> None:
    qrels_path = beir_mirror / "scifact" / "qrels" / "test.tsv"
    qrels = read_qrels(qrels_path).qrels
    # Every relevant document at rank 2, behind a decoy: MRR 0.5 and P@1 0 on every query.
    run = {qid: {"decoy": 2.0, **{docid: 1.0 for docid in judged}} for qid, judged in qrels.items()}
    write_run(tmp_path / "run.trec", run, tag="t")
    done = subprocess.run(
        [
            str(HARNESS),
            "evaluate",
            str(qrels_path),
            str(tmp_path / "run.trec"),
            "--metrics",
            "mrr",
            "p@1",
            "r_cap@1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == ["mrr      0.5000", "p@1      0.0000", "r_cap@1  0.0000"]
    assert "averaged over 300 queries; 0 judged queries without results" in done.stdout
    (tmp_path / "bad.trec").write_text("1 Q0 31715818 1 0.5 t\n1 Q0 31715818 2 0.4 t\n")
    failed = subprocess.run(
        [str(HARNESS), "evaluate", str(qrels_path), str(tmp_path / "bad.trec")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode == 2
    assert (
        failed.stderr == f"error: {tmp_path / 'bad.trec'}:2: duplicate document '31715818' for query '1' "
        "(trec_eval rejects runs that list a (qid, docid) pair twice)\n"
    )
