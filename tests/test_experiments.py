"""``harness run``: experiment files, their steps, reuse, --set, --dry-run, and UltraRAG parameter files."""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from harness.api.commands import STEP_KINDS
from harness.cli import build_parser, main
from harness.datasets.beir import load_dataset
from harness.experiments import ultrarag
from harness.experiments.document import NOT_STEP_OPTIONS

EXAMPLES = REPO_ROOT / "configs" / "experiments"
TREC_EVAL_FIXTURES = REPO_ROOT / "tests" / "data" / "trec_eval"
KS = [1, 5, 10, 20, 50, 100]
# Step options the commands do not have: the UltraRAG result file, and the answer-metric profile
# (until qa-eval's --profile lands); a step writes into its folder instead of --output.
STEP_ONLY = {"ultrarag_save_path", "profile"}
COMMAND_ONLY = {"help", "output", "func"}
REQUIRED_ARGS = {
    "eval": ["--dataset", "d", "--model", "m"],
    "evaluate": ["q", "r"],
    "compare": ["q", "a", "b"],
    "qa-eval": ["p.jsonl"],
    "rag-eval": ["d.jsonl"],
    "table": [],
    "report": [],
    "reproduce": ["suite"],
}


def harness(*argv: str) -> int:
    return main([str(arg) for arg in argv])


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def write_trec_files(folder: Path, seed: int = 7) -> tuple[Path, Path, Path]:
    """Graded qrels for 10 queries and two runs: run A misses q10, both answer an unjudged q11."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    docs = [f"doc{n}" for n in range(40)]
    judged = {f"q{n}": {doc: rng.choice([0, 1, 1, 2]) for doc in rng.sample(docs, 6)} for n in range(1, 11)}
    qrels = folder / "qrels.txt"
    qrels.write_text(
        "".join(f"{qid} 0 {doc} {rel}\n" for qid, row in judged.items() for doc, rel in row.items())
    )
    paths = []
    for name, boost, skipped in (("run_new", 0.9, {"q10"}), ("run_old", 0.3, set())):
        lines = []
        for qid in [*judged, "q11"]:
            if qid in skipped:
                continue
            scores = {doc: rng.random() for doc in rng.sample(docs, 30)}
            for doc, rel in judged.get(qid, {}).items():
                if rel and rng.random() < boost:
                    scores[doc] = 1 + rng.random()
            ranked = sorted(scores.items(), key=lambda item: -item[1])
            lines += [
                f"{qid} Q0 {doc} {rank} {score:.6f} {name}\n" for rank, (doc, score) in enumerate(ranked, 1)
            ]
        path = folder / f"{name}.txt"
        path.write_text("".join(lines))
        paths.append(path)
    return qrels, paths[0], paths[1]


def ultrarag_by_definition(qrels: Path, run: Path, ks: list[int]) -> dict[str, dict[str, float]]:
    """Per-query values as UltraRAG defines them: pytrec_eval's recip_rank, map, ndcg_cut.k, P.k, recall.k
    over the queries pytrec_eval scores (judged and in the run)."""
    import pytrec_eval

    judged: dict[str, dict[str, int]] = {}
    for line in qrels.read_text().splitlines():
        qid, _, doc, rel = line.split()
        judged.setdefault(qid, {})[doc] = int(rel)
    ranked: dict[str, dict[str, float]] = {}
    for line in run.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        ranked.setdefault(qid, {})[doc] = float(score)
    measures = {"recip_rank", "map", *(f"{m}.{k}" for m in ("ndcg_cut", "P", "recall") for k in ks)}
    return pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(ranked)


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


# ------------------------------------------------------------------------------------ options = commands


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


@pytest.mark.parametrize("kind", sorted(STEP_KINDS))
def test_step_options_are_their_commands_options_with_the_same_defaults(kind: str) -> None:
    step = STEP_KINDS[kind]
    command = _subparser(step.command_name)
    dests = {action.dest for action in command._actions} - COMMAND_ONLY
    fields = {name: info for name, info in step.options.model_fields.items() if name not in NOT_STEP_OPTIONS}
    assert dests - set(fields) == set(), f"{kind}: command options missing from the step"
    assert set(fields) - dests <= STEP_ONLY, f"{kind}: step options the command lacks"
    defaults = vars(command.parse_args(REQUIRED_ARGS[kind]))
    for name, info in fields.items():
        if info.is_required() or info.default is None or name not in defaults:
            continue
        assert info.default == defaults[name], f"{kind}.{name}: {info.default!r} != {defaults[name]!r}"


# ------------------------------------------------------------------------------------------- examples


@pytest.mark.parametrize(
    "example", ["ultrarag-eval-trec", "ultrarag-eval-trec-pvalue", "ultrarag-evaluate", "answers", "rag"]
)
def test_each_example_runs_and_a_second_run_reuses_every_step(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(REPO_ROOT)  # the examples' paths are relative to the checkout, as from a fresh clone
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))  # rag's embeddings: not the checkout's
    source = EXAMPLES / f"{example}.yaml"
    overrides = ["--set", f"output={tmp_path / 'out'}"]
    if example.startswith("ultrarag"):
        overrides += ["--set", f"evaluation.save_path={tmp_path / 'saved' / 'evaluate_results.json'}"]
    assert harness("run", source, *overrides) == 0
    first = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert [step["status"] for step in first] == ["ran"] * len(first)
    written = {path: os.stat(path).st_mtime_ns for step in first for path in step["outputs"]}
    assert written and all(Path(path).is_file() for path in written)

    assert harness("run", source, *overrides) == 0
    second = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert [step["status"] for step in second] == ["reused"] * len(first)
    assert {path: os.stat(path).st_mtime_ns for path in written} == written  # nothing rewritten
    assert "0 ran" in capsys.readouterr().out
    resolved = yaml.safe_load((tmp_path / "out" / "experiment.yaml").read_text())
    assert [step["id"] for step in resolved["steps"]] == [step["id"] for step in first]


def test_a_changed_input_reruns_only_the_steps_that_read_it(tmp_path: Path) -> None:
    qrels, run_new, run_old = write_trec_files(tmp_path / "data")
    experiment = write_yaml(
        tmp_path / "x.yaml",
        {
            "params": {"qrels": str(qrels)},
            "output": str(tmp_path / "out"),
            "steps": [
                {
                    "kind": "evaluate",
                    "id": "new",
                    "qrels": "${qrels}",
                    "run": str(run_new),
                    "metrics": ["map"],
                },
                {
                    "kind": "evaluate",
                    "id": "old",
                    "qrels": "${qrels}",
                    "run": str(run_old),
                    "metrics": ["map"],
                },
            ],
        },
    )
    assert harness("run", experiment) == 0
    run_old.write_text(run_old.read_text().replace("run_old\n", "changed\n"))  # same ranking, new bytes
    assert harness("run", experiment) == 0
    statuses = [s["status"] for s in json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]]
    assert statuses == ["reused", "ran"]
    assert harness("run", experiment, "--set", "new.metrics=[mrr]") == 0  # a changed option reruns too
    statuses = [s["status"] for s in json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]]
    assert statuses == ["ran", "reused"]


# ------------------------------------------------------------------------------------ UltraRAG files


def _evaluate_trec_file(tmp_path: Path, qrels: Path, run: Path, **extra) -> Path:
    section = {"ir_metrics": ["mrr", "map", "recall", "ndcg", "precision"], "ks": KS}
    section |= {
        "qrels_path": str(qrels),
        "run_path": str(run),
        "save_path": str(tmp_path / "out" / "res.json"),
    }
    return write_yaml(tmp_path / "eval_trec_parameter.yaml", {"evaluation": section | extra})


def _check_evaluate_trec(tmp_path: Path, qrels: Path, run: Path) -> None:
    parameters = _evaluate_trec_file(tmp_path, qrels, run)
    assert harness("run", parameters, "--set", f"output={tmp_path / 'exp'}") == 0
    saved = json.loads((tmp_path / "out" / "res.json").read_text())
    # UltraRAG's shape and spellings: map, mrr, then per k ndcg@k, P@k, recall@k.
    assert list(saved) == ["map", "mrr", *(f"{m}@{k}" for k in KS for m in ("ndcg", "P", "recall"))]

    names = ["map", "mrr", *(f"{m}@{k}" for m in ("ndcg", "p", "recall") for k in KS)]
    assert harness("evaluate", qrels, run, "--metrics", *names, "--output", tmp_path / "h.json") == 0
    ours = json.loads((tmp_path / "h.json").read_text())["metrics"]
    for name in names:
        assert saved[ultrarag.ultrarag_metric_name(name)] == ours[name], name

    per_query = ultrarag_by_definition(qrels, run, KS)
    for key, trec in [("map", "map"), ("mrr", "recip_rank")] + [
        (f"{m}@{k}", f"{t}_{k}")
        for k in KS
        for m, t in (("ndcg", "ndcg_cut"), ("P", "P"), ("recall", "recall"))
    ]:
        assert saved[key] == pytest.approx(mean(row[trec] for row in per_query.values()), abs=1e-12), key
    fuller = json.loads((tmp_path / "out" / "res.harness.json").read_text())
    assert fuller["n_queries"] == len(per_query) and "per_query" in fuller


def test_ultrarag_evaluate_trec_equals_harness_evaluate_in_ultrarags_shape(tmp_path: Path) -> None:
    qrels, run_new, _ = write_trec_files(tmp_path / "data")
    _check_evaluate_trec(tmp_path, qrels, run_new)
    fuller = json.loads((tmp_path / "out" / "res.harness.json").read_text())
    assert fuller["qrels_queries_without_results"]["qids"] == ["q10"]  # averaged over queries in both
    assert fuller["run_queries_without_qrels"]["qids"] == ["q11"]


def test_ultrarag_evaluate_trec_on_trec_evals_test_files(tmp_path: Path) -> None:
    # trec_eval's qrels.test and results.test are its commented copies without the '#' lines (SOURCE.md).
    qrels, results = tmp_path / "qrels.test", tmp_path / "results.test"
    for target, source in ((qrels, "qrels.test.with-comments"), (results, "results.comment.test")):
        lines = (TREC_EVAL_FIXTURES / source).read_text().splitlines(keepends=True)
        target.write_text("".join(line for line in lines if not line.startswith("#")))
    _check_evaluate_trec(tmp_path, qrels, results)


def test_ultrarag_pvalue_gives_means_diff_p_value_and_significance(tmp_path: Path) -> None:
    qrels, run_new, run_old = write_trec_files(tmp_path / "data")
    section = {
        "ir_metrics": ["mrr", "map", "ndcg"],
        "ks": [5, 10],
        "n_resamples": 2000,
        "qrels_path": str(qrels),
        "run_new_path": str(run_new),
        "run_old_path": str(run_old),
        "save_path": str(tmp_path / "out" / "p.json"),
    }
    parameters = write_yaml(tmp_path / "p.yaml", {"evaluation": section})
    assert harness("run", parameters, "--set", f"output={tmp_path / 'exp'}") == 0
    saved = json.loads((tmp_path / "out" / "p.json").read_text())
    assert list(saved) == ["mrr", "map", "ndcg@5", "ndcg@10"]
    new, old = (
        ultrarag_by_definition(qrels, run_new, [5, 10]),
        ultrarag_by_definition(qrels, run_old, [5, 10]),
    )
    paired = sorted(set(new) | set(old))  # either run answered; a missing query scores 0
    for key, trec in [
        ("mrr", "recip_rank"),
        ("map", "map"),
        ("ndcg@5", "ndcg_cut_5"),
        ("ndcg@10", "ndcg_cut_10"),
    ]:
        row = saved[key]
        assert set(row) == {"A_mean", "B_mean", "diff", "p_value", "significant"}
        a = mean(new.get(q, {}).get(trec, 0.0) for q in paired)
        b = mean(old.get(q, {}).get(trec, 0.0) for q in paired)
        assert row["A_mean"] == pytest.approx(a, abs=1e-12) and row["B_mean"] == pytest.approx(b, abs=1e-12)
        assert row["diff"] == pytest.approx(a - b, abs=1e-12)
        assert 0 < row["p_value"] <= 1 and row["significant"] == (row["p_value"] < 0.05)

    # The same numbers as `harness compare` with UltraRAG's test: permutation, no correction.
    names = ["mrr", "map", "ndcg@5", "ndcg@10"]
    assert (
        harness(
            "compare",
            qrels,
            run_old,
            run_new,
            "--metrics",
            *names,
            "--correction",
            "none",
            "--n-resamples",
            "2000",
            "--output",
            tmp_path / "c.json",
        )
        == 0
    )
    rows = {row["metric"]: row for row in json.loads((tmp_path / "c.json").read_text())["comparisons"]}
    for name in names:
        assert saved[name]["p_value"] == rows[name]["p_value"]
        assert saved[name]["A_mean"] == rows[name]["mean_system"]


def test_ultrarag_evaluate_writes_per_question_lists_and_averages(tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    rows = [
        {"id": 0, "golden_answers": ["Paris"], "pred_answer": "Paris"},
        {"id": 1, "golden_answers": ["George Eliot"], "pred_answer": "It was George Eliot."},
        {"id": 2, "golden_answers": ["Mars"], "pred_answer": "Venus"},
    ]
    answers.write_text("".join(json.dumps(row) + "\n" for row in rows))
    document = {
        "benchmark": {
            "benchmark": {
                "path": str(answers),
                "key_map": {"gt_ls": "golden_answers", "pred_ls": "pred_answer"},
            }
        },
        "evaluation": {"metrics": ["em", "acc", "f1"], "save_path": str(tmp_path / "res.json")},
    }
    assert harness("run", write_yaml(tmp_path / "e.yaml", document), "--set", f"output={tmp_path / 'x'}") == 0
    saved = json.loads((tmp_path / "res.json").read_text())
    assert list(saved) == ["em", "acc", "f1", "avg_em", "avg_acc", "avg_f1"]
    assert saved["em"] == [1.0, 0.0, 0.0] and saved["acc"] == [1.0, 1.0, 0.0]
    assert saved["avg_acc"] == pytest.approx(2 / 3)
    fuller = json.loads((tmp_path / "res.harness.json").read_text())
    assert fuller["profile"] in ultrarag.answer_profiles()
    if ultrarag.ANSWER_PROFILE in ultrarag.answer_profiles():
        assert fuller["profile"] == ultrarag.ANSWER_PROFILE


def test_an_ultrarag_pipeline_file_finds_its_parameter_file(tmp_path: Path) -> None:
    qrels, run_new, _ = write_trec_files(tmp_path / "data")
    (tmp_path / "parameters").mkdir()
    _evaluate_trec_file(tmp_path, qrels, run_new).rename(tmp_path / "parameters" / "eval_trec_parameter.yaml")
    pipeline = write_yaml(
        tmp_path / "eval_trec.yaml",
        {"servers": {"evaluation": "servers/evaluation"}, "pipeline": ["evaluation.evaluate_trec"]},
    )
    assert harness("run", pipeline, "--set", f"output={tmp_path / 'exp'}") == 0
    assert json.loads((tmp_path / "out" / "res.json").read_text())["mrr"] > 0


# --------------------------------------------------------------------------------- plan, errors, --set


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels, run_new, run_old = write_trec_files(tmp_path / "data")
    experiment = write_yaml(
        tmp_path / "x.yaml",
        {
            "output": str(tmp_path / "out"),
            "steps": [
                {"kind": "compare", "qrels": str(qrels), "baseline": str(run_old), "others": str(run_new)},
                {"kind": "evaluate", "qrels": str(qrels), "run": str(run_new), "metrics": ["ndcg@10"]},
            ],
        },
    )
    assert harness("run", experiment, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "1. compare [compare]" in out and "2. evaluate [evaluate]" in out and "metrics: [ndcg@10]" in out
    assert out.count(": runs (") == 2
    assert not (tmp_path / "out").exists()
    assert harness("run", experiment) == 0
    capsys.readouterr()
    assert harness("run", experiment, "--dry-run", "--set", "evaluate.metrics=[map]") == 0
    out = capsys.readouterr().out
    assert "1. compare [compare] -> " in out and "reused (options, inputs and outputs unchanged)" in out
    assert "2. evaluate [evaluate]" in out and out.count(": runs (") == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"stpes": []}, "unknown key 'stpes'"),
        ({"steps": [{"kind": "evalute"}]}, "steps[1]: unknown kind 'evalute'"),
        (
            {"steps": [{"kind": "compare", "qrels": "q", "baselin": "a", "others": ["b"]}]},
            "step 'compare' (compare): unknown key 'baselin'",
        ),
        ({"steps": [{"kind": "evaluate", "qrels": "${qrel}", "run": "r"}]}, "unknown parameter ${qrel}"),
        (
            {"steps": [{"kind": "compare", "qrels": "q", "baseline": "a", "others": "b", "test": "t"}]},
            "test: 't'",
        ),
        ({"evaluation": {"qrel_path": "q", "run_path": "r"}}, "evaluation: unknown key 'qrel_path'"),
        ({"evaluation": {"ir_metrics": ["ndgc"], "run_path": "r"}}, "unknown metric 'ndgc'"),
    ],
)
def test_a_mistyped_key_is_one_error_naming_file_and_key(
    document: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_yaml(tmp_path / "bad.yaml", document)
    assert harness("run", path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}:") and message in err and len(err.splitlines()) == 1


def test_set_overrides_parameters_and_step_options(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qrels, run_new, run_old = write_trec_files(tmp_path / "data")
    experiment = write_yaml(
        tmp_path / "x.yaml",
        {
            "output": str(tmp_path / "out"),
            "params": {"run": str(run_old), "metrics": ["map"]},
            "steps": [
                {"kind": "evaluate", "id": "e", "qrels": str(qrels), "run": "${run}", "metrics": "${metrics}"}
            ],
        },
    )
    assert harness("run", experiment, "--set", f"run={run_new}", "--set", "e.per-query=true") == 0
    resolved = yaml.safe_load((tmp_path / "out" / "experiment.yaml").read_text())
    assert resolved["params"]["run"] == str(run_new) and resolved["steps"][0]["per_query"] is True
    assert resolved["steps"][0]["metrics"] == ["map"]  # a whole ${name} keeps the parameter's list
    report = json.loads((tmp_path / "out" / "e" / "evaluation.json").read_text())
    assert report["inputs"]["run"]["path"] == str(run_new) and "per_query" in report
    capsys.readouterr()
    assert harness("run", experiment, "--set", "rnu=x") == 2
    assert "--set rnu: " in capsys.readouterr().err


# ------------------------------------------------------------------ eval, table, report and reproduce


def _write_beir(folder: Path) -> Path:
    topics = {
        "cats": "cats purr and sleep in the sun",
        "dogs": "dogs fetch sticks and bark loudly",
        "birds": "birds build nests from twigs",
        "fish": "fish swim and breathe through gills",
    }
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as corpus:
        for n in range(24):
            topic = list(topics)[n % 4]
            corpus.write(
                json.dumps({"_id": f"d{n}", "title": topic, "text": f"{topics[topic]} note {n}"}) + "\n"
            )
    with open(folder / "queries.jsonl", "w") as queries:
        for topic in topics:
            queries.write(
                json.dumps({"_id": topic, "text": f"which {topic} {topics[topic].split()[1]}"}) + "\n"
            )
    with open(folder / "qrels" / "test.tsv", "w") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for n in range(24):
            qrels.write(f"{list(topics)[n % 4]}\td{n}\t{1 + n % 2}\n")
    return folder


def test_eval_compare_table_report_reproduce_run_then_reuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("data", "cache", "results"):
        monkeypatch.setenv(f"HARNESS_{name.upper()}_DIR", str(tmp_path / name))
    dataset = _write_beir(tmp_path / "toy")
    # A home-made folder's results are kept under its identity (name@checksums), not its folder name.
    results_name = load_dataset(dataset).name
    assert results_name.startswith("toy@")
    suite = write_yaml(
        tmp_path / "suite.yaml",
        {
            "name": "toy",
            "tolerance": 1.0,  # the check itself is tested elsewhere; here: the step runs and reuses
            "conditions": [
                {"model": "bm25", "dataset": str(dataset), "expected": {"ndcg@10": 0.5}, "source": "a test"}
            ],
        },
    )
    experiment = write_yaml(
        tmp_path / "x.yaml",
        {
            "name": "toy",
            "output": str(tmp_path / "out"),
            "params": {"models": ["bm25", "bm25-lucene"], "runs": f"${{results_dir}}/{results_name}"},
            "steps": [
                {
                    "kind": "eval",
                    "dataset": str(dataset),
                    "model": "${models}",
                    "top-k": 10,
                    "no_progress": True,
                },
                {
                    "kind": "compare",
                    "qrels": f"{dataset}/qrels/test.tsv",
                    "baseline": "${runs}/bm25@top_k=10/run.trec",
                    "others": ["${runs}/bm25-lucene@top_k=10/run.trec"],
                    "metrics": ["ndcg@10", "map"],
                    "n_resamples": 200,
                },
                {
                    "kind": "table",
                    "models": "${models}",
                    "baseline": "bm25",
                    "n_resamples": 200,
                    "format": "csv",
                },
                {"kind": "report", "n_resamples": 200},
                {"kind": "reproduce", "suite": str(suite), "top-k": 10, "no_progress": True},
            ],
        },
    )
    assert harness("run", experiment) == 0
    out = tmp_path / "out"
    first = json.loads((out / "steps.json").read_text())["steps"]
    assert [s["status"] for s in first] == ["ran", "ran", "ran", "ran", "reused"]  # reproduce: eval's result
    assert (out / "table" / "table.csv").read_text().count("bm25-lucene") >= 1
    assert (out / "report" / "report.html").stat().st_size > 1000
    assert "OK" in (out / "reproduce" / "reproduce.md").read_text()
    assert len(json.loads((out / "eval" / "results.json").read_text())["results"]) == 2

    report_written = (out / "report" / "report.html").stat().st_mtime_ns
    assert harness("run", experiment) == 0
    second = json.loads((out / "steps.json").read_text())["steps"]
    assert [s["status"] for s in second] == ["reused"] * 5
    assert (out / "report" / "report.html").stat().st_mtime_ns == report_written


@pytest.mark.slow
def test_scifact_dense_vs_bm25_example(
    e2e_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped scifact example end to end (MiniLM + BM25; the session folders share the encode)."""
    for key, value in e2e_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO_ROOT)
    source = EXAMPLES / "scifact-dense-vs-bm25.yaml"
    for expected in (["ran", "ran", "ran"], ["reused", "reused", "reused"]):
        assert harness("run", source, "--set", f"output={tmp_path}") == 0
        steps = json.loads((tmp_path / "steps.json").read_text())["steps"]
        if expected[0] == "ran":  # eval may find the pairs already computed by other slow tests
            assert [s["status"] for s in steps][1:] == expected[1:]
        else:
            assert [s["status"] for s in steps] == expected
    comparison = json.loads((tmp_path / "compare" / "comparison.json").read_text())
    ndcg = next(row for row in comparison["comparisons"] if row["metric"] == "ndcg@10")
    assert ndcg["mean_baseline"] == pytest.approx(0.68736, abs=5e-5)  # bm25s = MTEB's baseline
    assert ndcg["mean_system"] == pytest.approx(0.64508, abs=5e-5)  # MiniLM = MTEB's published value
    assert "bm25" in (tmp_path / "table" / "table.md").read_text()


@pytest.mark.parametrize(
    ("kind", "options", "field"),
    [
        (
            "compare",
            {"qrels": "q", "baseline": "a", "others": "b", "test": "bogus"},
            "test",
        ),  # significance's
        (
            "compare",
            {"qrels": "q", "baseline": "a", "others": "b", "score_precision": "x"},
            "score_precision",
        ),
        ("eval", {"dataset": "d", "model": "m", "executor": "x"}, "executor"),  # its own
        ("eval", {"dataset": "d", "model": "m", "qrels_duplicates": "x"}, "qrels_duplicates"),  # scoring's
        ("table", {"correction": "x"}, "correction"),
        ("table", {"format": "x"}, "format"),
        ("evaluate", {"qrels": "q", "run": "r", "score_precision": "x"}, "score_precision"),
    ],
)
def test_a_step_checks_the_choices_of_every_option_group_it_takes(kind, options, field):
    with pytest.raises(ValueError, match=f"{field}: 'x' is not one of|{field}: 'bogus' is not one of"):
        STEP_KINDS[kind].options(**options)
